"""franka_node on franka-sim: JointState/PoseStamped out, Float64MultiArray and JointTrajectory targets in."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from real.franka.constants import JOINT_NAMES
from real.franka.ros_node import FrankaNode
from reflexlab.ros.common import state_qos, wait_until
from tests.real.franka.conftest import only_recovered_stall_reflexes


def _every(period_s: float) -> Callable[[], bool]:
    """True at most once per ``period_s``."""
    last = [-np.inf]

    def due() -> bool:
        if time.monotonic() - last[0] < period_s:
            return False
        last[0] = time.monotonic()
        return True

    return due


def test_node_publishes_state_and_follows_targets(make_driver, ros) -> None:
    node = FrankaNode(make_driver("joint_impedance"))
    peer = Node("franka_test_peer")
    states: list[JointState] = []
    peer.create_subscription(JointState, "/joint_states", states.append, state_qos(True))
    command = peer.create_publisher(Float64MultiArray, "/franka/joint_command", state_qos(True))
    trajectory = peer.create_publisher(JointTrajectory, "/franka/joint_trajectory", state_qos(True))
    try:
        matched = (command.get_subscription_count, trajectory.get_subscription_count)
        wait_until([node, peer], lambda: bool(states) and all(n() > 0 for n in matched), "discovery", 10)
        assert list(states[-1].name) == list(JOINT_NAMES)
        q0 = np.array(states[-1].position)
        goal = q0 + np.array([0.1, 0, 0, 0, 0, 0, 0])
        paced = _every(0.05)  # a 20 Hz policy (the condition is polled after every executor event)

        def reached() -> bool:
            if paced():
                command.publish(Float64MultiArray(data=goal.tolist()))
            return abs(states[-1].position[0] - goal[0]) < 0.01

        wait_until([node, peer], reached, "joint 1 to reach a Float64MultiArray target", 10)
        # a JointTrajectory in another joint order is reordered by name; a wrong-size array is rejected
        back = JointTrajectory(
            joint_names=list(reversed(JOINT_NAMES)), points=[JointTrajectoryPoint(positions=q0[::-1].tolist())]
        )

        def returned() -> bool:
            if paced():
                trajectory.publish(back)
            return abs(states[-1].position[0] - q0[0]) < 0.01

        wait_until([node, peer], returned, f"joint 1 to return on a JointTrajectory ({node.counts})", 10)
        command.publish(Float64MultiArray(data=[0.0, 1.0]))
        wait_until([node, peer], lambda: node.counts["rejected"] >= 1, "the rejection", 5)
        d = node.diagnostics()
        assert d["ros_targets"] >= 2 and d["ros_published"] > 0, d
        assert only_recovered_stall_reflexes(d), d
    finally:
        peer.destroy_node()
        node.destroy_node()
