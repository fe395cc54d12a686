"""`reflexlab bench realrl`: real-world RL methods on the same demonstrations, seeds and robot-time budget.

Per training seed: one imitation policy (SFT, a diffusion policy on the task's demonstrations), then each method's
rounds run by the very actor/learner code of `reflexlab rl` (the actor a child process stepping the task's MuJoCo
scene as fast as it goes, robot time = steps × control period, the scripted person intervening through the
arbiter; the learner here): single-critic AWBC, HABC, HABC without intervention-aware credit, critic-guided
self-distillation (``select``: IQL's picks among the policy's own chunks as BC targets beside the demonstrations,
`policies.rl.selection`; ``habc-select``: the picks added to HABC's weighted episodes), and RL-100
(offline rounds gated by OPE, online rounds, the consistency head) with its control (``rl100-random``: the same
rounds with N(0, 1) advantages, `policies.rl.rl100.Rl100Config.advantage`). Every method starts from the same SFT
checkpoint, collects the same number of episodes per round and its episode k runs the same seed. ``sft-longer``
uses no robot time: the SFT fine-tuned on the demonstrations alone with HABC's optimiser steps and schedule, the
gain any method must beat (push-T's 20,000-step SFT rose from 0.70 to 0.84 with 10,000 more imitation steps).

Each resulting policy is then evaluated without a person on the same ``eval_episodes`` seeded episodes (seeds
100000…, noise seed = training seed), at the deployed sampler's steps (the head at 1): success rate, mean time to
success. From the rounds: interventions per episode per round, robot time used, RL-100's OPE accept/reject counts.
The JSON holds each figure per seed and mean ± std over seeds, the issue's bars for the task, and plots
(``realrl_<task>.png``) lie beside it.

Whatever exists is reused (demos, SFT, a method whose learner finished, an evaluation of the same checkpoint bytes),
so a killed bench goes on where it was and a run over more seeds adds only what is new.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tyro

from policies.rl.limits import HEAD_STEPS, MAX_ACTION_SHIFT, TARGET_KL
from reflexlab.bench import machine, write_json
from reflexlab.cli.bench.common import BenchOptions

RlMethod = Literal["sft-longer", "awbc", "habc", "habc-unaware", "habc-select", "select", "rl100", "rl100-random"]
RL100_METHODS: tuple[RlMethod, ...] = ("rl100", "rl100-random")  # RL-100 and its random-advantage control
EVAL_SEED = 100_000


@dataclass(frozen=True)
class RealRlBudget:
    """What each stage gets: CI-sized with ``--quick``, otherwise the issue's configuration."""

    demos: int = 100
    """expert demonstrations (successful episodes) the SFT policy learns from."""
    sft_steps: int = 10_000
    """optimiser steps of the SFT diffusion policy."""
    rounds: int = 5
    """learner rounds of AWBC / HABC (RL-100: offline + online + distill rounds)."""
    episodes_per_round: int = 30
    """rounds of 10 left the critics ~4 successful policy segments to learn from (panda-peg-insert)."""
    episode_time_s: float | None = None
    """episode time limit; the task's own when None."""
    update_steps: int = 1000
    """HABC / AWBC fine-tune steps per round."""
    critic_steps: int = 1000
    """critic fit steps per round (each of HABC's cross-fitted heads, RL-100's IQL critics)."""
    select_k: int = 16
    """select, habc-select: chunks the policy proposes per state, of which the critics' pick becomes a BC target."""
    select_critic_steps: int = 3000
    """select, habc-select: IQL critic fit steps per round."""
    offline_rounds: int = 3
    online_rounds: int = 1
    ppo_iterations: int = 200
    ope_every: int = 50
    ppo_lr: float = 1e-5
    """RL-100's offline PPO learning rate."""
    ppo_target_kl: float | None = TARGET_KL
    """RL-100's PPO early stop per iteration (`PpoConfig.target_kl`)."""
    max_action_shift: float | None = MAX_ACTION_SHIFT
    """RL-100's trust region per round (`Rl100Config.max_action_shift`)."""
    ppo_bc_weight: float = 0.0
    """RL-100's PPO anchor: the weight of the diffusion loss on the demonstrations (`PpoConfig.bc_weight`)."""
    progress_weight: float = 0.0
    """RL-100's online returns shaped by the task's progress (`Rl100Config.progress_weight`; 0: the outcome alone)."""
    dynamics_steps: int = 3000
    distill_steps: int = HEAD_STEPS
    sampling_steps: int = 10
    """the deployed multi-step sampler's steps (DDIM)."""
    eval_episodes: int = 200
    """seeded evaluation episodes per policy and training seed."""
    latency_s: float = 3.0
    """timed onnxruntime calls of the one-step head (p99 ≤ 1 ms bar)."""
    intervener: Literal["none", "scripted"] = "scripted"
    execution_horizon: int = 2
    """actions executed per chunk (Ta) by every policy, in the rounds and the evaluation. In contact a chunk run
    open loop is blind: the same panda-peg-insert SFT network (2 mm tracker bias, 100 episodes) succeeds 0.54 at
    Ta 8, 0.75 at 4, 0.82 at 2; a panda-push-t one (50 episodes) 0.08 at Ta 8, 0.32 at 2."""
    horizon: tyro.conf.Suppress[int] = 16
    down_dims: tyro.conf.Suppress[tuple[int, ...]] = (32, 64)

    @classmethod
    def quick(cls) -> RealRlBudget:
        """The CI-sized budget: every method and stage runs, on a few steps and episodes."""
        return cls(
            demos=4, sft_steps=60, rounds=1, episodes_per_round=2, episode_time_s=3.0, update_steps=20,
            critic_steps=50, select_k=2, select_critic_steps=50, offline_rounds=1, online_rounds=1, ppo_iterations=2,
            ope_every=1, dynamics_steps=50, distill_steps=20, sampling_steps=2, eval_episodes=4, latency_s=0.2,
            horizon=4, execution_horizon=2, down_dims=(16, 32),
        )  # fmt: skip


