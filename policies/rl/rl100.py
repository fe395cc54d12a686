"""RL-100 after imitation (arXiv 2510.14830): offline RL gated by offline policy evaluation, online RL, a one-step head.

The imitation stage (a diffusion policy on the demonstrations) is `policies.imitation.train_bc_run`; the rounds after
it are `Rl100Round`, one `policies.rl.rounds.RoundUpdate` whose stage follows from the round number:

* **offline** (rounds 1 … ``offline_rounds``): chunk-level IQL critics (`policies.rl.iql`) and a dynamics ensemble
  (`policies.rl.ope`) are fit on every transition so far (demonstrations + the robot's episodes, interventions
  included: IQL learns from any behaviour); then ``ppo_iterations`` PPO iterations over the denoising chain
  (`policies.rl.chain_ppo`, ε 0.25) at the recorded observation windows, advantage A = min Q(s, a) − V(s) of the
  executed part of each sampled chunk. Every ``ope_every`` iterations AM-Q scores the candidate against the
  reference (the deployed policy at first) on the same start windows, elites and noise, and the reference advances
  only when the candidate is ≥ ``min_improvement`` better (`policies.rl.ope.compare`). What is deployed is the last
  accepted reference; a round that accepted nothing deploys nothing (the actor keeps its version and collects
  another round's worth of episodes with it).
* **the trust region** (both stages): after every PPO iteration the policy's executed actions at fixed windows (the
  OPE start windows; online, the deployed version's) are compared with the deployed policy's under the same noise
  (`policies.rl.ope.action_shift`, which says why); the iteration that moves them more than ``max_action_shift`` is
  undone and the round's PPO ends there, so OPE judges, and the online stage deploys, only what stayed inside. On
  push-T the shift only grew with iterations (0.08 action std at 25, 0.21 at 200), so nothing later would return.
* **online** (the next ``online_rounds``): on-policy PPO (ε 0.2) on the denoising chains the robot ran, as the
  paper does. The version deployed before an online round explores: the learner exports it as a chain sampler whose
  per-step noise is an ONNX input (`policies.rl.chain.ChainSampler`), the actor records every chunk's noise, and
  the round replays those chains with the version's checkpoint (checked against the actions the robot was asked for)
  and scores each chunk the policy executed by GAE(λ = ``gae_lambda``) from a value critic on the episodes' credited
  returns (`policies.rl.online_chains`). ``online_epochs`` passes over the chains, each kept only inside the trust
  region; deployed without the OPE gate: the robot's next episodes are the evaluation. No IQL critic is fit.
* **distill** (the last round, when ``distill``): a consistency student (`policies.generative.train.distill_student`)
  of the improved policy on the observations of the demonstrations and the episodes; it is what the robot serves
  (exported with one sampling step).

OPE scores what would be deployed: the policy's deterministic DDIM (η = 0) sampler with ``sampling_steps`` steps,
the same as the exported ONNX file; PPO optimises the stochastic chain (η = 1) of the same network. Policies with
cameras are refused: the critics and the dynamics read the state only.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from policies.generative.policy import GenerativePolicy
from policies.generative.train import TrainConfig
from policies.rl.chain import ChainConfig
from policies.rl.chain_ppo import (
    Demos,
    PpoConfig,
    chain_ppo_update,
    make_optimizer,
    stored_chain_ppo_update,
)
from policies.rl.critics import CriticConfig
from policies.rl.head import distill_head, head_train, multistep_spec
from policies.rl.iql import IqlConfig, IqlCritics
from policies.rl.limits import MAX_ACTION_SHIFT, TARGET_KL
from policies.rl.online_chains import chunk_gae, recorded_chains, returns_and_values
from policies.rl.ope import ActionShift, DynamicsConfig, DynamicsEnsemble, OpeEstimate, action_shift, am_q, compare
from policies.rl.rounds import RoundOutcome
from policies.rl.transitions import ChunkTransitions, chunk_transitions, concat_transitions
from reflexlab.dataset import Dataset, load_dataset
from reflexlab.spec import Spec

Stage = Literal["offline", "online", "distill"]


@dataclass(frozen=True)
class Rl100Config:
    """RL-100's rounds after imitation. Defaults follow METHODS.md where the paper gives a value, sized for a CPU.

    Attributes:
        demos: the demonstrations: offline data for the critics and observations for the distillation.
        offline_rounds, online_rounds: how many rounds of each stage; ``distill``: a last round distilling the head.
        gamma: per control step; a chunk of n steps is discounted by γⁿ.
        ppo_iterations: chain-PPO iterations per round, each on ``ppo_batch`` windows drawn from the data.
        ope_every: iterations between OPE checks (RL-100: ~50); ``ope_rollouts`` start windows, ``ope_horizon``
            chunk steps each; ``min_improvement``: the relative AM-Q gain that advances the reference (paper: 5 %).
        max_action_shift: the trust region: the most a round's PPO may move the executed actions from the deployed
            policy's, mean over the region's windows of the per-window RMS in the data's action std
            (`policies.rl.ope.action_shift`); None: no bound.
        sampling_steps: the deployed DDIM sampler's steps (what OPE scores; the chain PPO's K is ``chain``'s).
        distill_train: the consistency head's training (`policies.rl.head.head_train`: its targets are the improved
            policy's 10-step DDIM samples, the sampler OPE scored and the rounds deployed).
        chain: the stochastic chain PPO optimises, and the exploring actor samples: RL-100's σ in [0.0067, 0.1],
            scored by PPO with σ floored at 0.1 (DPPO's ``min_logprob_denoising_std``), its first step frozen
            (`ChainConfig` says why for both). History: with σ 0.0067 in the ratios too, 100 iterations left the 1-D
            reach policy where it was on 3 of 3 seeds (the last step's ratio swung over orders of magnitude, 64–74 %
            of its ratios clipped); sampling at a 0.1 floor as well fixed that but made push-T's exploring actor a
            random one (the SFT alone: 0.04 against 0.72 at 0.0067, 100 episodes). The deployed DDIM sampler is the
            chain's mean path either way.
        advantage: what points PPO: ``critics``, A = min Q − V (the method); ``random``, the control: an N(0, 1)
            draw per chunk in place of the critics' advantage, with the same critics fit (OPE still reads them), the
            same batches, trust region and gate. PPO moves a diffusion policy even along a random direction, and a
            sensitive task scatters under any move (push-T: 25 offline iterations on random advantages took the SFT
            from 0.80 to 0.68, the critics' to 0.46; an online round 0.745 against the critics' 0.675), so a gain
            counts as learning only where it beats this control on the same seeds.
        critic, gae_lambda: the online stage's value critic and GAE's λ (paper: 0.95); ``online_epochs``: its PPO
            passes over the recorded chains (each minibatch of ``online_ppo.minibatch_size``); ``progress_weight``:
            the online returns shaped by the task's progress (`policies.rl.online_chains.returns_and_values`; 0:
            the outcome alone).
        seed: critics, dynamics, chains, OPE draws and the control's advantages.
    """

    demos: Path
    offline_rounds: int = 3
    online_rounds: int = 1
    distill: bool = True
    gamma: float = 0.99
    iql: IqlConfig = field(default_factory=IqlConfig)
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    chain: ChainConfig = field(default_factory=lambda: ChainConfig(frozen_steps=1, logprob_sigma_min=0.1))
    offline_ppo: PpoConfig = field(default_factory=lambda: PpoConfig(clip=0.25, lr=1e-5, target_kl=TARGET_KL))
    online_ppo: PpoConfig = field(default_factory=lambda: PpoConfig(clip=0.2, lr=3e-6, target_kl=TARGET_KL))
    ppo_iterations: int = 200
    ppo_batch: int = 256
    ope_every: int = 50
    ope_rollouts: int = 256
    ope_horizon: int = 10
    min_improvement: float = 0.05
    max_action_shift: float | None = MAX_ACTION_SHIFT
    sampling_steps: int = 10
    distill_train: TrainConfig = field(default_factory=head_train)
    advantage: Literal["critics", "random"] = "critics"
    critic: CriticConfig = field(default_factory=CriticConfig)
    gae_lambda: float = 0.95
    online_epochs: int = 10
    progress_weight: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.advantage not in ("critics", "random"):
            raise ValueError(f"RL-100's advantage is 'critics' or 'random' (the control), not {self.advantage!r}")
        if not 0 <= self.gae_lambda <= 1 or self.online_epochs < 1 or self.progress_weight < 0:
            raise ValueError(f"gae_lambda must be in [0, 1], online_epochs ≥ 1 and progress_weight ≥ 0: {self}")
        if self.online_rounds and self.chain.sampling_steps != self.sampling_steps:
            raise ValueError(
                f"the online stage's actor runs the chain ({self.chain.sampling_steps} steps) that the deployed "
                f"sampler has ({self.sampling_steps}): make them equal"
            )

    @property
    def online_round_numbers(self) -> frozenset[int]:
        """The rounds that train on the chains an exploring version ran (`deploy.rl.learner` exports it so)."""
        return frozenset(range(self.offline_rounds + 1, self.offline_rounds + self.online_rounds + 1))

    @property
    def rounds(self) -> int:
        """Learner rounds in all: offline, online, then the distillation."""
        return self.offline_rounds + self.online_rounds + int(self.distill)

    def stage(self, round_: int) -> Stage:
        """The stage of learner round ``round_`` (1-based)."""
        if not 1 <= round_ <= self.rounds:
            raise ValueError(f"RL-100 has {self.rounds} rounds, not round {round_}")
        if round_ <= self.offline_rounds:
            return "offline"
        return "online" if round_ <= self.offline_rounds + self.online_rounds else "distill"


@dataclass(frozen=True)
class Rl100Round:
    """RL-100 as the learner's round update (`policies.rl.rounds.RoundUpdate`)."""

    config: Rl100Config

    def __call__(self, dataset: Path, checkpoint: Path, out: Path, round_: int) -> RoundOutcome:
        stage = self.config.stage(round_)
        out.mkdir(parents=True, exist_ok=True)
        if stage == "distill":
            return self._distill(dataset, checkpoint, out)
        return self._improve(dataset, checkpoint, out, stage, round_)

    def _improve(self, dataset: Path, checkpoint: Path, out: Path, stage: Stage, round_: int) -> RoundOutcome:
        cfg = self.config
        policy, extra = GenerativePolicy.load(checkpoint)
        spec = multistep_spec(policy, extra, checkpoint, "RL-100 improves")
        rollouts = load_dataset(dataset)  # chunk_transitions refuses a dataset of another task (SpecMismatchError)
        episodes = chunk_transitions(rollouts, spec, cfg.gamma)
        torch.manual_seed(cfg.seed + round_)  # the critics' initial weights: a round reruns the same
        if stage == "online":
            return self._online(policy, extra, spec, rollouts, episodes, out, round_)
        data = concat_transitions(chunk_transitions(load_dataset(cfg.demos), spec, cfg.gamma), episodes)
        critics = IqlCritics(data.obs_dim, data.chunk, data.action_dim, dataclasses.replace(cfg.iql, seed=cfg.seed))
        critic_losses = critics.fit(data)
        _say(f"rl100 round {round_} ({stage}): IQL critics fit on {len(data)} chunk transitions: {critic_losses}")
        numbers: dict[str, Any] = {"transitions": len(data), "critics": critic_losses}
        executed = slice(spec.observation_horizon - 1, spec.observation_horizon - 1 + spec.execution_horizon)
        draws = np.random.default_rng(cfg.seed + round_)

        def advantage(windows: np.ndarray, chunks: np.ndarray) -> np.ndarray:
            if cfg.advantage == "random":
                return draws.standard_normal(len(windows))
            return critics.advantage(windows[:, -1], chunks[:, executed])

        ensemble = DynamicsEnsemble(data.obs_horizon, data.obs_dim, data.chunk, data.action_dim, cfg.dynamics)
        numbers["dynamics"] = ensemble.fit(data)
        rng = np.random.default_rng(cfg.seed + round_)
        start = data.window[rng.choice(len(data), size=min(cfg.ope_rollouts, len(data)), replace=False)]

        def estimate(candidate: GenerativePolicy) -> OpeEstimate:
            act = _deterministic_act(candidate, spec, cfg.sampling_steps, executed, seed=cfg.seed + round_)
            return am_q(act, critics, ensemble, start, cfg.ope_horizon, seed=cfg.seed + round_)

        region = self._region(policy, spec, start, data.action_std, round_)
        reference, reference_value = copy.deepcopy(policy), estimate(policy)
        anchor = _demo_windows(cfg.demos, spec) if cfg.offline_ppo.bc_weight > 0 else None
        checks: list[dict[str, Any]] = []
        optimizer = make_optimizer(policy, cfg.offline_ppo)
        generator = torch.Generator().manual_seed(cfg.seed + round_)
        done, stats = 0, {"left_region": False}
        while done < cfg.ppo_iterations and not stats["left_region"]:
            iterations = min(cfg.ope_every, cfg.ppo_iterations - done)
            stats, shift = self._ppo(
                policy,
                data.window,
                advantage,
                cfg.offline_ppo,
                iterations,
                round_,
                optimizer,
                generator,
                anchor,
                region,
            )
            if stats["iterations"] == 0:  # the policy is the last check's (or the deployed one): nothing new to judge
                break
            done += stats["iterations"]
            candidate, shift = estimate(policy), shift or region.shift(policy)
            verdict = compare(candidate, reference_value, cfg.min_improvement)
            checks.append(
                {
                    "iteration": done,
                    "candidate": candidate.value,
                    "candidate_stderr": candidate.stderr,
                    "reference": reference_value.value,
                    "disagreement": candidate.disagreement,
                    "action_shift": shift.mean,
                    "action_shift_p90": shift.p90,
                    "at_trust_region_edge": stats["left_region"],
                    "accepted": verdict.accepted,
                    "reason": verdict.reason,
                    "ppo": stats,
                }
            )
            if verdict.accepted:
                reference, reference_value = copy.deepcopy(policy), candidate
            _say(f"rl100 round {round_}: PPO iteration {done}/{cfg.ppo_iterations}: {verdict.reason}")
        accepted = sum(c["accepted"] for c in checks)
        numbers |= {"ope": checks, "ope_accepted": accepted, "ope_rejected": len(checks) - accepted}
        numbers["stopped_at_trust_region"] = stats["left_region"]
        if not checks and stats["left_region"]:
            numbers["ppo"] = stats  # how far the undone iteration went
            return RoundOutcome(None, numbers, stage, reason=_first_step_left(stats, region))
        if not accepted:
            return RoundOutcome(None, numbers, stage, reason=f"OPE accepted none of {len(checks)} candidates")
        return RoundOutcome(_save(reference, extra, out, stage, numbers), numbers, stage)

    def _region(
        self, policy: GenerativePolicy, spec: Spec, windows: np.ndarray, scale: np.ndarray, round_: int
    ) -> TrustRegion:
        """The trust region round ``policy`` (the deployed one) at up to ``ope_rollouts`` of ``windows``."""
        cfg = self.config
        rng = np.random.default_rng(cfg.seed + round_)
        at = windows[rng.choice(len(windows), size=min(cfg.ope_rollouts, len(windows)), replace=False)]
        executed = slice(spec.observation_horizon - 1, spec.observation_horizon - 1 + spec.execution_horizon)

        def act(candidate: GenerativePolicy) -> np.ndarray:
            return _deterministic_act(candidate, spec, cfg.sampling_steps, executed, seed=cfg.seed + round_)(at)

        return TrustRegion(act, act(policy), scale, cfg.max_action_shift)

    def _ppo(
        self,
        policy: GenerativePolicy,
        windows: np.ndarray,
        advantage: Any,
        ppo: PpoConfig,
        iterations: int,
        round_: int,
        optimizer: torch.optim.Optimizer | None = None,
        generator: torch.Generator | None = None,
        demos: Demos | None = None,
        region: TrustRegion | None = None,
    ) -> tuple[dict[str, Any], ActionShift | None]:
        """Up to ``iterations`` chain-PPO iterations on batches drawn from ``windows``, ending at (and undoing) the
        first that leaves ``region``: the last kept iteration's figures, how many were kept (``iterations``), the
        optimiser steps taken, how many iterations the target KL cut short, and whether (``left_region``) and how far
        (``shift_beyond``) the undone iteration left the region; and the kept policy's shift when the region measured
        it (the OPE check reuses it rather than sample the region's windows again)."""
        generator = generator or torch.Generator().manual_seed(self.config.seed + round_)
        optimizer = optimizer or make_optimizer(policy, ppo)
        obs = torch.as_tensor(windows, dtype=torch.float32)
        stats, updates, stopped, kept, kept_shift = None, 0, 0, 0, None
        out: dict[str, Any] = {"left_region": False}
        guard = region if region is not None and region.bound is not None else None
        before: dict[str, torch.Tensor] = {}
        for _ in range(iterations):
            if guard is not None:
                before = copy.deepcopy(policy.state_dict())
            idx = torch.randint(len(obs), (min(self.config.ppo_batch, len(obs)),), generator=generator)
            step = chain_ppo_update(
                policy, obs[idx], None, advantage, ppo, self.config.chain, generator, optimizer, demos
            )
            updates, stopped = updates + step.updates, stopped + step.stopped_early
            if guard is not None and not guard.holds(shift := guard.shift(policy)):
                policy.load_state_dict(before)
                out |= {"left_region": True, "shift_beyond": shift.mean}
                break
            stats, kept = step, kept + 1
            kept_shift = shift if guard is not None else None
        last = {k: v for k, v in dataclasses.asdict(stats).items() if isinstance(v, float)} if stats else {}
        return last | out | {"iterations": kept, "updates": updates, "iterations_stopped_by_kl": stopped}, kept_shift

    def _online(
        self,
        policy: GenerativePolicy,
        extra: dict[str, Any],
        spec: Spec,
        rollouts: Dataset,
        episodes: ChunkTransitions,
        out: Path,
        round_: int,
    ) -> RoundOutcome:
        """PPO on the chains the deployed (exploring) version ran, advantages from its episodes' returns by GAE."""
        cfg = self.config
        chains = recorded_chains(policy, spec, rollouts, episodes, cfg.chain)
        value_mse = None  # the control fits no critic: nothing would read it
        if cfg.advantage == "random":
            advantage = np.random.default_rng(cfg.seed + round_).standard_normal(len(chains.window))
        else:
            values, value_mse = returns_and_values(rollouts, cfg.gamma, cfg.critic, progress_weight=cfg.progress_weight)
            advantage = chunk_gae(values, chains.episode, chains.step, cfg.gamma, cfg.gae_lambda)
        numbers: dict[str, Any] = {
            "transitions": len(episodes),
            "chains": len(chains.window),
            "chain_episodes": len(np.unique(chains.episode)),
            "replay_error": chains.replay_error,
            "value_mse": value_mse,
            "advantage_mean": float(advantage.mean()),
            "advantage_std": float(advantage.std()),
        }
        _say(f"rl100 round {round_} (online): {len(chains.window)} recorded chains, value MSE {value_mse}")
        region = self._region(policy, spec, chains.window, episodes.action_std, round_)
        obs = torch.as_tensor(chains.window, dtype=torch.float32)
        optimizer = make_optimizer(policy, cfg.online_ppo)
        generator = torch.Generator().manual_seed(cfg.seed + round_)
        one_pass = dataclasses.replace(cfg.online_ppo, epochs=1)
        anchor = _demo_windows(cfg.demos, spec) if cfg.online_ppo.bc_weight > 0 else None
        kept, left, stats = 0, False, None
        for epoch in range(cfg.online_epochs):
            before = copy.deepcopy(policy.state_dict())
            step = stored_chain_ppo_update(
                policy, obs, chains.chain, advantage, one_pass, cfg.chain, generator, optimizer, anchor, epoch == 0
            )
            if step.updates == 0:  # the KL to the behaviour policy was over its limit before this pass began
                break
            if not region.holds(shift := region.shift(policy)):
                policy.load_state_dict(before)
                left = True
                numbers["shift_beyond"] = shift.mean
                break
            kept, stats = kept + 1, step
            if step.stopped_early:
                break
        numbers |= {
            "ppo": dataclasses.asdict(stats) if stats else None,
            "epochs": kept,
            "stopped_at_trust_region": left,
        }
        _say(f"rl100 round {round_} (online): {kept} PPO passes kept" + (" (trust region)" if left else ""))
        if not kept:
            reason = "PPO's first pass over the recorded chains"
            reason += " left the trust region" if left else " found the KL limit already passed"
            return RoundOutcome(None, numbers, "online", reason=f"{reason}: nothing to deploy")
        return RoundOutcome(_save(policy, extra, out, "online", numbers), numbers, "online")

    def _distill(self, dataset: Path, checkpoint: Path, out: Path) -> RoundOutcome:
        """The consistency head of the improved policy, on the demonstrations' and the episodes' observations."""
        return distill_head(dataset, checkpoint, out, self.config.demos, self.config.distill_train, self.config.seed)


