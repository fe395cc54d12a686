"""`reflexlab record`: drive a single env (robot or sim-as-real) and write every step as an episode.

Each step stores the policy observation, the action the robot actually executed (the person's
during an intervention), what the policy had asked for, reward, success, end flags,
``is_intervention``, ``policy_version`` and the step's time since reset, in the crash-safe
dataset format (`reflexlab.dataset`): a SIGKILL mid-episode loses that episode only. Episodes
that end early (stale state, a non-finite action, a disconnected teleop device) are saved too,
marked with the reason, because what went wrong on a robot is data; nothing is dropped silently.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from real.env import NON_FINITE_ACTION
from reflexlab.dataset import CAMERA_PREFIX, IMAGE_PREFIX, DatasetWriter
from reflexlab.env import SingleEnv

# obs -> action; an actor reading cameras (`record_episodes`' ``actor_cameras``) is called as actor(obs, frames)
Actor = Callable[..., np.ndarray]
# The noise a generator drew for the chunk that began at this step (zeros elsewhere): with the policy version that
# drew it, it replays the chunk's sampler (`deploy.step_actor.StepActor.noise_row`, RL-100's online stage).
NOISE_COLUMN = "policy.noise"


class Camera(Protocol):
    """What recording needs of a camera (`real.cameras.realsense.RealSenseCamera`): the newest frame and its age."""

    period_s: float

    def latest(self) -> Any:  # a `Latest` (frame, age_s), or None before the first frame
        ...


@dataclass
class RecordSummary:
    episodes: int = 0
    steps: int = 0
    successes: int = 0
    intervention_steps: int = 0
    dropped_camera_frames: int = 0
    stale_frame_holds: int = 0  # steps the robot held because a camera the actor reads had no fresh frame
    end_reasons: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        rate = self.successes / max(self.episodes, 1)
        share = self.intervention_steps / max(self.steps, 1)
        return (
            f"{self.episodes} episodes, {self.steps} steps, success {rate:.0%}, interventions {share:.0%} of steps, "
            f"ends: {self.end_reasons}"
        )


def features_of(env: SingleEnv, cameras: Mapping[str, Camera] | None = None) -> dict[str, tuple[int, ...]]:
    """The vector features `record_episodes` writes for an env (and each camera's frame age)."""
    spec = env.spec
    features = {
        "observation.state": (spec.policy_obs.size,),
        "action": (spec.action.size,),
        "policy.action": (spec.action.size,),
    }
    return features | {age_column(name): (1,) for name in cameras or {}}


def age_column(camera: str) -> str:
    """The per-step age of a camera's frame, s (−1 before its first frame)."""
    return f"{CAMERA_PREFIX}{camera}.age_s"


def videos_of(cameras: Mapping[str, Camera]) -> dict[str, tuple[int, int, int]]:
    """The camera features (H, W, 3), from each camera's newest frame (start cameras and wait for a frame first)."""
    shapes = {}
    for name, cam in cameras.items():
        latest = cam.latest()
        if latest is None:
            raise RuntimeError(f"camera {name!r} has delivered no frame yet: its image size is unknown")
        shapes[f"{IMAGE_PREFIX}{name}"] = tuple(latest.frame.color.shape)
    return shapes  # type: ignore[return-value]


def _camera_columns(cameras: Mapping[str, Camera], max_age_periods: float) -> tuple[dict[str, Any], int]:
    """This step's newest frame per camera, ``None`` (a dropped frame) when none is fresh, and its age."""
    out: dict[str, Any] = {}
    dropped = 0
    for name, cam in cameras.items():
        latest = cam.latest()
        fresh = latest is not None and latest.age_s <= max_age_periods * cam.period_s
        out[f"{IMAGE_PREFIX}{name}"] = latest.frame.color if fresh else None
        age = latest.age_s if latest is not None else -1.0  # −1: no frame yet
        out[age_column(name)] = np.array([age], np.float32)
        dropped += int(not fresh)
    return out, dropped


def record_episodes(
    env: SingleEnv,
    writer: DatasetWriter,
    actor: Actor | None,
    episodes: int,
    *,
    seed: int = 0,
    task_text: str | None = None,
    policy_version: int = 0,
    reset_actor: Callable[[], None] | None = None,
    on_episode: Callable[[int, RecordSummary], None] | None = None,
    cameras: Mapping[str, Camera] | None = None,
    max_frame_age_periods: float = 2.0,
    columns: Callable[[], dict[str, np.ndarray]] | None = None,
    actor_cameras: tuple[str, ...] = (),
) -> RecordSummary:
    """Run ``episodes`` episodes (seeds ``seed``, ``seed`` + 1, …) and save each as it ends.

    ``actor`` None: the person drives every step (the env's intervention arbiter must be engaged;
    otherwise the env holds). ``policy_version`` labels which policy acted (RL loops bump it).
    ``cameras``: the newest frame of each is stored with the step it was seen at (read after the step, with the
    observation), with its age; a camera with no frame younger than ``max_frame_age_periods`` periods gets a
    dropped-frame mark instead of a stale image (``camera.<name>.is_dropped``). ``columns``: more of the writer's
    vectors for the step just acted, read after ``actor`` (e.g. the noise it drew, `NOISE_COLUMN`).
    ``actor_cameras``: cameras (of ``cameras``) the actor reads: it is called ``actor(obs, {camera: frame})`` with the
    frames recorded beside ``obs``, None for a camera past the frame-age limit; then it holds (a NaN action, never
    sent: the env holds the robot) and the step is counted in ``stale_frame_holds``, per episode in its metadata.
    """
    summary = RecordSummary()
    task_text = task_text or env.spec.task
    cameras = cameras or {}
    unknown = [c for c in actor_cameras if c not in cameras]
    if unknown:
        have = ", ".join(cameras) or "none"
        raise ValueError(f"the policy reads camera(s) {unknown}, and this session opened {have}: add them (--cameras)")
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        start_ns = time.time_ns()  # wall clock of the episode's t = 0: bags and logs line up with it
        images, dropped = _camera_columns(cameras, max_frame_age_periods)
        if reset_actor is not None:
            reset_actor()
        done, reason, holds, stale = False, "", 0, []
        while not done:
            if actor is None:
                asked = np.full(env.spec.action.size, np.nan)
            elif actor_cameras:
                frames = {c: images[IMAGE_PREFIX + c] for c in actor_cameras}
                asked = actor(obs, frames)
                stale = [c for c, f in frames.items() if f is None]
                holds += int(bool(stale))
            else:
                asked = actor(obs)
            extra = columns() if columns is not None else {}
            next_obs, reward, terminated, truncated, info = env.step(asked)
            writer.add_frame(
                {
                    "observation.state": obs,
                    "action": info["action"],
                    "policy.action": np.nan_to_num(np.asarray(asked, dtype=np.float64), nan=0.0),
                    **images,  # the images seen with ``obs``
                    **extra,
                },
                reward=reward,
                terminated=terminated,
                truncated=truncated,
                success=info["success"],
                is_intervention=info["is_intervention"],
                policy_version=policy_version,
                measured_timestamp=info["timestamp"],
            )
            summary.dropped_camera_frames += dropped  # the marks of the row just written, the first one's included
            images, dropped = _camera_columns(cameras, max_frame_age_periods)
            summary.steps += 1
            summary.intervention_steps += int(info["is_intervention"])
            why = info["reason"]
            if actor_cameras and stale and why.startswith(NON_FINITE_ACTION):
                why = f"held: no frame from camera(s) {stale} within {max_frame_age_periods:g} frame periods"
            obs, done, reason = next_obs, terminated or truncated, why or reason
        end = "success" if info["success"] else (reason.split(":")[0] if reason else "terminated")
        meta = {"end_reason": reason or end, "seed": seed + k, "start_unix_ns": start_ns}
        writer.save_episode(task_text, meta | ({"stale_frame_holds": holds} if actor_cameras else {}))
        summary.stale_frame_holds += holds
        summary.episodes += 1
        summary.successes += int(info["success"])
        summary.end_reasons[end] = summary.end_reasons.get(end, 0) + 1
        if on_episode is not None:
            on_episode(k, summary)
    return summary


def print_progress(k: int, summary: RecordSummary) -> None:
    print(f"episode {k}: {summary.line()}", file=sys.stderr, flush=True)


def default_out(task: str) -> Path:
    return Path("runs") / "record" / task