@dataclass(frozen=True)
class RealRlBench(BenchOptions):
    """SFT vs AWBC vs HABC (and its ablation) vs RL-100 after each stage, over training seeds."""

    task: str = "panda-push-t"
    """an arm demonstration task: panda-push-t (RL-100's bars) or panda-peg-insert (HABC's bars)."""
    work_dir: Path = Path("runs/realrl")
    """demos, SFT policies and each method's work folder; whatever is missing is made first."""
    methods: tuple[RlMethod, ...] = ("sft-longer", "awbc", "habc", "habc-unaware", "select", "rl100", "rl100-random")
    """the methods run after SFT (SFT itself is always evaluated)."""
    train_seeds: tuple[int, ...] = (0, 1, 2)
    """training seeds; figures are mean ± std over them."""
    budget: tyro.conf.OmitArgPrefixes[RealRlBudget] = field(default_factory=RealRlBudget)
    """what each stage gets (all replaced by the CI-sized budget with --quick)."""

    def run(self) -> dict[str, Any]:
        from reflexlab.cli.bench.realrl_report import report

        budget = RealRlBudget.quick() if self.quick else self.budget
        root = self.work_dir / self.task
        demos = _demos(self.task, root / "demos", budget)
        per_seed = {seed: _seed(self.task, demos, root / f"seed{seed}", seed, self.methods, budget, self.table)
                    for seed in self.train_seeds}  # fmt: skip
        metrics = report(self.task, per_seed, budget.eval_episodes, self.out_dir, self.table)
        metrics |= {"bench": "realrl", "quick": self.quick, "budget": dataclasses.asdict(budget), **machine()}
        write_json(metrics, self.out_dir, f"realrl_{self.task}")
        return metrics


def _demos(task: str, out: Path, budget: RealRlBudget) -> Path:
    from reflexlab.dataset import load_dataset
    from sim.demos import record_demos

    have = load_dataset(out).num_episodes if out.exists() else 0
    if have < budget.demos:
        record_demos(task, budget.demos - have, out, seed=have, num_envs=8, progress=False)
    return out


def _seed(
    task: str, demos: Path, root: Path, seed: int, methods: tuple[RlMethod, ...], budget: RealRlBudget, talk: bool
) -> dict[str, Any]:
    """One training seed: SFT, each method's rounds, every resulting policy evaluated; the figures."""
    sft = _sft(demos, root / "sft", seed, budget)
    policies: dict[str, tuple[Path, int]] = {"sft": (sft, budget.sampling_steps)}
    rounds: dict[str, dict[str, Any]] = {}
    for method in methods:
        if method == "sft-longer":
            policies[method] = (_sft_longer(demos, root / method, sft, seed, budget), budget.sampling_steps)
            continue
        command = _command(method, task, demos, root / method, sft, seed, budget)
        if talk:
            print(f"bench realrl: seed {seed}: {method} in {command.work_dir}", flush=True)
        if command_finished(command.work_dir):
            rows = _rows(command.work_dir)
        else:
            rows = command.learn(actor_log=command.work_dir / "actor.log")
        rounds[method] = _round_figures(command.work_dir, rows)
        policies |= _policies(method, rows, budget)
    evaluated = {
        name: _evaluated(root / "eval" / f"{name}.json", ckpt, steps, seed, budget, talk)
        for name, (ckpt, steps) in policies.items()
    }
    for method in methods:
        if f"{method}-head" in policies:
            evaluated[f"{method}-head"] |= _head_latency(root / method, budget)
    return {"policies": evaluated, "rounds": rounds}


