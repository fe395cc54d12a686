"""`reflexlab sim-bridge`: a task's MuJoCo robot behind the real robot's ROS 2 topics (sim-as-real)."""

from __future__ import annotations

import json
from typing import Literal


def sim_bridge(
    task: str = "quadruped-walk",
    robot: str = "quadruped",
    publish_rate: float = 0.0,
    command_timeout_s: float | None = None,
    watchdog_mode: Literal["hold", "damp"] = "hold",
    clock: bool = False,
    seed: int = 0,
    seconds: float | None = None,
) -> None:
    """Run the task's MuJoCo robot as a ROS 2 node in real time: the robot's own topics, no hardware.

    Legged tasks: joint states + IMU out, joint targets in. Arm tasks (panda-push-t): the arm topics
    of `real.ros_arm.ArmTopics` (joint states, end-effector pose, tracked block pose out; end-effector
    targets and scene resets in), exactly what `franka_node` speaks on the robot: sim-as-real. ``car-race``:
    the car's topics of `reflexlab.ros.topics.CarTopics` (odometry, IMU, first-person camera out; Twist
    commands and resets in) on the unseen test course.

    Args:
        task: registered task name.
        robot: robot config (topics, command type) shared with the policy node (legged tasks).
        publish_rate: state rate (Hz); 0 = every physics step (legged) or 100 Hz (arm).
        command_timeout_s: the watchdog engages after this long without a command (default 0.1 s
            legged, 0.5 s arm: a 10 Hz policy, 0.3 s car).
        watchdog_mode: hold the measured pose, or damp only (legged tasks).
        clock: publish /clock with simulated time (and stamp states with it; legged tasks).
        seed: initial scene (arm and car tasks; later scenes come from /sim/reset).
        seconds: stop after this long (default: run until Ctrl-C).
    """
    from sim.registry import sim_as_real_tasks

    if task == "car-race":
        from sim.ros.car_bridge import run as run_car

        timeout = 0.3 if command_timeout_s is None else command_timeout_s
        diag = run_car(seed=seed, command_timeout_s=timeout, seconds=seconds)
    elif task in sim_as_real_tasks():
        from sim.ros.arm_bridge import run as run_arm

        diag = run_arm(
            task,
            seed=seed,
            publish_rate_hz=publish_rate or 100.0,
            command_timeout_s=0.5 if command_timeout_s is None else command_timeout_s,
            seconds=seconds,
        )
    else:
        from sim.ros.sim_bridge import run

        timeout = 0.1 if command_timeout_s is None else command_timeout_s
        diag = run(task, robot, publish_rate, timeout, watchdog_mode, clock, seconds)
    print(json.dumps(diag))
