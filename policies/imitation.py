"""From a dataset to generative policies and back to numbers: the glue behind `reflexlab bc`,
`reflexlab distill`, `reflexlab export` (generators) and `reflexlab bench distill`.

The learning itself lives in `policies.generative` (dataset- and task-agnostic); this module
reads episodes through `reflexlab.dataset`, derives the chunked Spec a policy is trained for
(the dataset's Spec + observation/action horizons), finds checkpoints in run folders and wraps
policies as batched samplers for evaluation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.checkpoint import resolve_checkpoint
from policies.generative.policy import GenerativePolicy
from reflexlab.dataset import Dataset, load_dataset
from reflexlab.spec import Spec


def fast_float_mode() -> None:
    """Flush denormal floats to zero: on this CPU a U-Net step with denormals ran 40× slower (5.3 s vs 0.13 s).

    Diffusion training drives many activations towards zero; x86 handles subnormal results in
    microcode. Flushing changes nothing a float32 network can resolve.
    """
    torch.set_flush_denormal(True)


def load_episodes(root: Path) -> tuple[list[dict[str, np.ndarray]], Spec, Dataset]:
    """Episodes as {"obs", "action"} arrays plus the dataset's Spec; every problem names the episode."""
    dataset = load_dataset(root)  # validates keys, shapes, NaN, empty episodes
    if dataset.spec is None:
        raise ValueError(f"{root}: the dataset records no reflexlab Spec (meta/info.json reflexlab_spec)")
    episodes = [{"obs": ep["observation.state"], "action": ep["action"]} for ep in dataset.episodes()]
    return episodes, dataset.spec, dataset


def chunked(spec: Spec, obs_horizon: int, horizon: int, execution_horizon: int) -> Spec:
    """The Spec of a chunk policy trained on a task whose own Spec is ``spec``."""
    return dataclasses.replace(
        spec, observation_horizon=obs_horizon, action_chunk=horizon, execution_horizon=execution_horizon
    )


def plain(spec: Spec) -> Spec:
    """The task's own Spec under a chunk policy's (the horizons set back to 1)."""
    return chunked(spec, 1, 1, 1)


def is_generative(run_or_ckpt: Path) -> bool:
    """Whether a run folder / checkpoint holds a generative policy (rather than an rsl-rl PPO actor)."""
    from policies.generative.policy import CHECKPOINT_FORMAT

    try:
        state = torch.load(resolve_checkpoint(run_or_ckpt), map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # unreadable here: the PPO loader reports what is wrong with the file, naming it
        return False
    return isinstance(state, dict) and state.get("format") == CHECKPOINT_FORMAT


def load_generative(run_or_ckpt: Path) -> tuple[GenerativePolicy, Spec, dict[str, Any], Path]:
    """(policy with EMA weights, its chunked Spec, checkpoint extra, checkpoint path)."""
    path = resolve_checkpoint(run_or_ckpt)
    policy, extra = GenerativePolicy.load(path)
    return policy, Spec.from_dict(extra["spec"]), extra, path


class TorchSampler:
    """A policy at a fixed step count as a batched numpy sampler (obs (N,To,n), noise (N,H,A)) → chunk."""

    def __init__(self, policy: GenerativePolicy, steps: int | None) -> None:
        self.policy, self.steps = policy.eval(), steps
        fast_float_mode()

    @torch.no_grad()
    def __call__(self, obs: np.ndarray, noise: np.ndarray) -> np.ndarray:
        return self.policy.sample(torch.from_numpy(obs), torch.from_numpy(noise), self.steps).numpy()


def observation_windows(dataset_root: Path, spec: Spec, count: int, seed: int = 0) -> np.ndarray:
    """``count`` observation histories (count, To, n) drawn from a dataset: recorded inputs for export checks."""
    from policies.generative.data import ChunkWindows

    episodes, _, _ = load_episodes(dataset_root)
    windows = ChunkWindows(episodes, spec.observation_horizon, spec.action_chunk)
    idx = torch.from_numpy(np.random.default_rng(seed).integers(0, len(windows), count))
    obs, _ = windows.gather(idx)
    return obs.numpy().astype(np.float32)


def train_bc_run(
    method: str,
    dataset: Path,
    run_dir: Path,
    steps: int,
    time_budget_s: float | None,
    seed: int,
    obs_horizon: int = 2,
    horizon: int = 16,
    execution_horizon: int = 8,
    progress: bool = True,
    down_dims: tuple[int, ...] = (32, 64),
    lr: float = 3e-4,
) -> Path:
    """Train a teacher (diffusion | flow, or MeanFlow from data) on a dataset; returns its checkpoint.

    ``down_dims`` defaults to a CPU-sized two-level U-Net: on this 2-core machine a batch-256 step
    takes 74 ms at (32, 64), 160 ms at (32, 64, 128) and 0.32 s at (64, 128, 256), and its one-step
    student runs in onnxruntime at p50/p99 0.44/0.69 ms (1 thread) against 0.81/1.46 ms for
    (32, 64, 128) — the third level is what kept a student above 1 ms. Diffusion Policy's paper
    uses (256, 512, 1024) and lr 1e-4 for ~5000 epochs; ``lr`` is 3e-4 because CPU runs are ~30×
    shorter.
    """
    from policies.generative.policy import PolicyOptions
    from policies.generative.train import TrainConfig, train_teacher

    fast_float_mode()
    episodes, spec, _ = load_episodes(dataset)
    spec = chunked(spec, obs_horizon, horizon, execution_horizon)
    cfg = TrainConfig(
        method=method,
        max_steps=steps,
        time_budget_s=time_budget_s,
        seed=seed,
        progress=progress,
        checkpoint_every=max(steps // 4, 1),
        lr=lr,
        policy=PolicyOptions(down_dims=down_dims),
    )
    return train_teacher(episodes, cfg, run_dir, spec.to_json())


def distill_run(
    teacher: Path,
    method: str,
    dataset: Path,
    run_dir: Path,
    steps: int,
    time_budget_s: float | None,
    seed: int,
    dispersive_weight: float = 0.0,
    progress: bool = True,
    samples_per_window: int = 8,
) -> Path:
    """Distil a one-step student (consistency | meanflow) from a teacher run on a dataset's observations.

    The student learns from ``samples_per_window`` teacher samples (DDIM 10 / Euler 10) per
    training window, drawn once. A teacher trained for another task or robot than the dataset's
    is refused (`SpecMismatchError`).
    """
    from policies.generative.policy import PolicyOptions
    from policies.generative.train import TrainConfig, distill_student

    fast_float_mode()
    _, teacher_spec, _, ckpt = load_generative(teacher)
    episodes, spec, _ = load_episodes(dataset)
    spec = chunked(spec, teacher_spec.observation_horizon, teacher_spec.action_chunk, teacher_spec.execution_horizon)
    options = PolicyOptions(dispersive_weight=dispersive_weight)
    cfg = TrainConfig(
        method=method,
        max_steps=steps,
        time_budget_s=time_budget_s,
        seed=seed,
        progress=progress,
        checkpoint_every=max(steps // 4, 1),
        warmup_steps=min(500, max(steps // 10, 1)),
        teacher_samples_per_window=samples_per_window,
        policy=options,
    )
    return distill_student(ckpt, episodes, cfg, run_dir, spec.to_json())