def _sft(demos: Path, run: Path, seed: int, budget: RealRlBudget) -> Path:
    """The imitation policy every method starts from (trained once per seed, then reused)."""
    from policies.checkpoint import resolve_checkpoint
    from policies.imitation import train_bc_run
    from reflexlab.io import write_json_atomically

    done = run / "sft.json"
    if done.exists():
        return resolve_checkpoint(run)
    checkpoint = train_bc_run(
        "diffusion", demos, run, budget.sft_steps, None, seed, horizon=budget.horizon,
        execution_horizon=budget.execution_horizon, down_dims=budget.down_dims, progress=False,
    )  # fmt: skip
    write_json_atomically(done, {"checkpoint": str(checkpoint), "steps": budget.sft_steps})
    return checkpoint


def _sft_longer(demos: Path, run: Path, sft: Path, seed: int, budget: RealRlBudget) -> Path:
    """The imitation baseline: ``budget.rounds`` fine-tunes of ``budget.update_steps`` each on the demonstrations
    alone, from the SFT, with the schedule of an HABC round (`reflexlab.cli.rl.Habc`'s lr, warm-up); made once per
    seed, then reused."""
    from policies.generative.train import TrainConfig, finetune_weighted
    from policies.rl.habc import demonstration_episodes
    from reflexlab.cli.rl import Habc
    from reflexlab.io import write_json_atomically

    done = run / "sft_longer.json"
    if done.exists():
        return Path(json.loads(done.read_text())["checkpoint"])
    episodes = demonstration_episodes(demos, sft)
    weights = np.ones(sum(len(e["action"]) for e in episodes))
    lr = Habc.__dataclass_fields__["update_lr"].default
    checkpoint = sft
    for k in range(budget.rounds):
        train = TrainConfig(
            max_steps=budget.update_steps, lr=lr, warmup_steps=100, checkpoint_every=10**9, seed=seed, progress=False
        )
        checkpoint = finetune_weighted(checkpoint, episodes, weights, train, run / f"round_{k:03d}", {})
    write_json_atomically(done, {"checkpoint": str(checkpoint), "steps": budget.rounds * budget.update_steps})
    return checkpoint


def _command(
    method: RlMethod, task: str, demos: Path, work_dir: Path, sft: Path, seed: int, budget: RealRlBudget
) -> Any:
    """The `reflexlab rl` command this method runs, robot = the task's scene as fast as it goes."""
    from reflexlab.cli.rl import Habc, Rl100, Select
    from sim.registry import get_task

    entry = get_task(task)
    episode_s = budget.episode_time_s or entry.config().episode_steps / entry.spec().control_rate_hz
    common = dict(
        initial=sft, demos=demos, work_dir=work_dir, task=task, robot="sim", intervener=budget.intervener,
        episodes_per_round=budget.episodes_per_round, episode_time_s=episode_s,
        sampling_steps=budget.sampling_steps, seed=1000 * seed,
    )  # fmt: skip
    if method == "select":
        return Select(
            **common, rounds=budget.rounds, k=budget.select_k, update_steps=budget.update_steps,
            critic_steps=budget.select_critic_steps, head_steps=budget.distill_steps,
        )  # fmt: skip
    if method in RL100_METHODS:
        return Rl100(
            **common, stages=("offline", "online", "distill"), offline_rounds=budget.offline_rounds,
            online_rounds=budget.online_rounds, ppo_iterations=budget.ppo_iterations, ope_every=budget.ope_every,
            ppo_lr=budget.ppo_lr, ppo_target_kl=budget.ppo_target_kl, ppo_bc_weight=budget.ppo_bc_weight,
            max_action_shift=budget.max_action_shift, progress_weight=budget.progress_weight,
            critic_steps=budget.critic_steps, dynamics_steps=budget.dynamics_steps,
            distill_steps=budget.distill_steps, ppo_advantage="random" if method == "rl100-random" else "critics",
        )  # fmt: skip
    return Habc(
        **common, rounds=budget.rounds, update_steps=budget.update_steps, critic_steps=budget.critic_steps,
        critics="one" if method == "awbc" else "two", aware=method != "habc-unaware",
        select_k=budget.select_k if method == "habc-select" else 0, select_critic_steps=budget.select_critic_steps,
    )  # fmt: skip