def _say(line: str) -> None:
    """Progress of a long round, on stderr beside the learner's own lines (a round takes minutes on a CPU)."""
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class TrustRegion:
    """How far PPO may move the deployed policy (`Rl100Config.max_action_shift`; `policies.rl.ope` says why).

    Attributes:
        act: a policy → its executed chunks (B, chunk, A) at the region's windows, under the same noise each call.
        deployed: ``act`` of the deployed policy.
        scale: (A,) the data's action std per dimension.
        bound: the most `shift`'s mean may be; None: no region (every policy holds).
    """

    act: Callable[[GenerativePolicy], np.ndarray]
    deployed: np.ndarray
    scale: np.ndarray
    bound: float | None

    def shift(self, policy: GenerativePolicy) -> ActionShift:
        return action_shift(self.act(policy), self.deployed, self.scale)

    def holds(self, shift: ActionShift) -> bool:
        return bool(np.isfinite(shift.mean)) and (self.bound is None or shift.mean <= self.bound)


def _first_step_left(stats: dict[str, Any], region: TrustRegion) -> str:
    """Why a round deploys nothing when PPO's first iteration already left the trust region."""
    return (
        f"PPO's first iteration moved the actions {stats['shift_beyond']:.3g} action std, beyond "
        f"the trust region ({region.bound}): nothing to deploy"
    )


