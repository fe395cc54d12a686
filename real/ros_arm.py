"""An arm behind ROS 2 topics, as the real-robot `Env` sees it: the newest state, and a target to send.

The 1 kHz control loop of an arm lives in its driver (`franka_node`, or the MuJoCo arm bridge for
sim-as-real); the env runs at the policy's 10–100 Hz and only needs the *newest* joint state,
end-effector pose and tracked object poses, each with its age, and a way to send an end-effector
target. Both the Franka driver node and the sim bridge speak `ArmTopics`, so an env written against
this class runs unchanged on the robot and in simulation.

rclpy runs in its own context and executor thread (`real.ros_client.RosClient`), so the env's loop never
blocks on DDS and the class can live beside other rclpy users in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from real.ros_client import RosClient, StaleStateError  # noqa: F401  (StaleStateError: the env catches it from here)
from reflexlab.ros.topics import ArmTopics


@dataclass(frozen=True)
class ArmState:
    """The newest sample of every stream, with receipt times on this process's monotonic clock."""

    joint_pos: np.ndarray
    joint_vel: np.ndarray
    ee_pos: np.ndarray  # (3,) m
    ee_quat: np.ndarray  # (4,) w, x, y, z
    objects: dict[str, np.ndarray]  # name -> (7,) x, y, z, qw, qx, qy, qz
    received: dict[str, float]  # topic -> monotonic receipt time


def yaw_of(quat_wxyz: np.ndarray) -> float:
    """Rotation about z of a pose (a planar object's heading)."""
    w, x, y, z = quat_wxyz
    return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))


class RosArm(RosClient):
    """Subscribes to an arm's state topics and publishes its end-effector targets.

    Args:
        topics: the names the driver speaks.
        node_name: this client's node name.
        domain_id: DDS domain (default: ``ROS_DOMAIN_ID``), e.g. to keep two simulated arms apart.
    """

    def __init__(
        self, topics: ArmTopics | None = None, node_name: str = "reflexlab_env", domain_id: int | None = None
    ) -> None:
        from geometry_msgs.msg import PoseStamped
        from sensor_msgs.msg import JointState

        from reflexlab.ros.common import state_qos

        self.topics = t = topics or ArmTopics()
        driver = "the arm driver (franka_node, or `reflexlab sim-bridge --task panda-push-t` for sim-as-real)"
        super().__init__(node_name, driver, domain_id, t.sim_reset, t.sim_reset_done)
        # Best-effort subscriptions match reliable and best-effort publishers alike (franka_node publishes
        # best-effort, as a 1 kHz robot should); targets go out reliable, which best-effort subscribers accept.
        qos = state_qos(best_effort=True)
        self._node.create_subscription(JointState, t.joint_states, self._store(t.joint_states), qos)
        self._node.create_subscription(PoseStamped, t.ee_pose, self._store(t.ee_pose), qos)
        for topic in t.objects.values():
            self._node.create_subscription(PoseStamped, topic, self._store(topic), qos)
        self._target_pub = self._node.create_publisher(PoseStamped, t.ee_target, state_qos(best_effort=False))
        self._target = PoseStamped()
        self._target.header.frame_id = "base"
        self._start("ros-arm")

    @property
    def _needed(self) -> list[str]:
        return [self.topics.joint_states, self.topics.ee_pose, *self.topics.objects.values()]

    # --- state --------------------------------------------------------------------------------
    def wait_for_state(self, timeout_s: float = 10.0) -> ArmState:
        """Block until every stream has delivered once; the error names the silent topics."""
        self._wait_for(self._needed, timeout_s)
        return self.state()

    def state(self, max_age_s: float | None = None) -> ArmState:
        """The newest sample of every stream; `StaleStateError` if one is older than ``max_age_s``."""
        latest, received = self._newest(self._needed, max_age_s)
        t = self.topics
        js, ee = latest[t.joint_states], latest[t.ee_pose]
        return ArmState(
            joint_pos=np.asarray(js.position, dtype=np.float64),  # type: ignore[attr-defined]
            joint_vel=np.asarray(js.velocity, dtype=np.float64),  # type: ignore[attr-defined]
            ee_pos=_position(ee),
            ee_quat=_quaternion(ee),
            objects={
                name: np.concatenate([_position(latest[topic]), _quaternion(latest[topic])])
                for name, topic in t.objects.items()
            },
            received=received,
        )

    # --- commands -----------------------------------------------------------------------------
    def send_ee_target(self, position: np.ndarray, quat_wxyz: np.ndarray) -> None:
        """Publish an end-effector target (base frame); the driver interpolates and enforces its limits."""
        position = np.asarray(position, dtype=np.float64)
        quat_wxyz = np.asarray(quat_wxyz, dtype=np.float64)
        if not (np.isfinite(position).all() and np.isfinite(quat_wxyz).all()):
            raise ValueError(f"non-finite end-effector target {position.tolist()} {quat_wxyz.tolist()}")
        msg = self._target
        msg.header.stamp = self._node.get_clock().now().to_msg()
        p, q = msg.pose.position, msg.pose.orientation
        p.x, p.y, p.z = position.tolist()
        q.w, q.x, q.y, q.z = quat_wxyz.tolist()
        self._target_pub.publish(msg)

    def __enter__(self) -> RosArm:
        return self


def _position(msg: object) -> np.ndarray:
    p = msg.pose.position  # type: ignore[attr-defined]
    return np.array([p.x, p.y, p.z])


def _quaternion(msg: object) -> np.ndarray:
    q = msg.pose.orientation  # type: ignore[attr-defined]
    return np.array([q.w, q.x, q.y, q.z])
