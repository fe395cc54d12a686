"""Turn a 10–100 Hz target stream into a smooth 1 kHz reference for the impedance laws.

A policy's targets arrive as steps. Fed straight into an impedance law, each step is a torque
step, which the robot answers with a ``controller_torque_discontinuity`` reflex (and, below
that, with a jerk). Each reference here follows its target as a critically damped second-order
system with a speed limit: position and velocity stay continuous whatever the stream does
(late, bursty, jumping, stopped), and no rate has to be configured, so the same driver serves a
10 Hz teacher and a 100 Hz one-step policy. The price is a lag of about two time constants.
"""

from __future__ import annotations

import mujoco
import numpy as np


class SmoothReference:
    """``x'' = w²(goal − x) − 2w x'`` with ``w = 1/time_constant``, speed-limited per axis or in norm."""

    def __init__(self, x0: np.ndarray, time_constant_s: float, max_speed: np.ndarray | float) -> None:
        self.w = 1.0 / time_constant_s
        self.max_speed = np.asarray(max_speed, dtype=np.float64)
        self.x = np.array(x0, dtype=np.float64)
        self.v = np.zeros_like(self.x)

    def stopping_point(self) -> np.ndarray:
        """The goal at which the reference, moving as it is, comes to rest without turning back.

        With goal ``x + v/w`` the error decays as ``(v/w)·exp(−w t)``: a monotonic stop. Holding
        at ``x`` instead would overshoot by ``v/(w e)`` and come back (8 mrad at 0.5 rad/s, 20/s).
        """
        return self.x + self.v / self.w

    def step(self, goal: np.ndarray, dt: float) -> np.ndarray:
        self.v = self.v + dt * (self.w * self.w * (goal - self.x) - 2.0 * self.w * self.v)
        if self.max_speed.ndim:  # per-axis limit (joints)
            self.v = np.clip(self.v, -self.max_speed, self.max_speed)
        else:  # limit on the speed's norm (Cartesian: the direction of travel is kept)
            speed = float(np.linalg.norm(self.v))
            if speed > self.max_speed:
                self.v *= self.max_speed / speed
        self.x = self.x + dt * self.v
        return self.x


class SmoothOrientation:
    """The same filter on the rotation group: the error is the rotation vector from reference to goal.

    Quaternions are (w, x, y, z); angular velocity is kept in the reference's own frame, the frame
    MuJoCo's quaternion helpers use.
    """

    def __init__(self, quat0: np.ndarray, time_constant_s: float, max_angular_speed: float) -> None:
        self.w = 1.0 / time_constant_s
        self.max_speed = max_angular_speed
        self.reset(quat0)

    def reset(self, quat: np.ndarray) -> None:
        self.quat = normalized(quat)
        self.omega = np.zeros(3)

    def step(self, goal: np.ndarray, dt: float) -> np.ndarray:
        error = np.zeros(3)
        mujoco.mju_subQuat(error, goal, self.quat)  # goal ⊖ reference, in the reference's frame
        self.omega = self.omega + dt * (self.w * self.w * error - 2.0 * self.w * self.omega)
        speed = float(np.linalg.norm(self.omega))
        if speed > self.max_speed:
            self.omega *= self.max_speed / speed
        quat = self.quat.copy()
        mujoco.mju_quatIntegrate(quat, self.omega, dt)
        self.quat = quat
        return self.quat

    def stopping_point(self) -> np.ndarray:
        """Where the orientation comes to rest without turning back (see `SmoothReference.stopping_point`)."""
        quat = self.quat.copy()
        mujoco.mju_quatIntegrate(quat, self.omega, 1.0 / self.w)
        return normalized(quat)

    def angular_velocity_world(self) -> np.ndarray:
        """The reference's angular velocity in the base frame (what a Jacobian maps dq to)."""
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, self.quat)
        return rot.reshape(3, 3) @ self.omega


def normalized(quat: np.ndarray) -> np.ndarray:
    q = np.asarray(quat, dtype=np.float64)
    n = float(np.linalg.norm(q))
    if q.shape != (4,) or not np.isfinite(n) or n < 1e-9:
        raise ValueError(f"quaternion must be 4 finite numbers (w, x, y, z) with nonzero norm, got {quat!r}")
    q = q / n
    return q if q[0] >= 0 else -q  # one hemisphere, so "same orientation" means "same numbers"