def command_finished(work_dir: Path) -> bool:
    """Whether a method's learner has finished its rounds in ``work_dir`` (a rerun of the bench reuses them)."""
    from deploy.policy_store import PolicyStore

    return (work_dir / "policies").exists() and PolicyStore(work_dir / "policies").finished() is not None


def _rows(work_dir: Path) -> list[dict[str, Any]]:
    from policies.rl.rounds import read_rounds

    return read_rounds(work_dir / "learner" / "rounds.jsonl")


def _policies(method: RlMethod, rows: list[dict[str, Any]], budget: RealRlBudget) -> dict[str, tuple[Path, int]]:
    """The checkpoints to evaluate: the method's last deployed multi-step policy and its one-step head (``-head``);
    RL-100's (and its control's) after each stage."""
    found: dict[str, tuple[Path, int]] = {}
    for row in (r for r in rows if r.get("verdict") == "deployed"):
        stage = row["stage"]
        if stage == "distill":
            found[f"{method}-head"] = (Path(row["checkpoint"]), 1)
        else:
            found[f"{method}-{stage}" if method in RL100_METHODS else method] = (
                Path(row["checkpoint"]),
                budget.sampling_steps,
            )
    return found


def _round_figures(work_dir: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per round: success and interventions per episode of the version it ran; the robot time; OPE verdicts."""
    from policies.rl.rounds import version_stats
    from reflexlab.dataset import load_dataset

    stats = version_stats(load_dataset(work_dir / "rollouts"))
    evaluated = [r["evaluated"] for r in rows if "evaluated" in r]
    ope = [c for r in rows for c in r.get("update", {}).get("ope", [])]
    return {
        "success_per_round": [e["success_rate"] for e in evaluated],
        "episodes_per_round": [e["episodes"] for e in evaluated],
        "interventions_per_episode": [e["interventions_per_episode"] for e in evaluated],
        "robot_time_h": sum(s.robot_time_s for s in stats.values()) / 3600.0,
        "ope_accepted": sum(bool(c["accepted"]) for c in ope),
        "ope_rejected": sum(not c["accepted"] for c in ope),
        "rounds_stopped_at_trust_region": sum(bool(r.get("update", {}).get("stopped_at_trust_region")) for r in rows),
        "verdicts": [r.get("verdict") for r in rows],
    }


def _evaluated(
    record: Path, checkpoint: Path, steps: int, seed: int, budget: RealRlBudget, talk: bool
) -> dict[str, Any]:
    """`_evaluate`'s figures, kept in ``record`` and reused while the checkpoint's bytes, the sampler steps, the
    episodes and the noise seed are the same (a rerun, or the bench over more seeds, does not evaluate again)."""
    from reflexlab.io import file_sha256, write_json_atomically

    key = {"sha256": file_sha256(checkpoint), "steps": steps, "episodes": budget.eval_episodes, "noise_seed": seed}
    if record.exists():
        kept = json.loads(record.read_text())
        if kept.get("key") == key:
            return kept["result"]
    result = _evaluate(checkpoint, steps, seed, budget, talk)
    record.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomically(record, {"key": key, "result": result})
    return result


def _evaluate(checkpoint: Path, steps: int, seed: int, budget: RealRlBudget, talk: bool) -> dict[str, Any]:
    """Success and time to success over the evaluation seeds, no person in the loop."""
    from policies.chunk_eval import evaluate_chunks
    from policies.generative.sampler import TorchSampler, flush_denormals
    from policies.imitation import load_generative

    policy, spec, _, _ = load_generative(checkpoint)
    seeds = list(range(EVAL_SEED, EVAL_SEED + budget.eval_episodes))
    with flush_denormals():
        result = evaluate_chunks(TorchSampler(policy, steps), spec, seeds, noise_seed=seed, progress=talk)
    success = np.asarray(result.success, dtype=bool)
    n = len(success)
    return {
        "checkpoint": str(checkpoint),
        "sampling_steps": steps,
        "success": float(success.mean()),
        "success_sem": float(np.sqrt(success.mean() * (1 - success.mean()) / n)),
        "time_to_success_s": float(result.steps[success].mean() / spec.control_rate_hz) if success.any() else None,
    }


def _head_latency(work_dir: Path, budget: RealRlBudget) -> dict[str, float]:
    """onnxruntime p50/p99 (µs, batch 1, one thread) of the served head: the last version the learner deployed."""
    from deploy.policy_store import PolicyStore
    from reflexlab.cli.bench.distill import latency_us

    head = PolicyStore(work_dir / "policies").versions()[-1]
    lat = latency_us(head.path, budget.latency_s)
    return {"latency_p50_us": lat["p50"], "latency_p99_us": lat["p99"], "latency_calls": lat["calls"]}
