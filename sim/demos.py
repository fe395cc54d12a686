"""Scripted demonstrations: run a task's expert and record its successful episodes.

Scenes run in a batch (one expert per scene) so recording 200 episodes takes a minute, and each
episode is written to the dataset as soon as it ends: a killed recording keeps every episode it
finished. Episode ``k`` of the batch uses seed ``seed + k`` for both the initial state and the
expert's random choices, so a dataset is reproducible from its metadata. Failed expert episodes
are not recorded (a demonstration is supposed to show the task done) but are counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reflexlab.dataset import DatasetWriter
from sim.registry import get_task

FEATURES = {
    "observation.state": (6,),
    "action": (2,),
    "observation.environment_state": (3,),  # block pose (x, y, yaw): for analysis, not a policy input
    "expert.detour": (1,),  # +1 counter-clockwise round the block, −1 clockwise, 0 none
    "expert.two_sided": (1,),  # 1 when the current detour's side was drawn at random
}


@dataclass
class DemoSummary:
    dataset: str
    episodes: int
    attempted: int
    expert_success_rate: float
    mean_length: float
    two_sided_steps: int
    detour_fraction_ccw: float


def record_demos(
    task: str, episodes: int, out: Path, seed: int = 0, num_envs: int = 8, progress: bool = True
) -> DemoSummary:
    """Record ``episodes`` successful expert episodes of ``task`` into the dataset at ``out``."""
    entry = get_task(task)
    entry.require("demo", "scripted demonstrations")
    spec = entry.spec()
    env = entry.task_class(num_envs, entry.config().episode_steps)
    writer = DatasetWriter(out, fps=spec.control_rate_hz, robot_type=spec.robot, features=FEATURES, spec=spec)
    saved = attempted = two_sided = 0
    lengths: list[int] = []
    ccw = detours = 0
    next_seed = seed
    bar = tqdm(total=episodes, desc=f"demos {task}", unit="ep", disable=not progress)
    with writer:
        while saved < episodes:
            seeds = list(range(next_seed, next_seed + num_envs))
            next_seed += num_envs
            obs = env.reset(seeds)
            experts = [entry.expert(np.random.default_rng(s)) for s in seeds]
            frames: list[list[tuple]] = [[] for _ in seeds]
            while not env.done.all():
                pusher, block = env.pusher_xy(), env.block_pose()
                acts = [None if env.done[i] else x.act(pusher[i], block[i]) for i, x in enumerate(experts)]
                targets = np.array([a.target if a is not None else pusher[i] for i, a in enumerate(acts)])
                live = ~env.done
                next_obs, cov, newly_done, info = env.step(targets)
                for i in np.flatnonzero(live):
                    a = acts[i]
                    frames[i].append((obs[i], targets[i], block[i], a.detour, a.two_sided, cov[i], info["success"][i]))
                    if newly_done[i] and saved < episodes:
                        attempted += 1
                        if info["success"][i]:
                            _save(writer, frames[i], task, seeds[i], float(env.max_coverage[i]))
                            saved += 1
                            bar.update(1)
                            lengths.append(len(frames[i]))
                            two_sided += sum(int(f[4]) for f in frames[i])
                            ccw += sum(f[3] > 0 for f in frames[i])
                            detours += sum(f[3] != 0 for f in frames[i])
                obs = next_obs
    bar.close()
    return DemoSummary(
        dataset=str(out),
        episodes=saved,
        attempted=attempted,
        expert_success_rate=saved / max(attempted, 1),
        mean_length=float(np.mean(lengths)) if lengths else 0.0,
        two_sided_steps=two_sided,
        detour_fraction_ccw=ccw / max(detours, 1),
    )


def _save(writer: DatasetWriter, frames: list[tuple], task: str, seed: int, max_coverage: float) -> None:
    last = len(frames) - 1
    for k, (obs, target, block, detour, two_sided, cov, success) in enumerate(frames):
        writer.add_frame(
            {
                "observation.state": obs,
                "action": target.astype(np.float32),
                "observation.environment_state": block.astype(np.float32),
                "expert.detour": np.array([detour], np.float32),
                "expert.two_sided": np.array([float(two_sided)], np.float32),
            },
            reward=float(cov),
            terminated=bool(success),
            truncated=k == last and not success,
            success=bool(success),
        )
    writer.save_episode(task, metadata={"seed": seed, "max_coverage": max_coverage})
