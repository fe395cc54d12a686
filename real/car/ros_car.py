"""The car behind ROS 2 topics, as its env sees it: the newest odometry and IMU sample, and commands to send.

The car's driver node (or the car bridge for sim-as-real, `sim.ros.car_bridge`) speaks
`reflexlab.ros.topics.CarTopics`; the camera is read apart, as recording reads cameras
(`real.ros_camera.RosImageCamera` on the same image topic).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from real.ros_arm import yaw_of
from real.ros_client import RosClient
from reflexlab.ros.topics import CarTopics
from reflexlab.tasks.car_race.spec import twist_of


@dataclass(frozen=True)
class CarState:
    """The newest odometry and IMU sample, with receipt times on this process's monotonic clock."""

    position: np.ndarray  # (2,) x, y in the odometry frame (m)
    yaw: float  # rad, odometry frame
    speed: float  # m/s forward, from the wheels
    yaw_rate: float  # rad/s, IMU
    acceleration: np.ndarray  # (2,) forward, left specific force (m/s²), IMU
    received: dict[str, float]

    @property
    def pose(self) -> np.ndarray:
        return np.array([*self.position, self.yaw])


class RosCar(RosClient):
    """Subscribes to the car's odometry and IMU and publishes its Twist commands.

    Args:
        topics: the names the driver speaks.
        node_name: this client's node name.
        domain_id: DDS domain (default: ``ROS_DOMAIN_ID``).
    """

    def __init__(
        self, topics: CarTopics | None = None, node_name: str = "reflexlab_car_env", domain_id: int | None = None
    ) -> None:
        from geometry_msgs.msg import Twist
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import Imu

        from reflexlab.ros.common import state_qos

        self.topics = t = topics or CarTopics()
        driver = "the car's driver (or `reflexlab sim-bridge --task car-race` for sim-as-real)"
        super().__init__(node_name, driver, domain_id, t.sim_reset, t.sim_reset_done)
        qos = state_qos(best_effort=True)
        self._node.create_subscription(Odometry, t.odometry, self._store(t.odometry), qos)
        self._node.create_subscription(Imu, t.imu, self._store(t.imu), qos)
        self._command_pub = self._node.create_publisher(Twist, t.command, state_qos(best_effort=False))
        self._command = Twist()
        self._start("ros-car")

    def wait_for_state(self, timeout_s: float = 10.0) -> CarState:
        """Block until odometry and IMU have delivered once; the error names the silent topics."""
        self._wait_for([self.topics.odometry, self.topics.imu], timeout_s)
        return self.state()

    def state(self, max_age_s: float | None = None) -> CarState:
        """The newest odometry and IMU sample; `StaleStateError` if one is older than ``max_age_s``."""
        latest, received = self._newest([self.topics.odometry, self.topics.imu], max_age_s)
        odom, imu = latest[self.topics.odometry], latest[self.topics.imu]
        p, q = odom.pose.pose.position, odom.pose.pose.orientation  # type: ignore[attr-defined]
        a = imu.linear_acceleration  # type: ignore[attr-defined]
        return CarState(
            position=np.array([p.x, p.y]),
            yaw=yaw_of(np.array([q.w, q.x, q.y, q.z])),
            speed=float(odom.twist.twist.linear.x),  # type: ignore[attr-defined]
            yaw_rate=float(imu.angular_velocity.z),  # type: ignore[attr-defined]
            acceleration=np.array([a.x, a.y]),
            received=received,
        )

    def send(self, throttle: float, steering: float) -> None:
        """Command the car in the task's units (both in [−1, 1]) as a Twist (`car_race.spec.twist_of`)."""
        if not (np.isfinite(throttle) and np.isfinite(steering)):
            raise ValueError(f"non-finite command: throttle {throttle}, steering {steering}")
        msg = self._command
        msg.linear.x, msg.angular.z = twist_of(throttle, steering)
        self._command_pub.publish(msg)

    def __enter__(self) -> RosCar:
        return self
