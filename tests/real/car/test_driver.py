"""The car's driver node over rclpy and FastDDS, driving a synthetic VESC on a pseudo-terminal through the serial
protocol: Twist in, RPM and servo out, wheel odometry back, and the watchdog's brake when commands stop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from geometry_msgs.msg import Twist
from rclpy.parameter import Parameter

from real.car import vesc
from real.car.config import DEFAULT_PATH, CarConfigError, load_car_config
from real.car.driver import CarDriverNode
from reflexlab.ros.common import wait_until
from tests.sim.ros.test_car_bridge import Driver, run_for

CONFIG = load_car_config("car")


def test_the_driver_drives_the_vesc_reports_odometry_and_brakes_on_silence(ros) -> None:
    node = CarDriverNode(parameter_overrides=[Parameter("port", value="synthetic")])
    pilot = Driver()  # the car bridge test's: Twist at 20 Hz, odometry kept
    nodes = [node, pilot]
    device = node.synthetic
    try:
        run_for(nodes, 0.3)
        assert node.braking and device.log.get(vesc.COMM_SET_CURRENT_BRAKE, 0) > 0, "braked until commanded"
        pilot.speed, pilot.yaw_rate, pilot.driving = 1.5, 1.5 * math.tan(0.2) / CONFIG.wheelbase, True
        run_for(nodes, 1.0)
        assert device.target == pytest.approx(1.5 * CONFIG.vesc.erpm_per_m_s, abs=1)
        assert device.servo == pytest.approx(CONFIG.vesc.servo_centre + CONFIG.vesc.servo_per_rad * 0.2, abs=1e-3)
        odom = pilot.odometry[-1]
        assert abs(odom.twist.twist.linear.x - 1.5) < 0.05, "the wheels' speed, from the VESC's RPM"
        assert odom.twist.twist.angular.z == pytest.approx(1.5 * math.tan(0.2) / CONFIG.wheelbase, rel=0.05)
        assert np.hypot(odom.pose.pose.position.x, odom.pose.pose.position.y) > 0.8, "it integrates the drive"
        pilot.speed = 99.0  # beyond the car: clipped
        run_for(nodes, 0.2)
        assert device.target == pytest.approx(CONFIG.safety.max_speed * CONFIG.vesc.erpm_per_m_s, abs=1)
        bad = Twist()
        bad.linear.x = math.nan
        pilot.pub.publish(bad)
        wait_until(nodes, lambda: node.rejected == 1, "the NaN command's rejection")
        pilot.driving = False
        run_for(nodes, CONFIG.safety.command_timeout_s + 0.5)
        assert node.braking and node.brakes == 1 and device.target is None
        assert abs(pilot.odometry[-1].twist.twist.linear.x) < 0.1, "the brake stopped the wheels"
        assert node.diagnostics()["telemetry_timeouts"] == 0
    finally:
        for n in nodes:
            n.destroy_node()


def test_a_car_config_that_would_break_the_servo_is_refused(tmp_path) -> None:
    text = DEFAULT_PATH.read_text()
    path = tmp_path / "car.yaml"
    path.write_text(text.replace("servo_per_rad: -1.0", "servo_per_rad: -3.0"))
    with pytest.raises(CarConfigError, match=r"servo output is 0–1"):
        load_car_config(path)
    path.write_text(text.replace("rate_hz: 50.0", "rate_hz: 50.0\nrate: 10"))  # a misspelt key
    with pytest.raises(CarConfigError, match="rate"):
        load_car_config(path)
