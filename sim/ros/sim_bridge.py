"""The MuJoCo sim bridge: a simulated robot behind the same ROS 2 topics as the real one.

Physics runs at the task's rate locked to the wall clock (late ticks catch up, so simulated time
keeps pace); joint states and IMU samples are published at ``publish_rate_hz``; joint-position
commands (the robot config's message type and topic) go to the MJCF's PD actuators. A watchdog
holds the robot (or only damps it) when commands stop for ``command_timeout_s`` and reports when
it tripped and how long after the last command. ``/clock`` is published on request.

Run it as ``reflexlab sim-bridge --task quadruped-walk`` or ``ros2 run reflexlab sim_bridge``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import Imu, JointState

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from reflexlab.robot import RobotConfig
from reflexlab.ros.common import command_msg_type, diagnostics_msg, node_main, read_command, run_node, state_qos
from sim.ros.sim_robot import SimRobot

PARAMETERS: dict[str, object] = {
    "task": "quadruped-walk",
    "robot_config": "quadruped",  # topics and command type, shared with the policy node
    "publish_rate_hz": 0.0,  # joint state / IMU rate; 0 = every physics step
    "command_timeout_s": 0.1,  # no command for this long: the watchdog engages
    "watchdog_mode": "hold",  # hold the measured pose, or damp (no stiffness)
    "publish_clock": False,  # publish /clock (and stamp messages) with simulated time
    "diagnostics_period_s": 1.0,
}

# Catch up at most this many physics steps per tick; beyond that, simulated time falls behind.
MAX_CATCH_UP = 5


class SimBridge(Node):
    """Steps a `SimRobot` in real time and speaks the robot config's topics."""

    def __init__(self, node_name: str = "sim_bridge", **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        if p["watchdog_mode"] not in ("hold", "damp"):
            raise ValueError(f"watchdog_mode must be hold or damp, got {p['watchdog_mode']!r}")
        self.robot_cfg = r = RobotConfig.load(p["robot_config"])
        self.sim = SimRobot(p["task"])
        if self.sim.joint_names != r.joint_names:
            raise ValueError(f"task {p['task']} joints {self.sim.joint_names} differ from {r.path}'s {r.joint_names}")
        self.timeout = float(p["command_timeout_s"])
        self.watchdog_mode = p["watchdog_mode"]
        self.publish_clock = bool(p["publish_clock"])
        rate = p["publish_rate_hz"] or 1.0 / self.sim.dt
        self.publish_every = max(1, round(1.0 / (self.sim.dt * rate)))
        self.log_every = max(1, round(1.0 / (self.sim.dt * self.sim.spec.control_rate_hz)))
        qos = state_qos(r.best_effort)
        self._js_pub = self.create_publisher(JointState, r.topics.joint_states, qos)
        self._imu_pub = self.create_publisher(Imu, r.topics.imu, qos)
        self._clock_pub = self.create_publisher(Clock, "/clock", 10) if self.publish_clock else None
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(command_msg_type(r), r.topics.joint_command, self._on_command, qos)
        self._js = JointState(name=list(r.joint_names))
        self._imu = Imu()
        self._imu.header.frame_id = "base"
        self._imu.linear_acceleration_covariance[0] = -1.0  # not provided (REP 145)
        self.reset()
        self.create_timer(self.sim.dt, self._tick)
        self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics)
        self.get_logger().info(
            f"{p['task']}: physics {1 / self.sim.dt:g} Hz, states every {self.publish_every} step(s) on "
            f"{r.topics.joint_states} + {r.topics.imu}, commands on {r.topics.joint_command}, "
            f"watchdog {self.watchdog_mode} after {self.timeout * 1e3:g} ms"
        )

    def reset(self) -> None:
        """Stand the robot up again and forget commands, trips and the trajectory log."""
        self.sim.reset()
        self.steps = 0
        self.commands = 0
        self.rejected = 0
        self.last_command_t: float | None = None
        self.tripped = False
        self.trips: list[float] = []  # seconds from the last command to each watchdog engagement
        self.trip_times: list[float] = []  # monotonic time of each engagement
        self.recoveries = 0
        self.log: list[tuple[float, ...]] = []  # (sim time, x, y, z, vx, vy, yaw rate) at control rate
        self._t_start = time.monotonic()

    # --- commands and watchdog ------------------------------------------------------------------
    def _on_command(self, msg: object) -> None:
        try:
            targets = read_command(self.robot_cfg, msg)
        except ValueError as e:
            self.rejected += 1
            self.get_logger().warning(f"rejected command: {e}", throttle_duration_sec=1.0)
            return
        self.sim.set_targets(targets)
        self.commands += 1
        self.last_command_t = time.monotonic()
        if self.tripped:
            self.tripped = False
            self.recoveries += 1
            self.get_logger().info("commands resumed: watchdog released")

    def _watchdog(self, now: float) -> None:
        if self.tripped or self.last_command_t is None or now - self.last_command_t <= self.timeout:
            return
        self.sim.engage_watchdog(self.watchdog_mode)
        self.tripped = True
        self.trips.append(now - self.last_command_t)
        self.trip_times.append(now)
        self.get_logger().warning(
            f"no command for {self.trips[-1] * 1e3:.1f} ms: watchdog engaged ({self.watchdog_mode})"
        )

    # --- physics --------------------------------------------------------------------------------
    def _tick(self) -> None:
        now = time.monotonic()
        self._watchdog(now)
        due = math.floor((now - self._t_start) / self.sim.dt) - self.steps
        for _ in range(max(0, min(due, MAX_CATCH_UP))):
            self.sim.step()
            self.steps += 1
            if self.steps % self.log_every == 0:
                s = self.sim.state()
                self.log.append((self.sim.time, *s.base_pos, *s.base_lin_vel[:2], s.gyro[2]))
            if self.steps % self.publish_every == 0:
                self._publish_state()
        if due > MAX_CATCH_UP:  # too far behind: let simulated time slip rather than spiral
            self._t_start += (due - MAX_CATCH_UP) * self.sim.dt

    def _publish_state(self) -> None:
        s = self.sim.state()
        if self.publish_clock:
            sec = int(self.sim.time)
            stamp = rclpy.time.Time(seconds=sec, nanoseconds=int((self.sim.time - sec) * 1e9)).to_msg()
            self._clock_pub.publish(Clock(clock=stamp))
        else:
            stamp = self.get_clock().now().to_msg()
        js, imu = self._js, self._imu
        js.header.stamp = imu.header.stamp = stamp
        js.position, js.velocity, js.effort = s.joint_pos.tolist(), s.joint_vel.tolist(), s.joint_effort.tolist()
        x, y, z, w = s.quat_xyzw.tolist()
        imu.orientation.x, imu.orientation.y, imu.orientation.z, imu.orientation.w = x, y, z, w
        imu.angular_velocity.x, imu.angular_velocity.y, imu.angular_velocity.z = s.gyro.tolist()
        self._imu_pub.publish(imu)  # IMU first: the policy node steps on the joint state
        self._js_pub.publish(js)

    # --- reporting ------------------------------------------------------------------------------
    def trajectory(self) -> np.ndarray:
        """Ground truth at the control rate: columns sim time, x, y, z, vx, vy (base frame), yaw rate."""
        return np.asarray(self.log, dtype=np.float64).reshape(-1, 7)

    def diagnostics(self) -> dict[str, float | int | str]:
        wall = time.monotonic() - self._t_start
        traj = self.trajectory()
        dist = float(np.linalg.norm(traj[-1, 1:3] - traj[0, 1:3])) if len(traj) > 1 else 0.0
        return {
            "sim_time_s": self.sim.time,
            "real_time_factor": self.sim.time / wall if wall > 0 else 0.0,
            "commands": self.commands,
            "rejected_commands": self.rejected,
            "watchdog": self.watchdog_mode if self.tripped else "ok",
            "watchdog_trips": len(self.trips),
            "watchdog_last_delay_ms": self.trips[-1] * 1e3 if self.trips else float("nan"),
            "recoveries": self.recoveries,
            "distance_m": dist,
            "fallen": int(self.sim.fallen),
        }

    def _publish_diagnostics(self) -> None:
        d = self.diagnostics()
        level = DiagnosticStatus.WARN if self.tripped or d["fallen"] else DiagnosticStatus.OK
        message = "watchdog engaged" if self.tripped else ("fallen" if d["fallen"] else "running")
        self._diag_pub.publish(diagnostics_msg(self, "sim robot", self.robot_cfg.robot, level, message, d))


def run(
    task: str,
    robot: str,
    publish_rate_hz: float = 0.0,
    command_timeout_s: float = 0.1,
    watchdog_mode: str = "hold",
    publish_clock: bool = False,
    seconds: float | None = None,
) -> dict:
    """Run until Ctrl-C (or ``seconds``); returns the final diagnostics. `reflexlab sim-bridge` calls this."""
    parameters = {
        "task": task,
        "robot_config": str(robot),
        "publish_rate_hz": float(publish_rate_hz),
        "command_timeout_s": float(command_timeout_s),
        "watchdog_mode": watchdog_mode,
        "publish_clock": bool(publish_clock),
    }
    return run_node(SimBridge, parameters, seconds)


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab sim_bridge --ros-args -p task:=quadruped-walk``"""
    node_main(SimBridge, argv, print_diagnostics=True)


if __name__ == "__main__":
    main()
