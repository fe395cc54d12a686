"""`car-race`'s interface, shared by the sim, sim-as-real and the car.

What FastRLAP's policy reads beside its camera: the car's speed (wheel odometry), its yaw rate (IMU), where the next
checkpoint is (a unit vector in the car's frame and a distance: on the car from its pose estimate, in the sim from
the true pose) and the previous action. It commands throttle and steering in [−1, 1], each changing at most
``MAX_ACTION_RATE`` per second. The camera is the policy's (`reflexlab.spec.ImageInput`), not the task's.
"""

from __future__ import annotations

import numpy as np

from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec
from reflexlab.tasks.car_race import constants as C


def make_spec() -> Spec:
    """The task's interface (a plain, one-step Spec)."""
    policy = ObsGroup(
        "policy",
        (
            ObsTerm("speed", 1, "m/s forward, wheel odometry", 1.0 / C.MAX_SPEED),
            ObsTerm("yaw_rate", 1, "rad/s, IMU"),
            ObsTerm("goal_direction", 2, "unit vector to the next checkpoint, car frame (x ahead, y left)"),
            ObsTerm("goal_distance", 1, "m to the next checkpoint", 1.0 / C.CHECKPOINT_SPACING),
            ObsTerm("last_action", 2, "throttle, steering of the previous step"),
        ),
    )
    action = ActionSpec(
        kind="steering_throttle",
        names=("throttle", "steering"),
        scale=1.0,
        offset=(0.0, 0.0),
        lower=(-1.0, -1.0),
        upper=(1.0, 1.0),
        max_rate=C.MAX_ACTION_RATE,
    )
    return Spec(
        robot=C.ROBOT_NAME,
        task=C.TASK_NAME,
        observation_groups=(policy,),
        policy_group="policy",
        action=action,
        control_rate_hz=1.0 / C.CONTROL_DT,
        physics_rate_hz=1.0 / C.PHYSICS_DT,
        extra={
            "max_speed_m_s": C.MAX_SPEED,
            "max_steer_rad": C.MAX_STEER,
            "checkpoint_radius_m": C.CHECKPOINT_RADIUS,
            "camera": C.CAMERA,
        },
    )


def goal_in_car_frame(pose: np.ndarray, goal_xy: np.ndarray) -> tuple[np.ndarray, float]:
    """(unit vector, distance) from the car at ``pose`` (x, y, yaw) to ``goal_xy``, in the car's frame."""
    d = np.asarray(goal_xy, np.float64) - np.asarray(pose[:2], np.float64)
    c, s = np.cos(pose[2]), np.sin(pose[2])
    local = np.array([c * d[0] + s * d[1], -s * d[0] + c * d[1]])
    dist = float(np.linalg.norm(local))
    return (local / dist if dist > 1e-9 else np.array([1.0, 0.0])), dist


def observation(
    speed: float, yaw_rate: float, pose: np.ndarray, goal_xy: np.ndarray, last_action: np.ndarray
) -> np.ndarray:
    """The policy observation in the Spec's order."""
    direction, dist = goal_in_car_frame(pose, goal_xy)
    return np.concatenate([[speed, yaw_rate], direction, [dist], last_action]).astype(np.float32)


def twist_of(throttle: float, steering: float) -> tuple[float, float]:
    """The Twist (speed m/s, yaw rate rad/s) that asks the car for ``throttle`` and ``steering`` (both in [−1, 1]):
    speed throttle · ``MAX_SPEED``, and the yaw rate that steering angle gives at that speed on the car's wheelbase
    (the drivers turn it back into the angle, `reflexlab.ros.topics.CarTopics`)."""
    speed = float(throttle) * C.MAX_SPEED
    return speed, speed * float(np.tan(float(steering) * C.MAX_STEER)) / C.WHEELBASE
