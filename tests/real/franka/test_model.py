"""fr3.xml: loads in MuJoCo 4 (franka-sim loads it in 3.2), and its kinematics are Franka's modified DH."""

from __future__ import annotations

import mujoco
import numpy as np

from real.franka.constants import JOINT_NAMES, Q_MAX, Q_MIN
from real.franka.sim_server import FR3_MJCF

# (a, d, alpha) of joints 1–7 and the flange, Franka's published modified DH parameters.
DH = [(0, 0.333, 0), (0, 0, -np.pi / 2), (0, 0.316, np.pi / 2), (0.0825, 0, np.pi / 2),
      (-0.0825, 0.384, -np.pi / 2), (0, 0, np.pi / 2), (0.088, 0, np.pi / 2), (0, 0.107, 0)]  # fmt: skip


def flange_dh(q: np.ndarray) -> np.ndarray:
    t = np.eye(4)
    for (a, d, alpha), theta in zip(DH, [*q, 0.0], strict=True):
        ca, sa, ct, st = np.cos(alpha), np.sin(alpha), np.cos(theta), np.sin(theta)
        t = t @ np.array(
            [[ct, -st, 0, a], [st * ca, ct * ca, -sa, -d * sa], [st * sa, ct * sa, ca, d * ca], [0, 0, 0, 1]]
        )
    return t


def test_fr3_model_matches_published_kinematics_and_limits() -> None:
    m = mujoco.MjModel.from_xml_path(str(FR3_MJCF))
    d = mujoco.MjData(m)
    assert [m.joint(i).name for i in range(m.njnt)] == list(JOINT_NAMES)
    np.testing.assert_allclose(m.jnt_range[:, 0], Q_MIN)
    np.testing.assert_allclose(m.jnt_range[:, 1], Q_MAX)
    rng = np.random.default_rng(0)
    for _ in range(20):
        d.qpos[:] = rng.uniform(Q_MIN, Q_MAX)
        mujoco.mj_kinematics(m, d)
        expected = flange_dh(d.qpos)
        np.testing.assert_allclose(d.body("fr3_link8").xpos, expected[:3, 3], atol=1e-6)
        np.testing.assert_allclose(d.body("fr3_link8").xmat.reshape(3, 3), expected[:3, :3], atol=1e-6)
