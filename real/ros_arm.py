"""An arm behind ROS 2 topics, as the real-robot `Env` sees it: the newest state, and a target to send.

The 1 kHz control loop of an arm lives in its driver (`franka_node`, or the MuJoCo arm bridge for
sim-as-real); the env runs at the policy's 10–100 Hz and only needs the *newest* joint state,
end-effector pose and tracked object poses, each with its age, and a way to send an end-effector
target. Both the Franka driver node and the sim bridge speak `ArmTopics`, so an env written against
this class runs unchanged on the robot and in simulation.

rclpy runs in its own context and executor thread here, so the env's loop never blocks on DDS and
the class can live beside other rclpy users in one process.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from reflexlab.ros.topics import ArmTopics


class StaleStateError(RuntimeError):
    """A state stream the env needs is older than allowed; the message names the topic and its age."""


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


class RosArm:
    """Subscribes to an arm's state topics and publishes its end-effector targets.

    Args:
        topics: the names the driver speaks.
        node_name: this client's node name.
        domain_id: DDS domain (default: ``ROS_DOMAIN_ID``), e.g. to keep two simulated arms apart.
    """

    def __init__(
        self, topics: ArmTopics | None = None, node_name: str = "reflexlab_env", domain_id: int | None = None
    ) -> None:
        import rclpy
        from geometry_msgs.msg import PoseStamped
        from rclpy.context import Context
        from rclpy.experimental import EventsExecutor
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Int64

        from reflexlab.ros.common import state_qos

        self.topics = t = topics or ArmTopics()
        self._lock = threading.Lock()
        self._latest: dict[str, object] = {}
        self._received: dict[str, float] = {}
        self._reset_done: int | None = None
        self._context = Context()
        rclpy.init(context=self._context, domain_id=domain_id)
        self._node = rclpy.create_node(node_name, context=self._context)
        # Best-effort subscriptions match reliable and best-effort publishers alike (franka_node publishes
        # best-effort, as a 1 kHz robot should); targets go out reliable, which best-effort subscribers accept.
        qos = state_qos(best_effort=True)
        self._node.create_subscription(JointState, t.joint_states, self._store(t.joint_states), qos)
        self._node.create_subscription(PoseStamped, t.ee_pose, self._store(t.ee_pose), qos)
        for topic in t.objects.values():
            self._node.create_subscription(PoseStamped, topic, self._store(topic), qos)
        self._node.create_subscription(Int64, t.sim_reset_done, self._on_reset_done, 10)
        self._target_pub = self._node.create_publisher(PoseStamped, t.ee_target, state_qos(best_effort=False))
        self._reset_pub = self._node.create_publisher(Int64, t.sim_reset, 10)
        self._target = PoseStamped()
        self._target.header.frame_id = "base"
        self._executor = EventsExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, name="ros-arm", daemon=True)
        self._thread.start()
        self._closed = False
        # An exception that unwinds past the owner must still stop the executor thread before the
        # interpreter exits, or rclpy's C++ side aborts the process ("terminate called …").
        atexit.register(self.close)

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            while not self._stop.is_set() and self._context.ok():
                self._executor.spin_once(timeout_sec=0.02)
        except ExternalShutdownException:
            pass

    def _store(self, topic: str) -> Callable[[object], None]:
        def callback(msg: object) -> None:
            with self._lock:
                self._latest[topic] = msg
                self._received[topic] = time.monotonic()

        return callback

    def _on_reset_done(self, msg: object) -> None:
        with self._lock:
            self._reset_done = int(msg.data)  # type: ignore[attr-defined]

    # --- state --------------------------------------------------------------------------------
    def wait_for_state(self, timeout_s: float = 10.0) -> ArmState:
        """Block until every stream has delivered once; the error names the silent topics."""
        deadline = time.monotonic() + timeout_s
        needed = [self.topics.joint_states, self.topics.ee_pose, *self.topics.objects.values()]
        while time.monotonic() < deadline:
            with self._lock:
                missing = [topic for topic in needed if topic not in self._latest]
            if not missing:
                return self.state()
            time.sleep(0.01)
        raise TimeoutError(
            f"no message on {', '.join(missing)} within {timeout_s:g} s: is the arm driver (franka_node, or "
            "`reflexlab sim-bridge --task panda-push-t` for sim-as-real) running in this ROS domain?"
        )

    def state(self, max_age_s: float | None = None) -> ArmState:
        """The newest sample of every stream; `StaleStateError` if one is older than ``max_age_s``."""
        with self._lock:
            latest, received = dict(self._latest), dict(self._received)
        t = self.topics
        missing = [topic for topic in (t.joint_states, t.ee_pose, *t.objects.values()) if topic not in latest]
        if missing:
            raise StaleStateError(f"never received {', '.join(missing)}")
        if max_age_s is not None:
            now = time.monotonic()
            for topic, at in received.items():
                if now - at > max_age_s:
                    raise StaleStateError(
                        f"{topic} is {(now - at) * 1e3:.0f} ms old (allowed {max_age_s * 1e3:.0f} ms): driver or "
                        "tracker stopped publishing"
                    )
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

    def request_sim_reset(self, seed: int, timeout_s: float = 10.0) -> None:
        """Ask the simulator to reset its scene (the sim's stand-in for a person) and wait until it has."""
        from std_msgs.msg import Int64

        with self._lock:
            self._reset_done = None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._reset_pub.publish(Int64(data=int(seed)))
            for _ in range(10):
                time.sleep(0.01)
                with self._lock:
                    if self._reset_done == seed:
                        self._received.clear()  # states from before the reset are not this episode's
                        self._latest.clear()
                        return
        raise TimeoutError(f"the simulator did not confirm the reset to seed {seed} on {self.topics.sim_reset_done}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._stop.set()
        self._thread.join(timeout=2.0)
        self._executor.shutdown()
        self._node.destroy_node()
        self._context.try_shutdown()

    def __enter__(self) -> RosArm:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _position(msg: object) -> np.ndarray:
    p = msg.pose.position  # type: ignore[attr-defined]
    return np.array([p.x, p.y, p.z])


def _quaternion(msg: object) -> np.ndarray:
    q = msg.pose.orientation  # type: ignore[attr-defined]
    return np.array([q.w, q.x, q.y, q.z])
