"""The target smoother: a stepping 20 Hz stream becomes a speed-limited, C¹ 1 kHz reference."""

from __future__ import annotations

import numpy as np

from real.franka.interpolation import SmoothOrientation, SmoothReference

DT = 0.001


def test_steps_become_a_continuous_speed_limited_reference() -> None:
    ref = SmoothReference(np.zeros(2), time_constant_s=0.05, max_speed=np.array([1.0, 0.2]))
    xs, vs = [], []
    for k in range(2000):
        goal = np.array([0.5, 0.5]) * (k // 50 % 2)  # a square wave stepping every 50 ms
        xs.append(ref.step(goal, DT).copy())
        vs.append(ref.v.copy())
    xs, vs = np.array(xs), np.array(vs)
    assert np.all(np.abs(np.diff(xs, axis=0)) <= np.array([1.0, 0.2]) * DT + 1e-12), "speed limit"
    assert np.abs(np.diff(vs, axis=0)).max() < 0.5, "velocity continuous (no step to follow a target step)"


def test_stopping_point_stops_without_turning_back() -> None:
    ref = SmoothReference(np.zeros(1), time_constant_s=0.05, max_speed=10.0)
    for _ in range(100):
        ref.step(np.array([1.0]), DT)
    goal, x = ref.stopping_point(), [ref.x[0]]
    for _ in range(500):
        x.append(ref.step(goal, DT)[0])
    assert np.all(np.diff(x) >= -1e-12) and abs(x[-1] - goal[0]) < 1e-3


def test_orientation_reaches_goal() -> None:
    ref = SmoothOrientation(np.array([1.0, 0, 0, 0]), time_constant_s=0.05, max_angular_speed=1.0)
    goal = np.array([np.cos(0.4), np.sin(0.4), 0, 0])  # 0.8 rad about x
    for _ in range(3000):
        q = ref.step(goal, DT)
    np.testing.assert_allclose(q, goal, atol=1e-4)
