"""Scripted demonstrations: run a task's expert and record its successful episodes.

Scenes run in a batch (one expert per scene) so recording 200 episodes takes a minute, and each
episode is written to the dataset as soon as it ends: a killed recording keeps every episode it
finished. Episode ``k`` of the batch uses seed ``seed + k`` for both the initial state and the
expert's random choices, so a dataset is reproducible from its metadata. Failed expert episodes
are not recorded (a demonstration is supposed to show the task done) but are counted.

What is recorded beside each step's observation and action is the scene env's to say (``demo_features``):
``observation.environment_state`` (its ``environment_state()``, e.g. push-T's block pose, peg-insert's true
hole: for analysis, never a policy input) and ``expert.<name>`` columns read off the expert's steps (push-T:
``detour``, ``two_sided``; peg-insert: ``phase``). The expert acts on the env's ``expert_inputs()`` (push-T:
pusher and true block pose; peg-insert: the noisy observation a policy gets).

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

EXPERT_PREFIX = "expert."


@dataclass
class DemoSummary:
    dataset: str
    episodes: int
    attempted: int
    expert_success_rate: float
    mean_length: float
    two_sided_steps: int  # push-T: steps in detours whose side was drawn at random (0 for other tasks)
    detour_fraction_ccw: float  # push-T: share of detour steps going counter-clockwise (0 for other tasks)


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
    features = {"observation.state": (spec.policy_obs.size,), "action": (spec.action.size,), **env.demo_features}
    columns = [k for k in env.demo_features if k.startswith(EXPERT_PREFIX)]
    writer = DatasetWriter(
        out, fps=spec.control_rate_hz, robot_type=spec.robot, features=features, spec=spec, videos=videos
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
            frames: list[list[dict]] = [[] for _ in seeds]
            while not env.done.all():
                inputs, state, hold = env.expert_inputs(), env.environment_state(), env.hold_action()
                acts = [None if env.done[i] else x.act(*inputs[i]) for i, x in enumerate(experts)]
                targets = np.array([a.target if a is not None else hold[i] for i, a in enumerate(acts)])
                live = ~env.done
                live_ids = np.flatnonzero(live)
                views = {
                    c: dict(zip(live_ids, env.render(c, image_size, image_size, live_ids), strict=True))
                    for c in cameras
                }
                next_obs, reward, newly_done, info = env.step(targets)
                for i in live_ids:
                    a = acts[i]
                    frames[i].append(
                        {
                            "observation.state": obs[i],
                            "action": targets[i].astype(np.float32),
                            "observation.environment_state": state[i].astype(np.float32),
                            **{k: np.array([getattr(a, k.removeprefix(EXPERT_PREFIX))], np.float32) for k in columns},
                            **{IMAGE_PREFIX + c: views[c][i] for c in cameras},
                            "reward": float(reward[i]),
                            "success": bool(info["success"][i]),
                        }
                    )
                    if newly_done[i] and saved < episodes:
                        attempted += 1
                        if info["success"][i]:
                            _save(writer, frames[i], task, seeds[i], float(env.episode_metrics()["max_coverage"][i]))
                            saved += 1
                            bar.update(1)
                            lengths.append(len(frames[i]))
                            two_sided += sum(
                                int(f["expert.two_sided"][0]) for f in frames[i] if "expert.two_sided" in f
                            )
                            detour = [f["expert.detour"][0] for f in frames[i] if "expert.detour" in f]
                            ccw += sum(int(d > 0) for d in detour)
                            detours += sum(int(d != 0) for d in detour)
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


def _save(writer: DatasetWriter, frames: list[dict], task: str, seed: int, max_coverage: float) -> None:
    """One episode's frames (feature columns plus the step's reward and success) into the dataset."""
    last = len(frames) - 1
    for k, frame in enumerate(frames):
        columns = {name: v for name, v in frame.items() if name not in ("reward", "success")}
        success = frame["success"]
        writer.add_frame(
            columns, reward=frame["reward"], terminated=success, truncated=k == last and not success, success=success
        )
    writer.save_episode(task, metadata={"seed": seed, "max_coverage": max_coverage})
