"""The policy node as real rclpy nodes over FastDDS: refused models, hostile publishers, stale state,
lifecycle, a camera policy fed from an Image topic. Everything runs in one EventsExecutor, so timing
is on this process's clock."""

from __future__ import annotations

import array
import math
import time
from pathlib import Path

import numpy as np
import yaml
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, Imu, JointState
from std_msgs.msg import Float64MultiArray

from deploy.ros.policy_node import PolicyNode
from reflexlab.robot import RobotConfig
from reflexlab.ros.common import spin, state_qos, wait_until
from tests.deploy.conftest import CAMERA_SIZE, CAMERA_TOPIC

ROBOT = RobotConfig.load("quadruped")
NAMES = list(ROBOT.joint_names)
HOME = np.array([0.0, 0.8, -1.5] * 4)
RATE = 200.0


def policy_node(
    model: Path, robot: str | Path = "quadruped", autostart: bool = False, rate_hz: float = RATE, **params: object
) -> PolicyNode:
    values = {"model_path": str(model), "robot_config": str(robot), "rate_hz": rate_hz, "autostart": autostart}
    values = {**values, "diagnostics_period_s": 0.2, **params}
    return PolicyNode(parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])


class RobotSide(Node):
    """Publishes IMU + JointState at ``rate_hz`` (optionally hostile) and records the commands and diagnostics."""

    def __init__(self, rate_hz: float = RATE) -> None:
        super().__init__("robot_side")
        qos = state_qos(True)
        self.js_pub = self.create_publisher(JointState, "/joint_states", qos)
        self.imu_pub = self.create_publisher(Imu, "/imu", qos)
        self.commands: list[tuple[float, np.ndarray]] = []
        self.diagnostics: list[DiagnosticArray] = []
        # Best effort like the node's publisher, but a deep history: the test wants every command.
        record = QoSProfile(depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT)
        self.create_subscription(Float64MultiArray, "/joint_commands", self._on_cmd, record)
        self.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 10)
        self.stamp = 1_000_000_000
        self.tick = 0
        self.hostile = False
        self.burst = 0  # states per 1 ms tick (10 = 10 kHz)
        self.publishing = True
        self.create_timer(1.0 / rate_hz, self._on_timer)
        self.create_timer(1e-3, self._on_burst)

    def _on_cmd(self, msg: Float64MultiArray) -> None:
        self.commands.append((time.monotonic(), np.array(msg.data)))

    def state(self, names=None, pos=None, vel=None, stamp=None) -> JointState:
        self.stamp += 1_000_000
        js = JointState(name=list(NAMES if names is None else names))
        s = self.stamp if stamp is None else stamp
        js.header.stamp.sec, js.header.stamp.nanosec = divmod(s, 1_000_000_000)
        q = HOME + 0.05 * math.sin(self.stamp * 1e-9 * 6.0) if pos is None else pos
        js.position = list(q)
        js.velocity = list(np.zeros(12) if vel is None else vel)
        return js

    def imu(self) -> Imu:
        m = Imu()
        m.orientation.w = 1.0
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(self.stamp, 1_000_000_000)
        return m

    HOSTILE = (
        lambda self: self.state(pos=HOME[:11], vel=np.zeros(11)),  # wrong length
        lambda self: self.state(names=NAMES[1:], pos=HOME[1:], vel=np.zeros(11)),  # missing joint
        lambda self: self.state(pos=np.r_[HOME[:11], np.nan]),  # NaN
        lambda self: self.state(vel=np.r_[np.zeros(11), np.inf]),  # inf
        lambda self: self.state(pos=HOME + 1e9),  # huge
        lambda self: self.state(stamp=self.stamp - 50_000_000),  # out of order
        lambda self: self.state(stamp=self.stamp),  # duplicated stamp
    )

    def _on_timer(self) -> None:
        if not self.publishing or self.burst:
            return
        self.tick += 1
        self.imu_pub.publish(self.imu())
        if self.hostile and self.tick % 2 == 0:
            self.js_pub.publish(self.HOSTILE[(self.tick // 2) % len(self.HOSTILE)](self))
        else:
            self.js_pub.publish(self.state())

    def _on_burst(self) -> None:
        for _ in range(self.burst):
            self.imu_pub.publish(self.imu())
            self.js_pub.publish(self.state())


def run_for(nodes: list[Node], seconds: float) -> None:
    t0 = time.monotonic()
    spin(nodes, until=lambda: time.monotonic() - t0 >= seconds)


def start(node: PolicyNode, robot: RobotSide) -> None:
    assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.error
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    wait_until([node, robot], lambda: len(robot.commands) > 5, "commands from the policy node")


def assert_safe(commands: list[tuple[float, np.ndarray]], node: PolicyNode) -> None:
    limits = ROBOT.safety_limits(node.ctl.spec)
    lo, hi = np.asarray(limits.lower), np.asarray(limits.upper)
    values = np.array([c for _, c in commands])
    assert np.isfinite(values).all()
    assert (values >= lo - 1e-12).all() and (values <= hi + 1e-12).all()
    t = np.array([t for t, _ in commands])
    # targets move once per policy period by at most the rate limit's budget for that period
    allowed = limits.max_rate * (np.diff(t) + 1.0 / node.ctl.policy_rate_hz)
    assert (np.abs(np.diff(values, axis=0)).max(axis=1) <= allowed + 1e-9).all()


def test_configure_refuses_missing_corrupt_and_foreign_models(ros, exported, generator, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07garbage" * 100)
    other = yaml.safe_load(Path(ROBOT.path).read_text())
    other["robot"] = "franka-fr3"
    other_robot = tmp_path / "fr3.yaml"
    other_robot.write_text(yaml.safe_dump(other))
    cases = [
        (tmp_path / "missing.onnx", "quadruped", {}, "does not exist"),
        (corrupt, "quadruped", {}, "not a readable ONNX model"),
        (exported[0], other_robot, {}, "field 'robot'"),
        (exported[0], tmp_path / "no-such-robot.yaml", {}, "robot config"),
        (generator.path, "quadruped", {"chunk_execution": "sometimes"}, "chunk_execution must be one of"),
        (generator.path, "quadruped", {"ensemble_decay": math.nan}, "ensemble_decay must be finite"),
    ]
    for model, robot, params, message in cases:
        node = policy_node(model, robot, **params)
        try:
            assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
            assert message in node.error, node.error
            assert node.ctl is None and not node._active
        finally:
            node.destroy_node()


def test_hostile_publisher_never_gets_an_unsafe_command_out(ros, exported) -> None:
    node, robot = policy_node(exported[0]), RobotSide()
    nodes = [node, robot]
    try:
        start(node, robot)
        robot.hostile = True
        run_for(nodes, 1.5)
        rejected = node.ctl.rejected
        for reason in (
            "wrong_length",
            "missing_joint",
            "non_finite",
            "implausible_position",
            "out_of_order",
            "duplicate_stamp",
        ):
            assert rejected[f"joint_states.{reason}"] > 0, (reason, rejected)
        # a 10 kHz burst of valid states: the node keeps its rate instead of following the flood
        robot.hostile, robot.burst = False, 10
        steps0, t0 = node.steps, time.monotonic()
        run_for(nodes, 1.0)
        rate = (node.steps - steps0) / (time.monotonic() - t0)
        robot.burst = 0
        run_for(nodes, 0.3)
        assert 0.8 * RATE <= rate <= 1.15 * RATE, rate  # the bucket admits rate_hz + 10 %
        assert node.coalesced > 0
        assert_safe(robot.commands, node)
        keys = {kv.key for msg in robot.diagnostics for st in msg.status for kv in st.values}
        assert "rejected.joint_states.non_finite" in keys and "latency_p99_us" in keys
    finally:
        for n in nodes:
            n.destroy_node()


def test_stale_state_holds_the_last_safe_command_at_the_node_rate(ros, exported) -> None:
    node, robot = policy_node(exported[0]), RobotSide()
    nodes = [node, robot]
    try:
        start(node, robot)
        run_for(nodes, 0.3)
        robot.publishing = False
        t_stop = time.monotonic()
        run_for(nodes, 0.5)
        late = [c for t, c in robot.commands if t > t_stop + 0.1]
        assert len(late) >= 0.3 * RATE  # commands keep flowing...
        assert all(np.array_equal(c, late[0]) for c in late)  # ...and hold still
        assert node.ctl.filter.interventions["stale_state"] > 0
        levels = [st.level for msg in robot.diagnostics for st in msg.status if st.name.startswith("policy")]
        assert levels[-1] == DiagnosticStatus.ERROR  # robot state stale
        assert_safe(robot.commands, node)
    finally:
        for n in nodes:
            n.destroy_node()


def test_lifecycle_deactivate_stops_commanding_and_parameters_are_locked(ros, exported) -> None:
    node, robot = policy_node(exported[0]), RobotSide()
    nodes = [node, robot]
    try:
        start(node, robot)
        result = node.set_parameters([Parameter("rate_hz", value=50.0)])[0]
        assert not result.successful and "deactivate" in result.reason
        assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
        run_for(nodes, 0.1)
        n = len(robot.commands)
        run_for(nodes, 0.3)
        assert len(robot.commands) == n  # inactive: nothing more is published
        assert node.trigger_cleanup() == TransitionCallbackReturn.SUCCESS
        assert node.set_parameters([Parameter("rate_hz", value=50.0)])[0].successful
    finally:
        for n in nodes:
            n.destroy_node()


def test_generator_streams_interpolated_commands_at_the_control_rate(ros, generator) -> None:
    """A chunk model re-planned at 100 Hz, commanded at 1 kHz: at rate, finite, in limits, smooth."""
    rate = 1000.0
    node = policy_node(generator.path, rate_hz=rate, policy_rate_hz=100.0, chunk_execution="ensemble")
    robot = RobotSide(rate_hz=rate)
    nodes = [node, robot]
    try:
        start(node, robot)
        n0, steps0, replans0, t0 = len(robot.commands), node.steps, node.ctl.chunks.replans, time.monotonic()
        run_for(nodes, 1.0)
        elapsed = time.monotonic() - t0
        commands = robot.commands[n0:]
        assert len(commands) >= 0.6 * rate * elapsed, len(commands) / elapsed  # CI machines are shared
        replan_rate = (node.ctl.chunks.replans - replans0) / elapsed
        assert 0.6 * 100 <= replan_rate <= 1.05 * 100, replan_rate
        limits = ROBOT.safety_limits(node.ctl.spec)
        values = np.array([c for _, c in commands])
        assert np.isfinite(values).all()
        assert (values >= np.asarray(limits.lower)).all() and (values <= np.asarray(limits.upper)).all()
        # the filter budgets max_rate / rate_hz per command, and the command moves nearly every step
        steps = np.abs(np.diff(values, axis=0)).max(axis=1)
        lost = node.steps - steps0 - len(commands)  # best effort: a lost command may double one step
        assert np.count_nonzero(steps > limits.max_rate / rate + 1e-9) <= max(lost, 0), (steps.max(), lost)
        assert steps.max() <= 2 * limits.max_rate / rate + 1e-9
        assert np.mean(steps > 0) > 0.9
        run_for(nodes, 0.25)  # one more /diagnostics
        diag = {kv.key: kv.value for st in robot.diagnostics[-1].status for kv in st.values}
        assert int(diag["chunk.replans"]) > 0 and diag["chunk.horizon_exhaustions"] == "0"
    finally:
        for n in nodes:
            n.destroy_node()


class CameraSide(Node):
    """Publishes the "front" camera as rgb8 at 30 Hz: good frames, or (``bad``) another size and a mono image."""

    def __init__(self) -> None:
        super().__init__("camera_side")
        self.pub = self.create_publisher(Image, CAMERA_TOPIC, state_qos(True))
        self.publishing = True
        self.bad = False
        self.count = 0
        self.create_timer(1.0 / 30.0, self._on_timer)

    def _on_timer(self) -> None:
        if not self.publishing:
            return
        self.count += 1
        h, w = CAMERA_SIZE
        if self.bad:  # alternately: half the size, and a mono8 image of the right size
            h, w, encoding, channels = (h // 2, w // 2, "rgb8", 3) if self.count % 2 else (h, w, "mono8", 1)
        else:
            encoding, channels = "rgb8", 3
        msg = Image(height=h, width=w, encoding=encoding, step=w * channels)
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.data = array.array("B", bytes([(7 * self.count) % 256]) * (h * w * channels))
        self.pub.publish(msg)


def status(robot: RobotSide) -> tuple[int, str, dict[str, str]]:
    st = next(st for st in robot.diagnostics[-1].status if st.name.startswith("policy"))
    return st.level, st.message, {kv.key: kv.value for kv in st.values}


def test_a_camera_policy_reads_its_topic_and_holds_while_frames_are_stale_or_bad(
    ros, camera_generator, camera_robot
) -> None:
    node = policy_node(camera_generator.path, camera_robot.path, policy_rate_hz=50.0)
    robot, camera = RobotSide(), CameraSide()
    camera.publishing = False
    nodes = [node, robot, camera]
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS, node.error
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        wait_until(nodes, lambda: node.ctl.state_age(time.monotonic()) < 0.1, "the robot's state at the node")
        run_for(nodes, 0.5)  # state flows, the camera has not appeared: nothing is commanded
        assert robot.commands == [] and not node.ctl.armed
        level, message, values = status(robot)
        assert (level, message) == (DiagnosticStatus.ERROR, "camera front stale: holding")
        assert values["frame_age_ms.front"] == "inf" and values["armed"] == "0"
        camera.publishing = True
        wait_until(nodes, lambda: len(robot.commands) > 20, "commands once the camera streams")
        run_for(nodes, 0.5)
        level, _, values = status(robot)
        assert level != DiagnosticStatus.ERROR and float(values["frame_age_ms.front"]) < 100
        moving = [c for _, c in robot.commands[-50:]]
        assert any(not np.array_equal(c, moving[0]) for c in moving), "the policy acts while it sees"
        camera.bad = True  # only unusable frames from now on: the picture goes stale
        t_bad = time.monotonic()
        run_for(nodes, 0.8)
        limit = camera_robot.safety.max_frame_age_s
        held = [c for t, c in robot.commands if t > t_bad + limit + 0.05]
        assert len(held) > 50 and all(np.array_equal(c, held[0]) for c in held)
        rejected = node.ctl.rejected
        assert rejected["images.front.wrong_size"] > 0 and rejected["images.front.encoding"] > 0, rejected
        assert node.ctl.filter.interventions["stale_frames"] > 0
        level, message, values = status(robot)
        assert (level, message) == (DiagnosticStatus.ERROR, "camera front stale: holding")
        assert int(values["rejected.images.front.wrong_size"]) > 0
        camera.bad = False
        t_back = time.monotonic()
        run_for(nodes, 0.5)
        back = [c for t, c in robot.commands if t > t_back + 0.1]
        assert any(not np.array_equal(c, held[-1]) for c in back), "fresh frames: the policy acts again"
        assert_safe(robot.commands, node)
    finally:
        for n in nodes:
            n.destroy_node()
