"""RL-100's online stage data: the denoising chains the actor ran, and their advantages from the episodes' returns.

The paper's online RL is on-policy PPO over the denoising chain with GAE: the robot samples each chunk with the
stochastic chain and keeps the chain, the learner scores every executed chunk by what followed it. Here the actor
serves the exploring version as `policies.rl.chain.ChainSampler` (x_K's noise and each step's noise are ONNX
inputs) and records what it drew in the ``policy.noise`` column at the step each chunk began
(`real.record.NOISE_COLUMN`); the learner replays the chains with the version's checkpoint (`replay_chain`) and checks
that they give the actions the robot was asked for, so a chain is never credited to a policy that did not run it.

Advantages: a state-value critic on Monte-Carlo targets, ``γ^n · outcome`` per policy step with n steps left in its
segment (the credit rules of `policies.rl.credit`: a segment the person took over ends at 0, the person's steps get
no target; with a progress weight w, a segment ends at ``(outcome + w · progress) / (1 + w)`` instead, see
`returns_and_values`), cross-fitted over episodes (`policies.rl.critics.cross_fitted_values` says why), then GAE(λ)
per step (`policies.rl.habc.lambda_advantage`); a chunk's advantage is that of the step it began at, whose λ-return
runs on through the chunk's steps and past them. Only chunks the policy executed whole are trained on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from policies.generative.policy import GenerativePolicy
from policies.rl.chain import Chain, ChainConfig, replay_chain
from policies.rl.credit import Credit, episode_credit
from policies.rl.critics import CriticConfig, cross_fitted_values
from policies.rl.habc import lambda_advantage
from policies.rl.transitions import ChunkTransitions
from real.record import NOISE_COLUMN
from reflexlab.dataset import Dataset
from reflexlab.spec import Spec

# The most a replayed chain's executed actions may differ from those recorded, in the data's action std per
# dimension. Measured on push-T: 0–4e-4 for a version's own chains (onnxruntime served, torch replayed); 0.31 for
# chains a later checkpoint ran, replayed with an earlier one.
MAX_REPLAY_ERROR = 1e-3


class ChainReplayError(ValueError):
    """Recorded noise that does not reproduce the recorded actions (or is missing); names the episode and step."""


@dataclass(frozen=True)
class RecordedChains:
    """The chains of the newest version's own chunks, row-aligned.

    Attributes:
        window: (N, To, n) raw observation windows at each chunk's first step.
        chain: the replayed chains (latents, the behaviour policy's log-probabilities, actions).
        episode, step: where each chunk began (dataset episode index, step in it).
        replay_error: max |replayed − recorded| executed action over all chunks, in action std.
    """

    window: np.ndarray
    chain: Chain
    episode: np.ndarray
    step: np.ndarray
    replay_error: float


def recorded_chains(
    policy: GenerativePolicy, spec: Spec, ds: Dataset, transitions: ChunkTransitions, config: ChainConfig
) -> RecordedChains:
    """Replay the chains of the newest policy version's chunks that the policy executed whole (``transitions`` are
    ``ds``'s); ``policy`` must be that version's checkpoint. Raises `ChainReplayError` naming the first episode
    whose noise is missing or replays other actions than it recorded (recorded by a deterministic version, another
    sampler or another policy)."""
    episodes = [ds.episode(i) for i in range(ds.num_episodes)]  # read once: versions, noise and asked actions
    versions = np.array([int(steps["policy_version"][0]) for steps in episodes])
    newest = versions.max()
    rows = np.flatnonzero((versions[transitions.episode] == newest) & transitions.by_policy)
    if not len(rows):
        raise ChainReplayError(f"version {newest} executed no chunk of its own (a person commanded every one)")
    h, a, k = spec.action_chunk, spec.action.size, config.sampling_steps
    size = (1 + k) * h * a
    noise = np.empty((len(rows), 1 + k, h, a), dtype=np.float32)
    asked = np.empty((len(rows), spec.execution_horizon, a), dtype=np.float32)
    for j, row in enumerate(rows):
        e, t = int(transitions.episode[row]), int(transitions.step[row])
        steps = episodes[e]
        column = steps.get(NOISE_COLUMN)
        if column is None or column.shape[1] < size:
            held = "no" if column is None else f"{column.shape[1]} values of"
            raise ChainReplayError(
                f"episode {e} records {held} {NOISE_COLUMN!r}; the online stage replays chains of {size} values "
                f"((1 + K) x H x A, K = {k}): record into a work folder whose actor ran a chain sampler"
            )
        if not column[t, :size].any():
            raise ChainReplayError(f"episode {e}, step {t}: no chunk began there ({NOISE_COLUMN} is all zeros)")
        noise[j] = column[t, :size].reshape(1 + k, h, a)
        n = int(transitions.length[row])
        asked[j, :n] = steps["policy.action"][t : t + n]
        asked[j, n:] = asked[j, n - 1]
    window = transitions.window[rows]
    chains = [
        replay_chain(policy, *map(torch.as_tensor, (window[i], noise[i][:, 0], noise[i][:, 1:])), config)
        for i in np.array_split(np.arange(len(rows)), max(1, len(rows) // 512))
    ]
    chain = Chain(*(torch.cat([getattr(c, f) for c in chains]) for f in ("latents", "log_probs", "actions")))
    first = spec.observation_horizon - 1
    executed = chain.actions[:, first : first + spec.execution_horizon].numpy()
    live = np.arange(spec.execution_horizon)[None, :] < transitions.length[rows, None]
    error = (np.abs(executed - asked) / transitions.action_std).max(axis=2) * live
    worst = int(np.argmax(error.max(axis=1)))
    if error[worst].max() > MAX_REPLAY_ERROR:
        raise ChainReplayError(
            f"episode {transitions.episode[rows[worst]]}, step {transitions.step[rows[worst]]}: the recorded noise "
            f"replays actions {error[worst].max():.3g} action std away from those recorded: the version that ran it "
            "was not this checkpoint's exploring chain sampler"
        )
    return RecordedChains(window, chain, transitions.episode[rows], transitions.step[rows], float(error.max()))


def returns_and_values(
    ds: Dataset, gamma: float, critic: CriticConfig, folds: int = 5, progress_weight: float = 0.0
) -> tuple[dict[int, np.ndarray], float]:
    """{episode: (2, T)}: each step's value, from a critic cross-fitted on every episode's credited returns, and the
    value the step bootstraps from (`policies.rl.credit.Credit.outcome_next`: NaN inside a segment); and the
    critic's fit error.

    ``progress_weight`` w > 0 shapes the sparse outcome by the task's progress, its recorded reward in [0, 1]
    (push-T's coverage, the peg's depth): a reward ``w · (γ Φ(s') − Φ(s))`` with potential Φ = progress telescopes
    along a segment, so its return is the outcome's plus ``w · γ^n Φ(end) − w · Φ(s)``; the state term cancels in
    every TD error, which leaves one change: a segment ends at ``(outcome + w · Φ(end)) / (1 + w)`` (scaled back
    into [0, 1] for the critic's sigmoid). A takeover or a time-out near the goal is then worth more than one far
    from it, where the sparse outcome scores both 0.
    """
    credits, obs = [], []
    for i in range(ds.num_episodes):
        steps = ds.episode(i)
        credit = episode_credit(steps, episode=i, gamma_viability=gamma)
        if progress_weight > 0:
            credit = _progress_shaped(credit, steps, i, gamma, progress_weight)
        credits.append(credit)
        obs.append(np.asarray(steps["observation.state"], dtype=np.float32))
    lengths = [len(o) for o in obs]
    targets = np.concatenate([c.viability for c in credits])
    values, error = cross_fitted_values(
        np.concatenate(obs), targets, np.repeat(np.arange(len(obs)), lengths), folds, critic
    )
    per_episode = np.split(values, np.cumsum(lengths)[:-1])
    return {i: np.stack([v, c.outcome_next]) for i, (v, c) in enumerate(zip(per_episode, credits, strict=True))}, error


def _progress_shaped(credit: Credit, steps: dict[str, np.ndarray], episode: int, gamma: float, weight: float) -> Credit:
    """``credit`` with each labelled segment's end value mixed with the progress it reached (`returns_and_values`)."""
    progress = np.asarray(steps["next.reward"], dtype=np.float64).reshape(-1)
    if not (np.isfinite(progress).all() and (progress >= 0).all() and (progress <= 1).all()):
        raise ValueError(
            f"episode {episode}: next.reward spans [{np.nanmin(progress):.3g}, {np.nanmax(progress):.3g}]; shaping "
            "by progress needs the task's reward to be a progress in [0, 1] (progress_weight 0 uses the outcome alone)"
        )
    ends = np.flatnonzero(np.isfinite(credit.outcome_next))
    outcome_next, viability = credit.outcome_next.copy(), credit.viability.copy()
    outcome_next[ends] = (credit.outcome_next[ends] + weight * progress[ends]) / (1 + weight)
    for end in ends:
        rows = np.flatnonzero(credit.segment == credit.segment[end])
        viability[rows] = gamma ** (end - rows) * outcome_next[end]
    return dataclasses.replace(credit, viability=viability, outcome_next=outcome_next)


def chunk_gae(
    values: dict[int, np.ndarray], episode: np.ndarray, step: np.ndarray, gamma: float, lam: float
) -> np.ndarray:
    """GAE(λ) of each chunk: the per-step λ-advantage (`policies.rl.habc.lambda_advantage`) at the step it began."""
    wanted = set(episode.tolist())
    per_episode = {e: lambda_advantage(v[0], v[1], gamma, lam) for e, v in values.items() if e in wanted}
    return np.array([per_episode[int(e)][int(t)] for e, t in zip(episode, step, strict=True)])
