"""The MuJoCo car bridge: the simulated `car-race` car behind the same topics as the car's driver node.

Sim-as-real for the car: the car env (`real.car`), `reflexlab rl fastrlap` and anything else that drives the car
talk to this node as they would to the car's driver on the robot (`reflexlab.ros.topics.CarTopics`): Twist
commands in; wheel odometry (``nav_msgs/Odometry``) at ``odometry_rate_hz``, the IMU at ``imu_rate_hz`` and the
first-person camera (rgb8) at ``camera_rate_hz`` out. Physics runs at 500 Hz locked to the wall clock, so a late
policy is late on the course too. Like the driver, a watchdog brakes the car when commands stop for
``command_timeout_s``. ``/sim/reset`` (a seed) stands in for the person who carries the car back between runs.
Odometry's pose is the simulator's truth (a real car integrates its wheels and IMU: it drifts).

Run it as ``reflexlab sim-bridge --task car-race`` or ``ros2 run reflexlab car_bridge``.
"""

from __future__ import annotations

from typing import Any

from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Image, Imu

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from reflexlab.ros.common import node_main, run_node, state_qos
from reflexlab.ros.topics import CarTopics
from reflexlab.tasks.car_race.config import TEST_COURSE
from reflexlab.tasks.car_race.constants import CAMERA
from sim.ros.realtime_bridge import RealtimeBridge
from sim.tasks.car_race.realtime import RealtimeCarRace

PARAMETERS: dict[str, object] = {
    "seed": 0,
    "course": TEST_COURSE,  # the course to race; -1: each episode's from its seed (the prior courses)
    "odometry_rate_hz": 50.0,
    "imu_rate_hz": 100.0,
    "camera_rate_hz": 20.0,  # the first-person camera, rendered offscreen; 0 = off
    "camera_width": 64,
    "camera_height": 64,
    "command_timeout_s": 0.3,  # no command for this long: brake (the driver's watchdog)
    "diagnostics_period_s": 1.0,
}


class CarBridge(RealtimeBridge):
    """Steps `RealtimeCarRace` on the wall clock and speaks `CarTopics`."""

    kind, hardware_id, silence = "sim car", "reflexlab-car (sim)", "braking: no commands"

    def __init__(self, node_name: str = "car_bridge", topics: CarTopics | None = None, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        course = int(p["course"])
        self.sim = RealtimeCarRace(int(p["seed"]), None if course < 0 else course)
        self.topics = t = topics or CarTopics()
        self.odometry_every = max(1, round(1.0 / (self.sim.dt * float(p["odometry_rate_hz"]))))
        self.imu_every = max(1, round(1.0 / (self.sim.dt * float(p["imu_rate_hz"]))))
        qos = state_qos(best_effort=False)
        self._odom_pub = self.create_publisher(Odometry, t.odometry, qos)
        self._imu_pub = self.create_publisher(Imu, t.imu, qos)
        self.create_subscription(Twist, t.command, self._on_command, qos)
        self._odom = Odometry()
        self._odom.header.frame_id, self._odom.child_frame_id = "odom", "base_link"
        self._imu = Imu()
        self._imu.header.frame_id = "imu_link"
        self.commands = self.rejected = 0
        camera = None
        if float(p["camera_rate_hz"]) > 0:
            pub = self.create_publisher(Image, t.image, qos)
            size = (int(p["camera_height"]), int(p["camera_width"]))
            camera = (pub, float(p["camera_rate_hz"]), size, CAMERA, "camera_link")
        self._start_bridge(
            float(p["command_timeout_s"]), t.sim_reset, t.sim_reset_done, float(p["diagnostics_period_s"]), camera
        )
        self.get_logger().info(
            f"car-race course {self.sim.course.seed if self.sim.course else '?'}: physics {1 / self.sim.dt:g} Hz, "
            f"odometry on {t.odometry}, IMU on {t.imu}, camera on {t.image}, commands on {t.command}"
        )

    def _on_command(self, msg: Twist) -> None:
        try:
            self.sim.command(msg.linear.x, msg.angular.z)
        except ValueError as e:
            self.rejected += 1
            self.get_logger().warning(f"rejected command: {e}", throttle_duration_sec=1.0)
            return
        self.commands += 1
        self.watchdog.fed()

    def _on_silence(self) -> None:
        self.sim.brake()

    def _after_reset(self) -> None:
        self._publish_odometry()

    def _after_step(self, step: int) -> None:
        if step % self.odometry_every == 0:
            self._publish_odometry()
        if step % self.imu_every == 0:
            self._publish_imu()

    def _publish_odometry(self) -> None:
        s, m = self.sim.state(), self._odom
        m.header.stamp = self.get_clock().now().to_msg()
        p, q = m.pose.pose.position, m.pose.pose.orientation
        p.x, p.y, p.z = (float(v) for v in s.position)
        q.w, q.x, q.y, q.z = (float(v) for v in s.quat_wxyz)
        m.twist.twist.linear.x = s.wheel_speed  # the wheels' count: what a car's odometry knows of its speed
        m.twist.twist.angular.z = s.yaw_rate
        self._odom_pub.publish(m)

    def _publish_imu(self) -> None:
        s, m = self.sim.state(), self._imu
        m.header.stamp = self.get_clock().now().to_msg()
        q = m.orientation
        q.w, q.x, q.y, q.z = (float(v) for v in s.quat_wxyz)
        m.angular_velocity.z = s.yaw_rate
        a = m.linear_acceleration
        a.x, a.y, a.z = (float(v) for v in self.sim.acceleration())
        self._imu_pub.publish(m)

    def diagnostics(self) -> dict[str, float | int | str]:
        return {
            **super().diagnostics(),
            "commands": self.commands,
            "rejected_commands": self.rejected,
            "brakes": self.watchdog.trips,
            "wall_contact_steps": self.sim.collisions,
        }


def run(seed: int = 0, course: int = TEST_COURSE, command_timeout_s: float = 0.3, seconds: float | None = None) -> dict:
    """Run until Ctrl-C (or ``seconds``); returns the final diagnostics. `reflexlab sim-bridge` calls this."""
    parameters = {"seed": int(seed), "course": int(course), "command_timeout_s": float(command_timeout_s)}
    return run_node(CarBridge, parameters, seconds)


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab car_bridge --ros-args -p course:=0``"""
    node_main(CarBridge, argv, print_diagnostics=True)


if __name__ == "__main__":
    main()
