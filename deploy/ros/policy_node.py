"""The reflexlab policy node: a ROS 2 lifecycle node serving an exported ONNX policy.

Lifecycle: *configure* loads the robot config and the model and refuses a model whose Spec
disagrees with the robot (the error names the field); *activate* starts control; *deactivate*
sends one last hold command and stops commanding; *cleanup* unloads. With ``autostart`` the node
configures and activates itself (``ros2 run`` / a launch file without a lifecycle manager).

Control: each fresh JointState triggers a control step at once (lowest latency), bounded by a
token bucket at ``rate_hz`` so that a flood of states cannot make the node command faster; a
timer at ``rate_hz`` steps when states stop or come slower, so commands keep flowing (held or
damped by the safety filter when the state is stale). The policy itself runs at the model's
control rate (``policy_rate_hz`` overrides). ``/diagnostics`` reports the achieved rate, step
latency percentiles, deadline misses, safety interventions and rejected messages.

Action-chunk models (generators) are sampled at the policy rate as well; ``chunk_execution``
(receding horizon or temporal ensembling, ``ensemble_decay``) and ``interpolation`` (linear or
hold between policy steps) say how their chunks become the command of every control step, and
``/diagnostics`` adds chunk re-plans and horizon exhaustions. Plain policies ignore them.

A generator with cameras reads the ``sensor_msgs/Image`` topics the robot config names for them
(``cameras``): frames of another size or encoding are rejected and counted, and the robot holds
(``safety.max_frame_age_s``) while a camera's frames are stale or have never come; ``/diagnostics``
reports each camera's frame age and turns to ERROR while it holds for one.
"""

from __future__ import annotations

import gc
import time
from functools import partial
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import Twist
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image, Imu, JointState

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from deploy.controller import PolicyController, StateRejected
from deploy.runner import load_model
from deploy.timing import LatencyWindow, TokenBucket
from reflexlab.chunking import ChunkConfig
from reflexlab.robot import RobotConfig
from reflexlab.ros.common import (
    CommandWriter,
    command_msg_type,
    diagnostics_msg,
    node_main,
    rgb_pixels,
    run_node,
    stamp_ns,
    state_qos,
)

# The token bucket admits 10 % more than rate_hz: a stream at exactly rate_hz with jitter is a
# random walk that would otherwise empty the bucket and drop states now and then.
RATE_HEADROOM = 1.1

# Diagnostics counters that turn the status to WARN once non-zero (beside deadline misses).
_WARN_COUNTERS = ("intervention.", "rejected.", "chunk.horizon_exhaustions", "chunk.non_finite")

# Parameters read at configure; they cannot change while the node is configured.
PARAMETERS: dict[str, object] = {
    "model_path": "",  # the exported .onnx policy
    "robot_config": "quadruped",  # a robot config YAML path, or a name in config/robots
    "rate_hz": 500.0,  # control rate: commands published per second
    "policy_rate_hz": 0.0,  # policy evaluations per second; 0 = the model's control rate
    "autostart": True,  # configure and activate at startup
    "diagnostics_period_s": 1.0,
    # Action-chunk models only (see reflexlab.chunking):
    "chunk_execution": "receding",  # receding (latest chunk, re-planned every policy step) or ensemble
    "ensemble_decay": 0.01,  # ensemble weights exp(-decay * chunk age in policy steps)
    "interpolation": "linear",  # between policy steps: linear (moves every control step) or hold
    "seed": 0,  # seeds the generator's noise; each activation replays the same noise
}


