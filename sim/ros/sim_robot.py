"""One simulated legged robot stepped in MuJoCo as a real robot would run: the sim bridge's core.

It takes joint-position targets (the MJCF's position actuators do the PD, as in training), steps
the physics at the task's rate with nominal parameters, and reports what a robot's drivers
would (joint states, IMU orientation and gyro) plus ground truth for evaluation. A watchdog
decides what the actuators do when commands stop: hold the measured pose, or damp only.
Kept free of ROS so that tests can compare it with the training environment directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import mujoco
import numpy as np

from reflexlab.rotations import projected_gravity
from sim.registry import get_task

WatchdogMode = Literal["hold", "damp"]


@dataclass
class SimState:
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    joint_effort: np.ndarray
    quat_xyzw: np.ndarray
    gyro: np.ndarray  # base frame, rad/s
    base_pos: np.ndarray  # world, m (ground truth)
    base_lin_vel: np.ndarray  # base frame, m/s (ground truth)


class SimRobot:
    """A registered legged task's robot, standing in its default pose at reset."""

    def __init__(self, task: str = "quadruped-walk", yaw: float = 0.0) -> None:
        entry = get_task(task)
        self.c = c = entry.task_class.constants
        self.spec = entry.spec()
        self.task_cfg = entry.config()
        self.model = mujoco.MjModel.from_xml_path(str(entry.scene_xml))
        self.data = mujoco.MjData(self.model)
        m = self.model
        self.joint_names = tuple(c.JOINT_NAMES)
        self._jq = np.array([m.jnt_qposadr[m.joint(n).id] for n in c.JOINT_NAMES])
        self._jv = np.array([m.jnt_dofadr[m.joint(n).id] for n in c.JOINT_NAMES])
        self.dt = float(m.opt.timestep)
        self.lower = np.asarray(c.JOINT_LOWER, dtype=np.float64)
        self.upper = np.asarray(c.JOINT_UPPER, dtype=np.float64)
        self._kp = m.actuator_gainprm[:, 0].copy()
        self._bias_kp = m.actuator_biasprm[:, 1].copy()
        self.mode: Literal["command", "hold", "damp"] = "command"
        self.reset(yaw)

    def reset(self, yaw: float = 0.0) -> None:
        d, c = self.data, self.c
        mujoco.mj_resetDataKeyframe(self.model, d, 0)
        d.qpos[2] = c.INITIAL_BASE_HEIGHT
        d.qpos[3:7] = (math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2))
        d.qpos[self._jq] = c.DEFAULT_JOINT_POS
        d.qvel[:] = 0.0
        d.ctrl[:] = c.DEFAULT_JOINT_POS
        self._set_mode("command")
        mujoco.mj_forward(self.model, d)
        self.time = 0.0

    def set_targets(self, targets: np.ndarray) -> None:
        """Joint-position targets in ``joint_names`` order, clipped to the joint limits (as a driver would)."""
        self._set_mode("command")
        self.data.ctrl[:] = np.clip(targets, self.lower, self.upper)

    def engage_watchdog(self, mode: WatchdogMode) -> None:
        """Commands stopped: hold the measured pose with the PD, or damp only (no stiffness)."""
        if mode == "hold":
            self.data.ctrl[:] = np.clip(self.data.qpos[self._jq], self.lower, self.upper)
        self._set_mode(mode)

    def _set_mode(self, mode: Literal["command", "hold", "damp"]) -> None:
        if mode == self.mode:
            return
        m = self.model
        stiff = 0.0 if mode == "damp" else 1.0
        m.actuator_gainprm[:, 0] = self._kp * stiff
        m.actuator_biasprm[:, 1] = self._bias_kp * stiff
        self.mode = mode

    def step(self) -> None:
        mujoco.mj_step(self.model, self.data)
        self.time += self.dt

    def state(self) -> SimState:
        d = self.data
        q = d.qpos[3:7]  # w, x, y, z
        return SimState(
            joint_pos=d.qpos[self._jq].copy(),
            joint_vel=d.qvel[self._jv].copy(),
            joint_effort=d.actuator_force.copy(),
            quat_xyzw=np.array([q[1], q[2], q[3], q[0]]),
            gyro=d.qvel[3:6].copy(),  # a free joint's angular velocity is in the body frame
            base_pos=d.qpos[:3].copy(),
            base_lin_vel=_rotate_inverse(q, d.qvel[:3]),
        )

    @property
    def fallen(self) -> bool:
        """The task's own fall test (base tilted too far or too low)."""
        s, cfg = self.state(), self.task_cfg
        return bool(projected_gravity(s.quat_xyzw)[2] > -cfg.fall_tilt_cos or s.base_pos[2] < cfg.fall_height)


def _rotate_inverse(q_wxyz: np.ndarray, v: np.ndarray) -> np.ndarray:
    out = np.zeros(3)
    conj = np.array([q_wxyz[0], -q_wxyz[1], -q_wxyz[2], -q_wxyz[3]])
    mujoco.mju_rotVecQuat(out, v, conj)
    return out
