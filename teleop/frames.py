"""Device twist → robot command, in the robot's base frame.

"The arm moved the wrong way" is almost always a frame mistake, so the chain is explicit and
each link is configured, not implied:

1. the device reports its twist in its own axes (x right, y away from the operator, z up; see
   `teleop.devices.base`);
2. a fixed rotation takes those axes into the *command frame*: where the operator stands relative
   to the robot (a preset or roll/pitch/yaw), i.e. which robot direction "push forward" means;
3. the command frame is ``base`` (done) or ``tool``: then the current end-effector orientation
   rotates it into base, so "forward" means "along the gripper's own axis" wherever it points;
4. scaled to m/s and rad/s, the norm limited to the configured maximum (a diagonal push is not
   √3 times faster than a straight one).

Joint-delta mode skips frames altogether: signed device axes drive single joints.
"""

from __future__ import annotations

import numpy as np

from teleop.config import FrameConfig
from teleop.devices.base import parse_signed_axis

#: Operator positions → yaw (degrees) of the device frame about the base z axis, for a robot base
#: with x forward, y left, z up (REP 103). E.g. facing the robot, pushing away moves the arm to -x.
OPERATOR_PRESETS_YAW_DEG: dict[str, float] = {
    "behind_robot": -90.0,
    "facing_robot": 90.0,
    "left_of_robot": 180.0,
    "right_of_robot": 0.0,
}


def rotation_from_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """3×3 rotation for extrinsic x-y-z angles in radians (R = Rz·Ry·Rx)."""
    cr, sr, cp, sp, cy, sy = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def rotation_from_quat_wxyz(q: np.ndarray) -> np.ndarray:
    """3×3 rotation of a unit quaternion (w, x, y, z) — MuJoCo's order; normalised first."""
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _limit_norm(v: np.ndarray, limit: float) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v * (limit / norm) if norm > limit else v


class FrameMapper:
    """Maps normalised device twists to base-frame EE twists or joint increments (see module doc)."""

    def __init__(self, config: FrameConfig) -> None:
        self.config = config
        if config.operator is not None:
            if config.operator not in OPERATOR_PRESETS_YAW_DEG:
                raise ValueError(
                    f"frame.operator: {config.operator!r} is not a preset; use one of "
                    f"{', '.join(OPERATOR_PRESETS_YAW_DEG)} or set device_rotation_rpy_deg"
                )
            rpy = (0.0, 0.0, OPERATOR_PRESETS_YAW_DEG[config.operator])
        else:
            rpy = config.device_rotation_rpy_deg  # type: ignore[assignment]
        #: device axes → command-frame axes
        self.device_to_frame = rotation_from_rpy(*np.radians(rpy))
        self._joints = [parse_signed_axis(a) if a else None for a in config.joint_axes]

    def twist(self, device_twist: np.ndarray, ee_quat_wxyz: np.ndarray | None = None) -> np.ndarray:
        """(6,) [vx, vy, vz (m/s), wx, wy, wz (rad/s)] in the robot base frame.

        Args:
            device_twist: (6,) normalised device twist.
            ee_quat_wxyz: current end-effector orientation in base; required for the ``tool`` frame.
        """
        rot = self.device_to_frame
        if self.config.command_frame == "tool":
            if ee_quat_wxyz is None:
                raise ValueError("command_frame 'tool' needs the current end-effector orientation (ee_quat_wxyz)")
            rot = rotation_from_quat_wxyz(ee_quat_wxyz) @ rot
        d = np.asarray(device_twist, dtype=np.float64)
        linear = _limit_norm(rot @ d[:3] * self.config.max_linear_speed, self.config.max_linear_speed)
        angular = _limit_norm(rot @ d[3:] * self.config.max_angular_speed, self.config.max_angular_speed)
        return np.concatenate([linear, angular])

    def joint_delta(self, device_twist: np.ndarray, dt: float) -> np.ndarray:
        """Per-joint increments for one control period of ``dt`` seconds (rad, or m for prismatic joints)."""
        d = np.asarray(device_twist, dtype=np.float64)
        out = np.zeros(len(self._joints))
        for j, drive in enumerate(self._joints):
            if drive is not None:
                index, sign = drive
                out[j] = sign * d[index] * self.config.max_joint_speed * dt
        return out
