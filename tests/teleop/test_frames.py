"""Device twist → base-frame command: "push forward" must move the arm where the operator means."""

from __future__ import annotations

import numpy as np
import pytest

from teleop.config import FrameConfig
from teleop.frames import FrameMapper, rotation_from_quat_wxyz, rotation_from_rpy

FORWARD = np.array([0, 1, 0, 0, 0, 0.0])  # the stick/cap pushed away from the operator
RIGHT = np.array([1, 0, 0, 0, 0, 0.0])
YAW_CCW = np.array([0, 0, 0, 0, 0, 1.0])


@pytest.mark.parametrize(
    ("operator", "forward", "right"),
    [
        ("facing_robot", [-1, 0, 0], [0, 1, 0]),  # toward the robot = base -x; operator's right = robot's left
        ("behind_robot", [1, 0, 0], [0, -1, 0]),
        ("left_of_robot", [0, -1, 0], [-1, 0, 0]),
        ("right_of_robot", [0, 1, 0], [1, 0, 0]),
    ],
)
def test_push_forward_in_base_frame(operator, forward, right):
    m = FrameMapper(FrameConfig(operator=operator, max_linear_speed=0.2))
    np.testing.assert_allclose(m.twist(FORWARD), [*np.multiply(forward, 0.2), 0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(m.twist(RIGHT)[:3], np.multiply(right, 0.2), atol=1e-12)
    np.testing.assert_allclose(m.twist(YAW_CCW, None), [0, 0, 0, 0, 0, 0.5], atol=1e-12)  # z stays up


def test_tool_frame_uses_current_ee_orientation():
    """Operator behind the robot; gripper pointing down (rotated 180° about base x).

    Device forward → tool +x; the tool's x is base x after a rotation about x, so forward is still
    +x. Device up → tool +z, which now points down in base: the arm must move down.
    Then yaw the gripper 90° about base z: tool +x is base +y, so forward moves along base +y.
    """
    m = FrameMapper(FrameConfig(command_frame="tool", operator="behind_robot", max_linear_speed=0.1))
    down = np.array([0.0, 1.0, 0.0, 0.0])  # wxyz: 180° about x
    np.testing.assert_allclose(m.twist(FORWARD, down)[:3], [0.1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(m.twist(np.array([0, 0, 1, 0, 0, 0.0]), down)[:3], [0, 0, -0.1], atol=1e-12)
    yawed = np.array([np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)])  # 90° about z
    np.testing.assert_allclose(m.twist(FORWARD, yawed)[:3], [0, 0.1, 0], atol=1e-12)
    np.testing.assert_allclose(m.twist(YAW_CCW, down)[3:], [0, 0, -0.5], atol=1e-12)  # about the tool's z
    with pytest.raises(ValueError, match="ee_quat_wxyz"):
        m.twist(FORWARD)


def test_base_frame_ignores_ee_orientation():
    m = FrameMapper(FrameConfig(operator="behind_robot"))
    np.testing.assert_allclose(m.twist(FORWARD, np.array([0.0, 1.0, 0.0, 0.0])), m.twist(FORWARD))


def test_explicit_rotation_and_speed_norm_limit():
    m = FrameMapper(FrameConfig(operator=None, device_rotation_rpy_deg=(0, 0, -90), max_linear_speed=0.1))
    np.testing.assert_allclose(m.twist(FORWARD), FrameMapper(FrameConfig(operator="behind_robot")).twist(FORWARD))
    diagonal = m.twist(np.array([1, 1, 1, 0, 0, 0.0]))
    assert np.linalg.norm(diagonal[:3]) == pytest.approx(0.1)  # not 0.1·√3


def test_joint_delta_mode():
    cfg = FrameConfig(mode="joint_delta", joint_axes=("+x", "-y", "", "+yaw"), max_joint_speed=1.0)
    np.testing.assert_allclose(
        FrameMapper(cfg).joint_delta(np.array([0.5, 1, 1, 0, 0, -1]), dt=0.1), [0.05, -0.1, 0, -0.1]
    )


def test_rotations_agree():
    q = np.array([0.9, 0.1, -0.3, 0.2])
    r = rotation_from_quat_wxyz(q)
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-12)
    np.testing.assert_allclose(rotation_from_quat_wxyz([np.cos(0.3), 0, 0, np.sin(0.3)]), rotation_from_rpy(0, 0, 0.6))


def test_bad_frame_configs():
    with pytest.raises(ValueError, match="operator"):
        FrameMapper(FrameConfig(operator="above_robot"))
    with pytest.raises(ValueError, match="not both"):
        FrameConfig(device_rotation_rpy_deg=(0, 0, 0))
    with pytest.raises(ValueError, match=r"joint_axes\[1\]"):
        FrameConfig(mode="joint_delta", joint_axes=("+x", "+q"))
