"""The car policy node: a camera policy driving the car over ROS 2, one command per camera frame.

The car's driver (`real.car.driver`, or the car bridge for sim-as-real) speaks `CarTopics`; this node reads its
odometry and IMU and the cameras its policy reads (the car config's ``cameras``: topic and size), and publishes the
Twist the policy asks for at each frame of its first camera (the first of each period of the policy's own rate, when
the camera is faster), from the frame's receipt to the command's publication in one callback
(`deploy.car_controller`). A watchdog brakes the car when the frames, odometry or IMU go stale or
never come, naming which; ``/diagnostics`` reports the frame-to-command latency percentiles, each input's age,
brakes and rejected messages by reason.

``ros2 run reflexlab car_policy_node --ros-args -p model_path:=policy.onnx -p checkpoints:=checkpoints.json``;
``checkpoints`` is a JSON file ``{"checkpoints": [[x, y], …]}`` in the odometry frame (one recorded lap's).
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import Image, Imu

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from deploy.car_controller import CarController
from deploy.controller import StateRejected
from deploy.timing import LatencyWindow
from real.car.config import load_car_config
from real.ros_arm import yaw_of
from reflexlab.ros.common import diagnostics_msg, node_main, rgb_pixels, run_node, stamp_ns, state_qos

PARAMETERS: dict[str, object] = {
    "model_path": "",  # the exported car policy (.onnx)
    "robot_config": "car",  # a car config YAML path, or a name in config/robots
    "checkpoints": "",  # a JSON file {"checkpoints": [[x, y], ...]}
    "seed": 0,
    "watchdog_rate_hz": 20.0,  # how often stale inputs are looked for (and the brake sent while they are)
    "diagnostics_period_s": 1.0,
}


def load_checkpoints(path: str | Path) -> np.ndarray:
    """(K, 2) checkpoints from a JSON file ``{"checkpoints": [[x, y], …]}``; the error names the file."""
    p = Path(path)
    try:
        points = np.asarray(json.loads(p.read_text())["checkpoints"], np.float64)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f'checkpoints {p}: expected a JSON file {{"checkpoints": [[x, y], ...]}} ({e})') from None
    return points


class CarPolicyNode(Node):
    """Serves one car policy; see the module docstring."""

    def __init__(self, node_name: str = "car_policy", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        if not p["model_path"] or not p["checkpoints"]:
            raise ValueError("car policy node: set model_path (the .onnx policy) and checkpoints (a JSON file)")
        self.config = c = load_car_config(str(p["robot_config"]))
        self.ctl = CarController(Path(p["model_path"]), c, load_checkpoints(p["checkpoints"]), int(p["seed"]))
        cameras = self.ctl.actor.cameras
        if not cameras:
            raise ValueError(f"{Path(p['model_path']).name} reads no camera: this node steps a policy on its frames")
        self.trigger = cameras[0]  # a frame of this camera steps the policy, at most at the policy's rate
        self.period = 1.0 / self.ctl.actor.spec.control_rate_hz
        self._last_step = -float("inf")
        qos = state_qos(best_effort=True)
        self._pub = self.create_publisher(Twist, c.topics.command, state_qos(best_effort=False))
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(Odometry, c.topics.odometry, self._on_odometry, qos)
        self.create_subscription(Imu, c.topics.imu, self._on_imu, qos)
        for camera in cameras:
            self.create_subscription(Image, c.cameras[camera].topic, partial(self._on_image, camera), qos)
        self.create_timer(1.0 / float(p["watchdog_rate_hz"]), self._on_watchdog)
        self.create_timer(float(p["diagnostics_period_s"]), self._publish_diagnostics)
        self.latency = LatencyWindow(4096)
        self.commands = 0
        self._twist = Twist()
        self.get_logger().info(
            f"{Path(p['model_path']).name} on {c.robot}: a command per frame of {self.trigger} "
            f"({c.cameras[self.trigger].topic}, at most {1 / self.period:g} Hz), odometry {c.topics.odometry}, "
            f"IMU {c.topics.imu}, commands {c.topics.command}"
        )

    # --- inputs --------------------------------------------------------------------------------------------------
    def _on_odometry(self, msg: Odometry) -> None:
        p, q = msg.pose.pose.position, msg.pose.pose.orientation
        yaw = yaw_of(np.array([q.w, q.x, q.y, q.z]))
        self._take(
            self.ctl.set_odometry,
            np.array([p.x, p.y]),
            yaw,
            msg.twist.twist.linear.x,
            stamp_ns(msg.header.stamp),
            time.monotonic(),
        )

    def _on_imu(self, msg: Imu) -> None:
        self._take(self.ctl.set_imu, msg.angular_velocity.z, stamp_ns(msg.header.stamp), time.monotonic())

    def _on_image(self, camera: str, msg: Image) -> None:
        t = time.monotonic()
        try:
            pixels = rgb_pixels(msg)
        except ValueError as e:
            self.ctl.rejected[f"images.{camera}.encoding"] += 1
            self.get_logger().warning(f"rejected a frame of {camera}: {e}", throttle_duration_sec=1.0)
            return
        taken = self._take(self.ctl.set_image, camera, pixels, stamp_ns(msg.header.stamp), t)
        # A camera faster than the policy's rate steps it on the first frame of each period (10 % jitter allowed).
        if taken and camera == self.trigger and t - self._last_step >= 0.9 * self.period:
            self._last_step = t
            self._publish(self.ctl.step(t))
            self.latency.add(time.monotonic() - t)

    def _take(self, setter: Any, *args: Any) -> bool:
        try:
            setter(*args)
        except StateRejected as e:
            self.get_logger().warning(f"rejected: {e}", throttle_duration_sec=1.0)
            return False
        return True

    # --- commands ------------------------------------------------------------------------------------------------
    def _on_watchdog(self) -> None:
        now = time.monotonic()
        if self.ctl.stale(now):  # brakes (and names why) until every input is fresh
            self._publish(self.ctl.step(now))

    def _publish(self, command: tuple[float, float]) -> None:
        self._twist.linear.x, self._twist.angular.z = command
        self._pub.publish(self._twist)
        self.commands += 1

    # --- diagnostics ---------------------------------------------------------------------------------------------
    def diagnostics(self) -> dict[str, float | int | str]:
        now = time.monotonic()
        p50, p99, p999 = (x * 1e6 for x in self.latency.percentiles())
        return {
            "commands": self.commands,
            "policy_steps": self.ctl.policy_steps,
            "frame_to_command_p50_us": p50,
            "frame_to_command_p99_us": p99,
            "frame_to_command_p999_us": p999,
            **{f"age_ms.{k}": v * 1e3 for k, v in self.ctl.ages(now).items()},
            **{f"brakes.{k}": v for k, v in sorted(self.ctl.brakes.items())},
            **{f"rejected.{k}": v for k, v in sorted(self.ctl.rejected.items())},
        }

    def _publish_diagnostics(self) -> None:
        stale = self.ctl.stale(time.monotonic())
        if stale:
            level, message = DiagnosticStatus.ERROR, f"{', '.join(stale)} stale: braking"
        elif self.ctl.rejected:
            level, message = DiagnosticStatus.WARN, "rejected messages"
        else:
            level, message = DiagnosticStatus.OK, "driving"
        self._diag_pub.publish(
            diagnostics_msg(self, "car policy", self.config.robot, level, message, self.diagnostics())
        )


def run(model: Path, checkpoints: Path, robot: str = "car", seconds: float | None = None) -> dict:
    """Serve until Ctrl-C (or ``seconds``); returns the final diagnostics."""
    parameters = {"model_path": str(model), "checkpoints": str(checkpoints), "robot_config": robot}
    return run_node(CarPolicyNode, parameters, seconds)


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab car_policy_node --ros-args -p model_path:=policy.onnx -p checkpoints:=cps.json``"""
    node_main(CarPolicyNode, argv, errors=(ValueError, OSError))


if __name__ == "__main__":
    main()
