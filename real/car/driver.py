"""The car's driver node: Twist commands in, a VESC driven, wheel odometry out, and a watchdog that brakes.

At ``rate_hz`` it sends the newest command to the VESC: the speed as an electrical RPM target (``erpm_per_m_s``) and
the steering angle atan(wheelbase · ω / v) as the servo output (kept while the car is all but stopped, where
steering changes nothing), both clipped to the config's safety limits. No command for ``command_timeout_s`` (the
policy died, the network dropped): it brakes with ``brake_current_a`` until commands return. Each tick it asks the
VESC for its telemetry and integrates the wheels' speed along the steering's kinematic bicycle into
``nav_msgs/Odometry`` (pose in ``odom``, which drifts as any wheel odometry does); a VESC that stops answering
or reports a fault is named in ``/diagnostics`` and braked. The IMU and the camera are their own nodes, as on any
robot. The sim-as-real twin speaking the same topics is `sim.ros.car_bridge`.

Run it as ``ros2 run reflexlab car_driver --ros-args -p robot_config:=car`` (``-p port:=synthetic`` for a simulated
VESC on a pseudo-terminal).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from real.car import vesc
from real.car.config import load_car_config
from reflexlab.ros.common import diagnostics_msg, node_main, run_node, state_qos

PARAMETERS: dict[str, object] = {
    "robot_config": "car",  # a car config YAML path, or a name in config/robots
    "port": "",  # overrides vesc.port ("synthetic": a simulated VESC on a pseudo-terminal)
    "diagnostics_period_s": 1.0,
}
STEER_MIN_SPEED = 0.05  # m/s: below this a yaw-rate command leaves the steering where it is


class CarDriverNode(Node):
    """Drives one car's VESC from Twist commands; see the module docstring."""

    def __init__(self, node_name: str = "car_driver", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        self.config = c = load_car_config(str(p["robot_config"]))
        port = str(p["port"]) or c.vesc.port
        self.synthetic = vesc.SyntheticVesc() if port == "synthetic" else None
        self.vesc = vesc.Vesc(self.synthetic.port if self.synthetic else port, timeout_s=0.5 / c.rate_hz)
        t = c.topics
        self._odom_pub = self.create_publisher(Odometry, t.odometry, state_qos(best_effort=False))
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(Twist, t.command, self._on_command, state_qos(best_effort=False))
        self._odom = Odometry()
        self._odom.header.frame_id, self._odom.child_frame_id = "odom", "base_link"
        self.speed = self.steer = 0.0  # the command being executed
        self.pose = np.zeros(3)  # x, y, yaw in odom
        self.last_command_t: float | None = None
        self.braking = True  # until the first command
        self.commands = self.rejected = self.brakes = self.telemetry_timeouts = 0
        self.fault = 0
        self.v_in = 0.0
        self._last_tick: float | None = None
        self.create_timer(1.0 / c.rate_hz, self._tick)
        self.create_timer(float(p["diagnostics_period_s"]), self._publish_diagnostics)
        self.get_logger().info(
            f"{c.robot}: VESC on {self.vesc.port}{' (synthetic)' if self.synthetic else ''}, commands on {t.command}, "
            f"odometry on {t.odometry} at {c.rate_hz:g} Hz, brakes after {c.safety.command_timeout_s:g} s of silence"
        )

    def _on_command(self, msg: Twist) -> None:
        speed, yaw_rate = float(msg.linear.x), float(msg.angular.z)
        if not (math.isfinite(speed) and math.isfinite(yaw_rate)):
            self.rejected += 1
            self.get_logger().warning(f"rejected a non-finite command ({speed}, {yaw_rate})", throttle_duration_sec=1)
            return
        s = self.config.safety
        self.speed = float(np.clip(speed, -s.max_speed, s.max_speed))
        if abs(self.speed) >= STEER_MIN_SPEED:
            angle = math.atan(self.config.wheelbase * yaw_rate / self.speed)
            self.steer = float(np.clip(angle, -s.max_steer, s.max_steer))
        self.commands += 1
        self.last_command_t = time.monotonic()

    def _tick(self) -> None:
        now = time.monotonic()
        c = self.config
        silent = self.last_command_t is None or now - self.last_command_t > c.safety.command_timeout_s
        if silent and not self.braking:
            self.brakes += 1
            self.get_logger().warning(f"no command for {c.safety.command_timeout_s:g} s: braking")
        self.braking = silent or self.fault != 0
        servo = float(np.clip(c.vesc.servo_centre + c.vesc.servo_per_rad * self.steer, 0.0, 1.0))
        self.vesc.send(vesc.set_servo(servo))
        if self.braking:
            self.vesc.send(vesc.brake(c.vesc.brake_current_a))
        else:
            self.vesc.send(vesc.set_rpm(round(self.speed * c.vesc.erpm_per_m_s)))
        try:
            values = self.vesc.values()
        except TimeoutError as e:
            self.telemetry_timeouts += 1
            self.get_logger().error(str(e), throttle_duration_sec=1.0)
            return
        self.fault, self.v_in = values.fault, values.v_in
        speed = values.rpm / c.vesc.erpm_per_m_s
        dt = 0.0 if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        yaw_rate = speed * math.tan(self.steer) / c.wheelbase
        x, y, yaw = self.pose
        self.pose = np.array([x + speed * math.cos(yaw) * dt, y + speed * math.sin(yaw) * dt, yaw + yaw_rate * dt])
        self._publish_odometry(speed, yaw_rate)

    def _publish_odometry(self, speed: float, yaw_rate: float) -> None:
        m = self._odom
        m.header.stamp = self.get_clock().now().to_msg()
        m.pose.pose.position.x, m.pose.pose.position.y = float(self.pose[0]), float(self.pose[1])
        q = m.pose.pose.orientation
        q.w, q.z = math.cos(self.pose[2] / 2), math.sin(self.pose[2] / 2)
        m.twist.twist.linear.x, m.twist.twist.angular.z = speed, yaw_rate
        self._odom_pub.publish(m)

    def diagnostics(self) -> dict[str, float | int | str]:
        return {
            "commands": self.commands,
            "rejected_commands": self.rejected,
            "brakes": self.brakes,
            "braking": int(self.braking),
            "telemetry_timeouts": self.telemetry_timeouts,
            "vesc_fault": self.fault,
            "battery_v": self.v_in,
            "speed_command_m_s": self.speed,
            "steer_command_rad": self.steer,
        }

    def _publish_diagnostics(self) -> None:
        d = self.diagnostics()
        if self.fault:
            level, message = DiagnosticStatus.ERROR, f"VESC fault {self.fault}: braking"
        elif self.telemetry_timeouts and self._last_tick is None:
            level, message = DiagnosticStatus.ERROR, f"no telemetry from the VESC on {self.vesc.port}"
        elif self.braking:
            level, message = DiagnosticStatus.WARN, "braking: no commands"
        else:
            level, message = DiagnosticStatus.OK, "driving"
        self._diag_pub.publish(diagnostics_msg(self, "car", self.config.robot, level, message, d))

    def destroy_node(self) -> None:
        self.vesc.send(vesc.brake(self.config.vesc.brake_current_a))  # stopping the driver stops the car
        self.vesc.close()
        if self.synthetic is not None:
            self.synthetic.close()
        super().destroy_node()


def run(robot_config: str = "car", port: str = "", seconds: float | None = None) -> dict:
    """Drive until Ctrl-C (or ``seconds``); returns the final diagnostics."""
    return run_node(CarDriverNode, {"robot_config": robot_config, "port": port}, seconds)


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab car_driver --ros-args -p robot_config:=car``"""
    node_main(CarDriverNode, argv, print_diagnostics=True)


if __name__ == "__main__":
    main()
