"""The floor `bench serve` measures the policy node against: a bare rclpy echo, run as its own process.

Same topics, QoS and executor as the node, but no validation, policy or safety: it answers each
joint state at once. A module of its own so that ``python -m reflexlab.cli.bench.echo ROBOT_YAML``
runs it without the serve bench's imports.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml


def echo(robot_file: str) -> None:
    """The baseline: answer every joint state with a JointTrajectory carrying its stamp, nothing else."""
    import rclpy
    from sensor_msgs.msg import Imu, JointState
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from reflexlab.ros.common import spin, state_qos

    cfg = yaml.safe_load(Path(robot_file).read_text())
    topics = cfg.get("topics", {})
    rclpy.init()
    node = rclpy.create_node("serve_echo")
    qos = state_qos(cfg.get("best_effort", True))
    pub = node.create_publisher(JointTrajectory, topics.get("joint_command", "/joint_commands"), qos)
    out = JointTrajectory(joint_names=list(cfg["joints"]["names"]), points=[JointTrajectoryPoint()])

    def answer(msg: JointState) -> None:
        out.header.stamp = msg.header.stamp
        out.points[0].positions = msg.position
        pub.publish(out)

    node.create_subscription(JointState, topics.get("joint_states", "/joint_states"), answer, qos)
    node.create_subscription(Imu, topics.get("imu", "/imu"), lambda msg: None, qos)
    spin([node])
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    import reflexlab.ros  # noqa: F401

    echo(sys.argv[1])
