"""Scripted demonstrations: run a task's expert and record its successful episodes.

Scenes run in a batch (one expert per scene) so recording 200 episodes takes a minute, and each
episode is written to the dataset as soon as it ends: a killed recording keeps every episode it
finished. Episode ``k`` of the batch uses seed ``seed + k`` for both the initial state and the
expert's random choices, so a dataset is reproducible from its metadata. Failed expert episodes
are not recorded (a demonstration is supposed to show the task done) but are counted.

``cameras`` adds MJCF cameras of the scene as video features ``observation.images.<camera>``
(square ``image_size`` frames, rendered offscreen with ``MUJOCO_GL=egl``), frame t showing the
scene at the observation of step t, for policies that read cameras (`reflexlab bc --image-keys`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from reflexlab.dataset import IMAGE_PREFIX, DatasetWriter
from sim.registry import get_task, require_kind

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
    task: str,
    episodes: int,
    out: Path,
    seed: int = 0,
    num_envs: int = 8,
    progress: bool = True,
    cameras: tuple[str, ...] = (),
    image_size: int = 96,
) -> DemoSummary:
    """Record ``episodes`` successful expert episodes of ``task`` into the dataset at ``out``, with the
    scene's ``cameras`` as (image_size, image_size) RGB videos."""
    entry = get_task(task)
    require_kind(entry, "demo", "scripted demonstrations")
    spec = entry.spec()
    env = entry.task_class(num_envs, entry.config().episode_steps)
    if cameras and not hasattr(env, "render"):
        raise ValueError(f"task {task} renders no cameras (its scene env has no render method)")
    videos = {IMAGE_PREFIX + c: (image_size, image_size, 3) for c in cameras}
    writer = DatasetWriter(
        out, fps=spec.control_rate_hz, robot_type=spec.robot, features=FEATURES, spec=spec, videos=videos
    )
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
                live_ids = np.flatnonzero(live)
                views = {
                    c: dict(zip(live_ids, env.render(c, image_size, image_size, live_ids), strict=True))
                    for c in cameras
                }
                next_obs, cov, newly_done, info = env.step(targets)
                for i in live_ids:
                    a = acts[i]
                    images = {IMAGE_PREFIX + c: views[c][i] for c in cameras}
                    frames[i].append(
                        (obs[i], targets[i], block[i], a.detour, a.two_sided, cov[i], info["success"][i], images)
                    )
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
    for k, (obs, target, block, detour, two_sided, cov, success, images) in enumerate(frames):
        writer.add_frame(
            {
                "observation.state": obs,
                "action": target.astype(np.float32),
                "observation.environment_state": block.astype(np.float32),
                "expert.detour": np.array([detour], np.float32),
                "expert.two_sided": np.array([float(two_sided)], np.float32),
                **images,
            },
            reward=float(cov),
            terminated=bool(success),
            truncated=k == last and not success,
            success=bool(success),
        )
    writer.save_episode(task, metadata={"seed": seed, "max_coverage": max_coverage})
