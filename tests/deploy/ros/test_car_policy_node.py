"""The car policy node over rclpy and FastDDS: a command per camera frame from a car-race camera policy, the
frame-to-command latency in /diagnostics, and the brake while the camera is stale or sends frames of the wrong
size."""

from __future__ import annotations

import array
import json
import time
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Twist
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, Imu

from deploy.ros.car_policy_node import CarPolicyNode
from real.car.config import load_car_config
from reflexlab.ros.common import state_qos, wait_until
from reflexlab.tasks.car_race.course import Course
from tests.sim.ros.test_car_bridge import run_for

CONFIG = load_car_config("car")
COURSE = Course.generate(0)


class CarSide(Node):
    """Odometry and IMU at 50 Hz, the front camera at 10 Hz (``frame_size`` pixels, or none while not ``filming``);
    keeps the commands and the diagnostics."""

    def __init__(self) -> None:
        super().__init__("car_side")
        qos = state_qos(best_effort=False)
        t = CONFIG.topics
        self.odom_pub = self.create_publisher(Odometry, t.odometry, qos)
        self.imu_pub = self.create_publisher(Imu, t.imu, qos)
        self.image_pub = self.create_publisher(Image, CONFIG.cameras["front"].topic, qos)
        self.commands: list[tuple[float, float, float]] = []
        self.diagnostics: list[DiagnosticArray] = []
        self.create_subscription(Twist, t.command, self._on_command, qos)
        self.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 10)
        self.filming, self.frame_size, self.frames = True, (64, 64), 0
        self.create_timer(0.02, self._state)
        self.create_timer(0.1, self._frame)

    def _on_command(self, msg: Twist) -> None:
        self.commands.append((time.monotonic(), msg.linear.x, msg.angular.z))

    def _state(self) -> None:
        stamp = self.get_clock().now().to_msg()
        odom = Odometry()
        odom.header.stamp = stamp
        x, y = COURSE.point(1.0)
        yaw = COURSE.heading_at(1.0)
        odom.pose.pose.position.x, odom.pose.pose.position.y = float(x), float(y)
        odom.pose.pose.orientation.w, odom.pose.pose.orientation.z = float(np.cos(yaw / 2)), float(np.sin(yaw / 2))
        odom.twist.twist.linear.x = 1.0
        imu = Imu()
        imu.header.stamp = stamp
        self.odom_pub.publish(odom)
        self.imu_pub.publish(imu)

    def _frame(self) -> None:
        if not self.filming:
            return
        h, w = self.frame_size
        msg = Image(height=h, width=w, encoding="rgb8", step=3 * w)
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.data = array.array("B", bytes([200]) * (h * w * 3))
        self.image_pub.publish(msg)
        self.frames += 1


def status(side: CarSide) -> tuple[int, str, dict[str, str]]:
    st = next(st for st in side.diagnostics[-1].status if st.name.endswith("car policy"))
    return st.level, st.message, {kv.key: kv.value for kv in st.values}


def test_a_command_per_frame_and_the_brake_while_the_camera_is_stale(ros, car_policy, tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints.json"
    checkpoints.write_text(json.dumps({"checkpoints": COURSE.checkpoints().tolist()}))
    params = {"model_path": str(car_policy.path), "checkpoints": str(checkpoints), "diagnostics_period_s": 0.2}
    node = CarPolicyNode(parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
    side = CarSide()
    nodes = [node, side]
    try:
        wait_until(nodes, lambda: node.ctl.policy_steps >= 3, "the policy acting on frames")
        n0, i0 = node.commands, node.ctl.policy_steps
        run_for(nodes, 1.0)
        assert 7 <= node.ctl.policy_steps - i0 <= 12, "one policy step per frame at 10 Hz"
        assert node.commands - n0 == node.ctl.policy_steps - i0, "and one command each"
        assert side.commands[-1][1] > 0.5, "the policy drives"
        level, _, values = status(side)
        assert level == DiagnosticStatus.OK and 0 < float(values["frame_to_command_p99_us"]) < 1e5
        side.filming = False
        t_off = time.monotonic()
        run_for(nodes, 0.6)
        braking = [c for c in side.commands if c[0] > t_off + CONFIG.safety.max_frame_age_s + 0.06]
        assert len(braking) >= 3 and all(c[1] == 0.0 for c in braking), "the watchdog brakes while it is blind"
        assert node.ctl.brakes["stale:front"] >= 3
        level, message, _ = status(side)
        assert (level, message) == (DiagnosticStatus.ERROR, "front stale: braking")
        side.filming, side.frame_size = True, (32, 32)  # a camera at another resolution: refused, still blind
        run_for(nodes, 0.5)
        assert node.ctl.rejected["images.front.wrong_size"] >= 3 and side.commands[-1][1] == 0.0
        side.frame_size = (64, 64)
        run_for(nodes, 0.5)
        assert side.commands[-1][1] > 0.0, "fresh frames of the right size: it drives again"
    finally:
        for n in nodes:
            n.destroy_node()


def test_a_policy_without_a_camera_or_checkpoints_is_refused(ros, car_policy, tmp_path: Path) -> None:
    import dataclasses

    from deploy.onnx_export import export_generator
    from tests.deploy.conftest import TINY_FACTS, TinyGenerator

    blind_spec = dataclasses.replace(car_policy.spec, images=())
    blind = tmp_path / "blind.onnx"
    export_generator(TinyGenerator(blind_spec).eval(), blind_spec, blind, {"checkpoint_sha256": "0" * 64}, TINY_FACTS)
    checkpoints = tmp_path / "checkpoints.json"
    checkpoints.write_text(json.dumps({"checkpoints": COURSE.checkpoints().tolist()}))
    model = str(car_policy.path)
    cases = [
        ({"model_path": str(blind), "checkpoints": str(checkpoints)}, "reads no camera"),
        ({"model_path": model, "checkpoints": str(tmp_path / "none.json")}, r"none\.json: expected a JSON"),
        ({"model_path": model}, "set model_path .* and checkpoints"),
    ]
    for params, words in cases:
        with pytest.raises(ValueError, match=words):
            CarPolicyNode(parameter_overrides=[Parameter(k, value=v) for k, v in params.items()])
