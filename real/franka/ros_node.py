"""``franka_node``: the FR3 driver on ROS 2 — states out, low-rate targets in.

The 1 kHz torque loop stays inside the driver's own thread; ROS only carries what a policy needs
at its own rate: ``sensor_msgs/JointState`` and the EE ``geometry_msgs/PoseStamped`` at
``publish_rate_hz``, and targets as ``std_msgs/Float64MultiArray`` or
``trajectory_msgs/JointTrajectory`` (joint impedance) or ``PoseStamped`` (Cartesian impedance).
A target of the wrong kind for the configured mode is rejected and counted, never guessed at.

``ros2 run reflexlab franka_node --ros-args -p host:=172.16.0.2 -p mode:=cartesian_impedance``
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from real.franka.config import DEFAULT_PATH, FrankaConfig, FrankaConfigError
from real.franka.constants import DQ_MAX, JOINT_NAMES, Q_MAX, Q_MIN
from real.franka.driver import FrankaDriver, FrankaError
from reflexlab.robot import RobotConfig
from reflexlab.ros.common import node_main, read_command, state_qos
from reflexlab.ros.topics import ArmTopics

PARAMETERS: dict[str, object] = {
    "config_path": str(DEFAULT_PATH),
    "host": "",  # "" = the config's
    "mode": "",  # "" = the config's
    "publish_rate_hz": 100.0,
    "frame_id": "fr3_link0",
    "best_effort": True,
    # The arm topics every reflexlab env speaks (`real.ros_arm.ArmTopics`; the MuJoCo arm bridge too).
    "joint_states_topic": ArmTopics().joint_states,
    "ee_pose_topic": ArmTopics().ee_pose,
    "joint_command_topic": "/franka/joint_command",
    "joint_trajectory_topic": "/franka/joint_trajectory",
    "ee_command_topic": ArmTopics().ee_target,
}

# What read_command needs to check and order joint targets (names, count); the limits are the datasheet's.
FR3 = RobotConfig(
    robot="franka-fr3",
    joint_names=JOINT_NAMES,
    joint_lower=tuple(Q_MIN.tolist()),
    joint_upper=tuple(Q_MAX.tolist()),
    joint_max_velocity=tuple(DQ_MAX.tolist()),
    max_target_rate=float(DQ_MAX.max()),
)


class FrankaNode(Node):
    """Wraps a `FrankaDriver`: pass a started one (tests, an embedding app), or let the node connect."""

    def __init__(self, driver: FrankaDriver | None = None, node_name: str = "franka", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        self._owns_driver = driver is None
        self.driver = driver  # None until connected: rclpy may destroy a node whose __init__ raised
        if driver is None:
            overrides = {k: p[k] for k in ("host", "mode") if p[k]}
            self.driver = FrankaDriver(FrankaConfig.load(p["config_path"], **overrides)).start()
        qos = state_qos(bool(p["best_effort"]))
        self._joint_msg = JointState(name=list(JOINT_NAMES))
        self._pose_msg = PoseStamped()
        self._pose_msg.header.frame_id = self._joint_msg.header.frame_id = str(p["frame_id"])
        self._joint_pub = self.create_publisher(JointState, p["joint_states_topic"], qos)
        self._pose_pub = self.create_publisher(PoseStamped, p["ee_pose_topic"], qos)
        self.create_subscription(Float64MultiArray, p["joint_command_topic"], self._on_joint_command, qos)
        self.create_subscription(JointTrajectory, p["joint_trajectory_topic"], self._on_joint_command, qos)
        self.create_subscription(PoseStamped, p["ee_command_topic"], self._on_ee_command, qos)
        self.create_timer(1.0 / float(p["publish_rate_hz"]), self._publish)
        self.counts = {"published": 0, "targets": 0, "rejected": 0}

    def _publish(self) -> None:
        s = self.driver.state()
        stamp = self.get_clock().now().to_msg()
        j = self._joint_msg
        j.header.stamp = stamp
        j.position, j.velocity, j.effort = s.q.tolist(), s.dq.tolist(), s.tau_J.tolist()
        pose = self._pose_msg
        pose.header.stamp = stamp
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = s.position.tolist()
        o = pose.pose.orientation
        o.w, o.x, o.y, o.z = s.quaternion_wxyz.tolist()
        self._joint_pub.publish(j)
        self._pose_pub.publish(pose)
        self.counts["published"] += 1

    def _on_joint_command(self, msg: Float64MultiArray | JointTrajectory) -> None:
        try:
            self.driver.set_joint_target(read_command(FR3, msg))
        except ValueError as e:
            return self._reject(e)
        self.counts["targets"] += 1

    def _on_ee_command(self, msg: PoseStamped) -> None:
        p, o = msg.pose.position, msg.pose.orientation
        try:
            self.driver.set_ee_target(np.array([p.x, p.y, p.z]), np.array([o.w, o.x, o.y, o.z]))
        except ValueError as e:
            return self._reject(e)
        self.counts["targets"] += 1

    def _reject(self, e: ValueError) -> None:
        self.counts["rejected"] += 1
        self.get_logger().warning(f"target rejected: {e}", throttle_duration_sec=1.0)

    def diagnostics(self) -> dict:
        return {**self.driver.stats(), **{f"ros_{k}": v for k, v in self.counts.items()}}

    def destroy_node(self) -> None:
        if self._owns_driver and self.driver is not None:
            self.driver.stop()
        super().destroy_node()


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab franka_node --ros-args -p host:=… -p mode:=…``"""
    # unreachable robot, bad config: say so, no traceback
    node_main(FrankaNode, argv, name="franka_node", errors=(FrankaError, FrankaConfigError))


if __name__ == "__main__":
    main()
