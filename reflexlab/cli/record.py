"""`reflexlab record`: crash-safe recording of every step on the robot or against the arm bridge.

Its defaults are `RecordOptions`'s, read from there so that each lives in one place.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from real.session import RecordOptions


def record(
    out: Path = Path("runs/record/panda-push-t"),
    task: str = RecordOptions.task,
    episodes: int = RecordOptions.episodes,
    policy: str = RecordOptions.policy,
    teleop: str | None = None,
    sim_as_real: bool = RecordOptions.sim_as_real,
    reset: tuple[Literal["scripted", "human", "sim"], ...] | None = RecordOptions.reset,
    episode_time_s: float = RecordOptions.episode_time_s,
    seed: int = RecordOptions.seed,
    policy_version: int = RecordOptions.policy_version,
    cameras: tuple[str, ...] = RecordOptions.cameras,
) -> None:
    """Drive the robot (or the MuJoCo arm bridge, sim-as-real) and record every step, crash-safe.

    Each step stores observation, executed action, the policy's action, reward, success, end flags,
    is_intervention, policy_version and its timestamp (LeRobot v3 layout). SIGKILL mid-episode loses
    that episode only; episodes that end early are saved with the reason.

    Args:
        out: dataset folder (created, or appended to when its features and Spec match).
        task: an arm task with a real-robot adapter.
        episodes: episodes to record.
        policy: `expert` (the task's scripted expert), `none` (the person drives every step) or an exported .onnx.
        teleop: a teleop config (name in config/teleop, or a YAML path); a person may take over at any step.
        sim_as_real: start the MuJoCo arm bridge and record against it; off: the robot's driver must be running.
        reset: reset steps in order (default: sim for sim-as-real, scripted then human on a robot).
        episode_time_s: time limit per episode.
        seed: first episode's seed (scene and expert; later episodes count up).
        policy_version: stored with every step (which policy acted).
        cameras: cameras as NAME=SOURCE: ros:TOPIC (a sensor_msgs/Image topic: camera_node on the robot, the
            arm bridge's rendered scene in sim-as-real: scene=ros:/camera/color/image_raw), or a RealSense opened
            here (a .db3 recording played back, serial:NUMBER, live). Each step stores the newest frame (MP4,
            LeRobot video feature) and its age.
    """
    from deploy.step_actor import StepActor
    from real.session import record_session

    options = RecordOptions(
        out=out,
        task=task,
        episodes=episodes,
        policy=policy,
        sim_as_real=sim_as_real,
        reset=reset,
        episode_time_s=episode_time_s,
        seed=seed,
        policy_version=policy_version,
        cameras=cameras,
    )
    summary = record_session(options, teleop, onnx_actor=StepActor)
    print(json.dumps({"out": str(out), **summary.__dict__}))
