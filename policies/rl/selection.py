"""Critic-guided selection: the policy proposes K chunks, IQL's Q picks one, and the picks become BC targets.

Why: on panda-peg-insert the robot's own episodes were worse behaviour-cloning data than the demonstrations (the SFT
policy fine-tuned on the demonstrations alone 0.68; with its own successful segments added 0.595–0.625; with the
scripted person's steps at full weight 0.56–0.62), so weighting those episodes (HABC, AWBC) could not lift it above
imitation. A critic can still rank the policy's *own* proposals: sampling K = 8 chunks per decision and executing
the one with the highest min-Q of IQL's twins on its executed part (IDQL, Hansen-Estruch et al. 2023) took the
25-demonstration SFT policy from 0.63 to 0.775 ± 0.013 success (200 episodes, 3 critic seeds), and its time to
success from 8.0 to 6.8 s. A critic fit on the demonstrations alone made it worse (0.355, scoring the chunk one step
early): it has to have seen the policy fail.

The robot serves one ONNX generator with no critic beside it, so the picks are distilled back: at every state of the
episodes and demonstrations, the best of K chunks becomes a BC target (`selected_targets`) trained beside the
demonstrations (`policies.rl.self_distill`, ``reflexlab rl select``; ``HabcConfig.selection`` adds them to HABC's
weighted episodes instead). IQL's Q(s, a) rather than HABC's state values, because ranking chunks at one state needs
a value per action.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.generative.data import ChunkWindows
from policies.generative.policy import GenerativePolicy
from policies.generative.sampler import TorchSampler
from policies.generative.train import WeightedChunks
from policies.rl.iql import IqlConfig, IqlCritics
from policies.rl.transitions import ChunkTransitions, chunk_transitions, concat_transitions
from reflexlab.dataset import Dataset, load_dataset
from reflexlab.spec import Spec


@dataclass(frozen=True)
class SelectionConfig:
    """K, the picks' weight in the fine-tune, the critics and the proposals' sampler.

    ``k`` 16: distilled on panda-peg-insert (25 demonstrations, one critic seed, 200 episodes), the picks of 8 at the
    episodes' states gave 0.695 and of 16 at the episodes' and demonstrations' states 0.735, against 0.64 for the
    same fine-tune on the demonstrations alone. ``weight``: each pick's BC weight, a demonstration step's being 1.
    """

    k: int = 16
    weight: float = 1.0
    iql: IqlConfig = field(default_factory=lambda: IqlConfig(steps=3000))
    sampling_steps: int = 10
    batch_size: int = 256  # windows per sampler call (k chunks each)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.k < 1 or self.weight < 0 or self.sampling_steps < 1 or self.batch_size < 1:
            raise ValueError(f"selection config out of range (k, sampling_steps, batch_size >= 1, weight >= 0): {self}")


def executed_part(spec: Spec) -> slice:
    """The actions of a chunk the robot runs: action index To − 1 is the current step's, then Ta of them."""
    return slice(spec.observation_horizon - 1, spec.observation_horizon - 1 + spec.execution_horizon)


def fit_selection_critics(data: ChunkTransitions, config: SelectionConfig) -> tuple[IqlCritics, dict[str, float]]:
    """IQL's twin Q and V on every chunk transition so far (demonstrations, the policy's, a person's)."""
    torch.manual_seed(config.seed)
    critics = IqlCritics(data.obs_dim, data.chunk, data.action_dim, dataclasses.replace(config.iql, seed=config.seed))
    return critics, critics.fit(data)


class CriticGuidedSampler:
    """A numpy sampler ``(obs (N, To, n), noise (N, H, A)) → chunk (N, H, A)`` that samples ``k`` chunks per row and
    returns the one whose executed part has the highest min-Q. The first of the k uses the given noise (k = 1 is the
    sampler itself); the other k − 1 come from this sampler's own seeded generator."""

    def __init__(self, sampler: TorchSampler, critics: IqlCritics, k: int, executed: slice, seed: int = 0) -> None:
        if sampler.policy.image_keys:
            raise ValueError("critic-guided selection reads states only: this policy reads cameras")
        self.sampler, self.critics, self.k, self.executed = sampler, critics, k, executed
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: np.ndarray, noise: np.ndarray, images: dict[str, np.ndarray] | None = None) -> np.ndarray:
        n, k = len(obs), self.k
        draws = self.rng.standard_normal((n, k, *noise.shape[1:])).astype(noise.dtype)
        draws[:, 0] = noise
        proposals = self.sampler(np.repeat(obs, k, axis=0), draws.reshape(n * k, *noise.shape[1:]))
        q = self.critics.q(np.repeat(obs[:, -1], k, axis=0), proposals[:, self.executed]).reshape(n, k)
        if not np.isfinite(q).all():
            raise FloatingPointError("non-finite Q while ranking the policy's proposals: the critics diverged")
        return proposals.reshape(n, k, *proposals.shape[1:])[np.arange(n), q.argmax(axis=1)]


def selected_targets(
    policy: GenerativePolicy, spec: Spec, critics: IqlCritics, windows: np.ndarray, config: SelectionConfig
) -> np.ndarray:
    """The best of ``config.k`` chunks of ``policy`` at each observation window (N, To, n): (N, H, A) BC targets."""
    sampler = CriticGuidedSampler(
        TorchSampler(policy, config.sampling_steps), critics, config.k, executed_part(spec), config.seed
    )
    noise = np.random.default_rng(config.seed).standard_normal((len(windows), spec.action_chunk, spec.action.size))
    picks = [
        sampler(windows[i : i + config.batch_size], noise[i : i + config.batch_size].astype(np.float32))
        for i in range(0, len(windows), config.batch_size)
    ]
    return np.concatenate(picks).astype(np.float32)


def critic_picks(
    ds: Dataset, demos: Path | None, checkpoint: Path, episodes: list[dict[str, np.ndarray]], selection: SelectionConfig
) -> tuple[WeightedChunks, dict[str, Any]]:
    """IQL critics on every chunk transition so far (``demos`` and ``ds``'s episodes), then the best of K of the
    policy's chunks at every window of ``episodes`` ({"obs", "action"} each), each a BC target at the selection's
    weight; with the numbers for the round log."""
    policy, stored = GenerativePolicy.load(checkpoint)
    if policy.image_keys:
        raise ValueError(f"{checkpoint} reads cameras {list(policy.image_keys)}: selection critics read states only")
    spec = Spec.from_dict(stored["spec"])
    data = chunk_transitions(ds, spec, selection.iql.gamma)
    if demos is not None:
        data = concat_transitions(chunk_transitions(load_dataset(demos), spec, selection.iql.gamma), data)
    critics, losses = fit_selection_critics(data, selection)  # IqlCritics.fit raises on a non-finite loss
    windows = ChunkWindows(episodes, spec.observation_horizon, spec.action_chunk)
    obs = windows.obs[windows.obs_index].numpy()
    picks = selected_targets(policy, spec, critics, obs, selection)
    numbers = {"critics": losses, "transitions": len(data), "windows": len(obs), "k": selection.k}
    return WeightedChunks(obs, picks, np.full(len(obs), selection.weight)), numbers