class PolicyNode(LifecycleNode):
    """Serves one policy on one robot; see the module docstring."""

    def __init__(self, node_name: str = "policy", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.error: str | None = None  # why the last configure failed, for tests and tools
        self.ctl: PolicyController | None = None
        self.robot: RobotConfig | None = None
        self._active = False
        self._fill = self._watchdog = None
        self._entities: list[object] = []
        self._rejection_logged: dict[str, float] = {}
        self._reset_stats()

    # --- lifecycle ------------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        try:
            if not p["model_path"]:
                raise ValueError("parameter model_path is empty: name the exported .onnx policy")
            self.robot = RobotConfig.load(p["robot_config"])
            chunking = ChunkConfig(p["chunk_execution"], float(p["ensemble_decay"]), p["interpolation"])
            policy = load_model(Path(p["model_path"]))
            self.ctl = PolicyController(
                policy, self.robot, p["rate_hz"], p["policy_rate_hz"] or None, chunking, int(p["seed"])
            )
        except (OSError, ValueError) as e:  # missing/corrupt model, foreign Spec, bad robot config
            self.error = str(e)
            self.get_logger().error(f"configure refused: {e}")
            return TransitionCallbackReturn.FAILURE
        self.error = None
        self.rate_hz = float(p["rate_hz"])
        self.period = 1.0 / self.rate_hz
        self.bucket = TokenBucket(self.rate_hz * RATE_HEADROOM, capacity=3.0)
        r, qos = self.robot, state_qos(self.robot.best_effort)
        self._cmd_type = command_msg_type(r)
        self._command = CommandWriter(r, self.period)
        self._pub = self.create_lifecycle_publisher(self._cmd_type, r.topics.joint_command, qos)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._entities = [
            self.create_subscription(JointState, r.topics.joint_states, self._on_joint_state, qos),
            self.create_subscription(Imu, r.topics.imu, self._on_imu, qos),
            self.create_subscription(Twist, r.topics.velocity_command, self._on_twist, 10),
            self.create_timer(p["diagnostics_period_s"], self._publish_diagnostics),
            *(
                self.create_subscription(Image, r.cameras[c].topic, partial(self._on_image, c), qos)
                for c in self.ctl.cameras
            ),
        ]
        spec = self.ctl.spec
        chunks = self.ctl.chunks
        served = (
            f"{spec.action_chunk}-action chunks, {chunks.config.execution} execution, {chunks.config.interpolation} "
            "between policy steps"
            if chunks
            else "one action per policy step"
        )
        self.get_logger().info(
            f"configured: {Path(p['model_path']).name} ({spec.robot}/{spec.task}) on {r.path}, "
            f"{self.rate_hz:g} Hz control, policy at {self.ctl.policy_rate_hz:g} Hz ({served}), "
            f"commands {self._cmd_type.__name__} on {r.topics.joint_command}"
            + "".join(f", camera {c} on {r.cameras[c].topic}" for c in self.ctl.cameras)
        )
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        assert self.ctl is not None
        self.ctl.reset()  # re-arm from the next fresh state: the gait clock restarts at zero
        self._reset_stats()
        # Timer events cost ~0.1 ms of executor time each here, so the rate-hz fill-in timer runs only
        # while the state stream is not driving the loop; a slower watchdog turns it on.
        self._fill = self.create_timer(self.period, self._on_fill)
        self._watchdog = self.create_timer(self.ctl.stale_after_s, self._on_watchdog)
        self._active = True
        # Everything allocated so far (model, rclpy, numpy) is long-lived: move it out of the cyclic
        # GC's sight so collections triggered by per-message allocations stay short (~8 % of the
        # node's CPU at 1 kHz went to gc_collect_main before).
        gc.collect()
        gc.freeze()
        self.get_logger().info("active: commanding from the next fresh state")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._active = False
        for timer in (self._fill, self._watchdog):
            if timer is not None:
                self.destroy_timer(timer)
        self._fill = self._watchdog = None
        if self.ctl is not None and self.ctl.armed:  # one last command: hold the last safe target
            last = self.ctl.filter.last_command
            self._pub.publish(self._command(last, self.get_clock().now().to_msg()))
            self.get_logger().info("deactivated: holding the last safe command")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._destroy_entities()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._active:
            self.on_deactivate(state)
        self._destroy_entities()
        return TransitionCallbackReturn.SUCCESS

    def _destroy_entities(self) -> None:
        for entity in self._entities:
            self.destroy_timer(entity) if hasattr(entity, "timer_period_ns") else self.destroy_subscription(entity)
        self._entities = []
        if self.ctl is not None:
            self.destroy_lifecycle_publisher(self._pub)
            self.destroy_publisher(self._diag_pub)
        self.ctl = None

    def _on_set_parameters(self, params: list) -> SetParametersResult:
        if self.ctl is not None and any(p.name in PARAMETERS for p in params):
            return SetParametersResult(successful=False, reason="deactivate and clean up before changing parameters")
        return SetParametersResult(successful=True)

    # --- inputs ---------------------------------------------------------------------------------
    def _on_joint_state(self, msg: JointState) -> None:
        t = time.monotonic()
        ctl = self.ctl
        try:
            ctl.set_joint_state(msg.name, msg.position, msg.velocity, stamp_ns(msg.header.stamp), t)
        except StateRejected as e:
            self._log_rejection("joint_states", e)
            return
        self._stamp = msg.header.stamp
        if self._active:
            if self.bucket.take(t):
                self._step(t)
            else:
                self.coalesced += 1

    def _on_imu(self, msg: Imu) -> None:
        o, w = msg.orientation, msg.angular_velocity
        try:
            self.ctl.set_imu(
                np.array([o.x, o.y, o.z, o.w]), np.array([w.x, w.y, w.z]), stamp_ns(msg.header.stamp), time.monotonic()
            )
        except StateRejected as e:
            self._log_rejection("imu", e)

    def _on_twist(self, msg: Twist) -> None:
        try:
            self.ctl.set_velocity_command(np.array([msg.linear.x, msg.linear.y, msg.angular.z]), time.monotonic())
        except StateRejected as e:
            self._log_rejection("velocity_command", e)

    def _on_image(self, camera: str, msg: Image) -> None:
        try:
            try:
                pixels = rgb_pixels(msg)
            except ValueError as e:
                self.ctl.rejected[f"images.{camera}.encoding"] += 1
                raise StateRejected("encoding", f"camera {camera!r}: {e}") from None
            self.ctl.set_image(camera, pixels, stamp_ns(msg.header.stamp), time.monotonic())
        except StateRejected as e:
            self._log_rejection(f"images.{camera}", e)

    def _log_rejection(self, source: str, e: StateRejected) -> None:
        key = f"{source}.{e.reason}"
        now = time.monotonic()
        if now - self._rejection_logged.get(key, -10.0) >= 1.0:  # at most once a second per reason
            self._rejection_logged[key] = now
            self.get_logger().warning(f"rejected {source} ({self.ctl.rejected[key]} so far): {e}")

    # --- control --------------------------------------------------------------------------------
    def _stream_drives(self, t: float) -> bool:
        """True while fresh states trigger the steps themselves at (about) our rate."""
        return (
            self._last_step_t is not None
            and t - self._last_step_t < 1.5 * self.period
            and (self.ctl.state_age(t) < 1.5 * self.period)
        )

    def _on_watchdog(self) -> None:
        if self._fill.is_canceled() and not self._stream_drives(time.monotonic()):
            self._fill.reset()

    def _on_fill(self) -> None:
        """Steps at rate_hz while states stopped, went stale or come slower than rate_hz."""
        t = time.monotonic()
        if self._stream_drives(t):
            self._fill.cancel()
        elif self.bucket.take(t):
            self._step(t)

    def _step(self, t_trigger: float) -> None:
        cmd = self.ctl.step(t_trigger)
        if cmd is None:  # not armed: no fresh state yet, nothing safe to command
            return
        self._pub.publish(self._command(cmd, self._stamp))
        done = time.monotonic()
        latency = done - t_trigger
        self.latency.add(latency)
        if latency > self.period:
            self.late_steps += 1
        if self._last_pub_t is not None and done - self._last_pub_t > 2.0 * self.period:
            self.missed_periods += 1
        self._last_step_t = t_trigger
        self._last_pub_t = done
        self.steps += 1

    def _reset_stats(self) -> None:
        self.steps = 0
        self.late_steps = 0
        self.missed_periods = 0
        self.coalesced = 0
        self._last_step_t: float | None = None
        self._last_pub_t: float | None = None
        self._stamp = self.get_clock().now().to_msg()
        self.latency = LatencyWindow(4096)
        self._window = (time.monotonic(), 0)
        self._activated_t = time.monotonic()

    # --- diagnostics ----------------------------------------------------------------------------
    def diagnostics(self) -> dict[str, float | int | str]:
        """The figures /diagnostics reports, as a flat dict (also used by tests and the CLI)."""
        now = time.monotonic()
        t0, steps0 = self._window
        p50, p99, p999 = (x * 1e6 for x in self.latency.percentiles())
        ctl = self.ctl
        out: dict[str, float | int | str] = {
            "active": int(self._active),
            "armed": int(bool(ctl and ctl.armed)),
            "rate_hz": self.rate_hz if ctl else 0.0,
            "achieved_rate_hz": (self.steps - steps0) / max(now - t0, 1e-9),  # since the last /diagnostics
            "mean_rate_hz": self.steps / max(now - self._activated_t, 1e-9) if self._active else 0.0,
            "latency_p50_us": p50,
            "latency_p99_us": p99,
            "latency_p999_us": p999,
            "deadline_misses": self.late_steps + self.missed_periods,
            "late_steps": self.late_steps,
            "missed_periods": self.missed_periods,
            "steps": self.steps,
            "coalesced_states": self.coalesced,
        }
        if ctl is not None:
            out["policy_rate_hz"] = ctl.policy_rate_hz
            out["inferences"] = ctl.inferences
            if ctl.chunks is not None:
                out["chunk.replans"] = ctl.chunks.replans
                out["chunk.horizon_exhaustions"] = ctl.chunks.exhaustions
                out["chunk.non_finite"] = ctl.non_finite_chunks
            out["state_age_ms"] = ctl.state_age(now) * 1e3
            out.update({f"frame_age_ms.{c}": age * 1e3 for c, age in ctl.frame_ages(now).items()})
            out.update({f"intervention.{k}": v for k, v in sorted(ctl.filter.interventions.items())})
            out.update({f"rejected.{k}": v for k, v in sorted(ctl.rejected.items())})
        return out

    def _publish_diagnostics(self) -> None:
        d = self.diagnostics()
        self._window = (time.monotonic(), self.steps)
        stale = d.get("state_age_ms", float("inf")) > self.ctl.stale_after_s * 1e3
        blind = self.ctl.stale_cameras(time.monotonic())
        if not self._active:
            level, message = DiagnosticStatus.OK, "inactive"
        elif stale:
            level, message = DiagnosticStatus.ERROR, "robot state stale: holding"
        elif blind:
            level, message = DiagnosticStatus.ERROR, f"camera {', '.join(blind)} stale: holding"
        elif d["deadline_misses"] or sum(v for k, v in d.items() if k.startswith(_WARN_COUNTERS)):
            level, message = (
                DiagnosticStatus.WARN,
                "deadline misses, interventions, rejected messages or chunk failures",
            )
        else:
            level, message = DiagnosticStatus.OK, "serving"
        self._diag_pub.publish(diagnostics_msg(self, "policy", self.robot.robot, level, message, d))


def autostart(node: PolicyNode) -> bool:
    """Configure and activate when the ``autostart`` parameter asks for it; False if refused."""
    if not node.get_parameter("autostart").value:
        return True
    if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
        return False
    return node.trigger_activate() == TransitionCallbackReturn.SUCCESS


def run(
    model: Path,
    robot: str,
    rate_hz: float,
    policy_rate_hz: float = 0.0,
    seconds: float | None = None,
) -> dict:
    """Serve until Ctrl-C (or ``seconds``); returns the final diagnostics. `reflexlab serve` calls this."""

    def start(node: PolicyNode) -> None:
        if not autostart(node):
            raise ValueError(f"policy node not started: {node.error}")

    parameters = {
        "model_path": str(model),
        "robot_config": str(robot),
        "rate_hz": float(rate_hz),
        "policy_rate_hz": float(policy_rate_hz),
    }
    return run_node(PolicyNode, parameters, seconds, start)


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab policy_node --ros-args -p model_path:=policy.onnx …``"""
    node_main(PolicyNode, argv, start=lambda node: None if autostart(node) else str(node.error))


if __name__ == "__main__":
    main()
