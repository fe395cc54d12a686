"""Observations recorded by running a policy on its own task: the inputs an ONNX export is checked on.

Learning-side (they step the simulator); `deploy.onnx_export` takes what they record as input, so
serving code never runs a simulator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from policies.actor import LoadedPolicy
from policies.chunk_eval import evaluate_chunks
from reflexlab.config import update_dataclass
from reflexlab.spec import Spec
from sim.backends.mujoco_cpu import MujocoVecEnv
from sim.registry import get_task


def record_observations(policy: LoadedPolicy, num_obs: int, seed: int = 7) -> np.ndarray:
    """Policy observations in physical units, recorded by running the policy on its own task."""
    entry = get_task(policy.info["task"])
    cfg = update_dataclass(entry.config(policy.info["profile"]), policy.info["task_cfg"])
    num_envs = 8
    env = MujocoVecEnv(entry, cfg, num_envs=num_envs, nthread=1, seed=seed)
    scales = torch.tensor(policy.spec.policy_obs.scales())
    obs = env.get_observations()
    rows = []
    for _ in range(-(-num_obs // num_envs)):
        rows.append(obs[policy.spec.policy_group] / scales)
        obs, *_ = env.step(policy.act(obs))
    return torch.cat(rows)[:num_obs].numpy().astype(np.float32)


def record_histories(sampler: Any, spec: Spec, num_obs: int, seed: int = 7) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Observation histories (num_obs, To, n) recorded by running a chunk policy on its own task, and for a
    Spec with cameras the rendered frames {camera: (num_obs, To, 3, H, W) uint8} the policy saw."""
    rows: list[np.ndarray] = []
    frames: list[dict[str, np.ndarray]] = []

    def recording(obs: np.ndarray, noise: np.ndarray, *images: dict[str, np.ndarray]) -> np.ndarray:
        rows.append(obs.copy())
        if images:
            frames.append({k: v.copy() for k, v in images[0].items()})
        return sampler(obs, noise, *images)

    episodes = 8
    steps = -(-num_obs // episodes) * spec.execution_horizon  # one recorded history per re-plan
    evaluate_chunks(recording, spec, list(range(seed, seed + episodes)), noise_seed=seed, episode_steps=steps)
    cams = {i.name: np.concatenate([f[i.name] for f in frames])[:num_obs] for i in spec.images}
    return np.concatenate(rows)[:num_obs], cams
