"""The env's arm client (`real.ros_arm.RosArm`) drives franka-sim through `franka_node`: one set of topics
for the real arm and the MuJoCo arm bridge, QoS that matches, targets that move the arm in the base frame."""

from __future__ import annotations

import threading
import time

import numpy as np

from real.franka.ros_node import FrankaNode
from real.ros_arm import RosArm
from reflexlab.ros.common import spin
from reflexlab.ros.topics import ArmTopics
from tests.real.franka.conftest import only_recovered_stall_reflexes


def test_ros_arm_moves_franka_sim_through_franka_node(make_driver, ros) -> None:
    node = FrankaNode(make_driver("cartesian_impedance"))
    stop = threading.Event()
    spinner = threading.Thread(target=spin, args=([node],), kwargs={"stop": stop})
    spinner.start()
    try:
        with RosArm(ArmTopics(objects={})) as arm:
            start = arm.wait_for_state(timeout_s=15.0)
            assert start.joint_pos.shape == (7,)
            goal = start.ee_pos + np.array([0.04, -0.03, 0.0])  # 4 cm forward, 3 cm right, in the base frame
            deadline = time.monotonic() + 15.0
            while time.monotonic() < deadline:
                arm.send_ee_target(goal, start.ee_quat)  # a 20 Hz policy
                time.sleep(0.05)
                if np.linalg.norm(arm.state().ee_pos - goal) < 0.01:
                    break
            state = arm.state(max_age_s=0.1)  # franka_node publishes at 100 Hz: never stale
            assert np.linalg.norm(state.ee_pos - goal) < 0.01, (state.ee_pos, goal)
    finally:
        stop.set()
        spinner.join()
        d = node.diagnostics()
        node.destroy_node()
    assert only_recovered_stall_reflexes(d) and d["ros_targets"] > 0, d
