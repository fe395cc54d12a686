"""The car bridge over rclpy and FastDDS: Twist commands drive the simulated car on the wall clock, odometry, IMU and
the first-person camera come back on the car's topics, the watchdog brakes a car whose commands stop, and
/sim/reset puts it back on the course."""

from __future__ import annotations

import math
import time

import numpy as np
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, Imu
from std_msgs.msg import Int64

from reflexlab.ros.common import rgb_pixels, spin, state_qos, wait_until
from reflexlab.ros.topics import CarTopics
from sim.ros.car_bridge import CarBridge

TOPICS = CarTopics()


class Driver(Node):
    """Sends a Twist at 20 Hz while ``driving``; keeps the car's odometry, IMU and frames."""

    def __init__(self) -> None:
        super().__init__("driver")
        qos = state_qos(best_effort=False)
        self.pub = self.create_publisher(Twist, TOPICS.command, qos)
        self.reset_pub = self.create_publisher(Int64, TOPICS.sim_reset, 10)
        self.odometry: list[Odometry] = []
        self.imu: list[Imu] = []
        self.frames: list[Image] = []
        self.resets: list[int] = []
        self.create_subscription(Odometry, TOPICS.odometry, self.odometry.append, qos)
        self.create_subscription(Imu, TOPICS.imu, self.imu.append, qos)
        self.create_subscription(Image, TOPICS.image, self.frames.append, qos)
        self.create_subscription(Int64, TOPICS.sim_reset_done, lambda m: self.resets.append(m.data), 10)
        self.speed, self.yaw_rate, self.driving = 0.0, 0.0, False
        self.create_timer(0.05, self._send)

    def _send(self) -> None:
        if self.driving:
            msg = Twist()
            msg.linear.x, msg.angular.z = self.speed, self.yaw_rate
            self.pub.publish(msg)


def run_for(nodes: list[Node], seconds: float) -> None:
    t0 = time.monotonic()
    spin(nodes, until=lambda: time.monotonic() - t0 >= seconds)


def position(msg: Odometry) -> np.ndarray:
    return np.array([msg.pose.pose.position.x, msg.pose.pose.position.y])


def test_the_car_bridge_drives_brakes_and_resets(ros) -> None:
    bridge = CarBridge(parameter_overrides=[Parameter("seed", value=4)])
    driver = Driver()
    nodes = [bridge, driver]
    try:
        wait_until(nodes, lambda: driver.odometry and driver.imu and driver.frames, "odometry, IMU and frames")
        start = position(driver.odometry[-1])
        frame = driver.frames[-1]
        assert (frame.height, frame.width, frame.encoding) == (64, 64, "rgb8")
        assert rgb_pixels(frame).std() > 5, "the camera sees a scene, not a blank"
        assert abs(driver.imu[-1].linear_acceleration.z - 9.81) < 0.2, "at rest the IMU reads gravity"
        driver.speed, driver.driving = 1.0, True  # straight ahead at 1 m/s for 1.5 s
        t0 = time.monotonic()
        run_for(nodes, 1.5)
        elapsed = time.monotonic() - t0
        moved = np.linalg.norm(position(driver.odometry[-1]) - start)
        assert 0.6 * elapsed < moved < 1.05 * elapsed, (moved, elapsed)  # it accelerates, then holds 1 m/s
        assert abs(driver.odometry[-1].twist.twist.linear.x - 1.0) < 0.1
        assert bridge.diagnostics()["real_time_factor"] > 0.8
        driver.driving = False  # commands stop: the watchdog brakes within its timeout
        run_for(nodes, 0.3 + 0.5)
        assert bridge.watchdog.tripped and bridge.watchdog.trips == 1
        assert abs(driver.odometry[-1].twist.twist.linear.x) < 0.05
        driver.reset_pub.publish(Int64(data=4))
        wait_until(nodes, lambda: driver.resets == [4], "the reset's echo")
        run_for(nodes, 0.1)
        np.testing.assert_allclose(position(driver.odometry[-1]), start, atol=0.01)  # seed 4's start again
        assert bridge.diagnostics()["rejected_commands"] == 0
        bad = Twist()
        bad.linear.x = math.nan
        driver.pub.publish(bad)
        wait_until(nodes, lambda: bridge.rejected == 1, "the NaN command's rejection")
    finally:
        for n in nodes:
            n.destroy_node()