def _deterministic_act(policy: GenerativePolicy, spec: Spec, steps: int, executed: slice, seed: int) -> Any:
    """windows → executed chunks with the deployed sampler (DDIM η = 0), noise drawn from ``seed`` per call order,
    so that two policies scored with the same seed see the same noise (common random numbers)."""
    generator = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def act(windows: np.ndarray) -> np.ndarray:
        noise = torch.randn((len(windows), spec.action_chunk, spec.action.size), generator=generator)
        chunk = policy.sample(torch.as_tensor(windows, dtype=torch.float32), noise, steps)
        return chunk[:, executed].numpy()

    return act


def _demo_windows(demos: Path, spec: Spec) -> Demos:
    """The demonstrations as (window, chunk) pairs for chain PPO's behaviour-cloning anchor (`PpoConfig.bc_weight`)."""
    from policies.generative.data import ChunkWindows
    from policies.imitation import load_episodes

    episodes, _, _ = load_episodes(demos)
    windows = ChunkWindows(episodes, spec.observation_horizon, spec.action_chunk)
    obs, action = windows.gather(torch.arange(len(windows)))[:2]
    return Demos(obs, action)


def _save(policy: GenerativePolicy, extra: dict[str, Any], out: Path, stage: Stage, numbers: dict[str, Any]) -> Path:
    """The improved policy as a checkpoint of its own (its weights only: PPO keeps no EMA)."""
    info = {**extra, "rl100": {"stage": stage, "transitions": numbers["transitions"]}}
    return policy.save(out / "policy.pt", info)
