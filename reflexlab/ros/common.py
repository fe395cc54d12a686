"""What the policy node, the sim bridge and the serving benchmark share: QoS, message conversion,
and an executor loop that stops on Ctrl-C.

The EventsExecutor is the only rclpy executor that holds 1 kHz on two cores (DESIGN.md); in rclpy
9.1.2 its ``spin()`` ignores SIGINT, so we spin in short slices while ``rclpy.ok()``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np
import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.executors import ExternalShutdownException
from rclpy.experimental import EventsExecutor
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from reflexlab.robot import RobotConfig


def state_qos(best_effort: bool) -> QoSProfile:
    """Keep only the newest sample: a control loop wants the latest state, never a backlog."""
    if best_effort:
        return QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT)
    return QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)


def command_msg_type(robot: RobotConfig) -> type:
    return JointTrajectory if robot.command_type == "joint_trajectory" else Float64MultiArray


class CommandWriter:
    """Fills one pre-built command message per step (the robot config's type) instead of building one.

    A JointTrajectory names the joints and carries the stamp of the state it was computed from,
    so the receiver can measure state-to-command latency. Reusing the message saves ~tens of µs a
    step at 1 kHz (rclpy message construction and the joint-name list).
    """

    def __init__(self, robot: RobotConfig, period_s: float) -> None:
        if robot.command_type == "joint_trajectory":
            self.msg = JointTrajectory(joint_names=list(robot.joint_names))
            point = JointTrajectoryPoint()
            point.time_from_start.nanosec = int(period_s * 1e9)
            self.msg.points = [point]
        else:
            self.msg = Float64MultiArray()

    def __call__(self, positions: np.ndarray, stamp: Time) -> object:
        if isinstance(self.msg, JointTrajectory):
            self.msg.header.stamp = stamp
            self.msg.points[0].positions = positions.tolist()
        else:
            self.msg.data = positions.tolist()
        return self.msg


def read_command(robot: RobotConfig, msg: object) -> np.ndarray:
    """Joint targets in the robot config's joint order; raises ValueError naming what is wrong."""
    if isinstance(msg, JointTrajectory):
        if not msg.points:
            raise ValueError("joint trajectory has no points")
        where = {n: i for i, n in enumerate(msg.joint_names)}
        missing = [n for n in robot.joint_names if n not in where]
        if missing:
            raise ValueError(f"joint trajectory lacks {', '.join(missing)}")
        pos = np.asarray(msg.points[0].positions, dtype=np.float64)
        if pos.shape != (len(msg.joint_names),):
            raise ValueError(f"joint trajectory has {len(msg.joint_names)} names but {pos.size} positions")
        pos = pos[[where[n] for n in robot.joint_names]]
    else:
        pos = np.asarray(msg.data, dtype=np.float64)
        if pos.shape != (len(robot.joint_names),):
            raise ValueError(f"command has {pos.size} values for {len(robot.joint_names)} joints")
    if not np.isfinite(pos).all():
        raise ValueError("command has non-finite values")
    return pos


def rgb_pixels(msg: object) -> np.ndarray:
    """A ``sensor_msgs/Image`` as (height, width, 3) uint8 RGB (a view where it can be): rgb8 as is, bgr8 flipped.

    Raises ValueError naming the encoding or the size for anything else (a depth or mono topic is not a colour
    camera), so a receiver can count and report it.
    """
    h, w, step, encoding = msg.height, msg.width, msg.step, msg.encoding  # type: ignore[attr-defined]
    if encoding not in ("rgb8", "bgr8"):
        raise ValueError(f"image encoding {encoding!r}, expected rgb8 or bgr8")
    data = np.frombuffer(msg.data, dtype=np.uint8)  # type: ignore[attr-defined]
    if step < w * 3 or data.size != h * step:
        raise ValueError(f"image of {h}x{w} {encoding} carries {data.size} bytes at row step {step}")
    pixels = data.reshape(h, step)[:, : w * 3].reshape(h, w, 3)
    return pixels[..., ::-1] if encoding == "bgr8" else pixels


def diagnostics_msg(
    node: Node, name: str, hardware_id: str, level: bytes, message: str, values: Mapping[str, object]
) -> DiagnosticArray:
    """One ``/diagnostics`` status of ``node`` ("<node>: <name>"), stamped now; floats to 6 significant digits."""
    status = DiagnosticStatus(
        level=level,
        name=f"{node.get_name()}: {name}",
        hardware_id=hardware_id,
        message=message,
        values=[KeyValue(key=k, value=f"{v:.6g}" if isinstance(v, float) else str(v)) for k, v in values.items()],
    )
    msg = DiagnosticArray(status=[status])
    msg.header.stamp = node.get_clock().now().to_msg()
    return msg


def stamp_ns(stamp: Time) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def spin(
    nodes: Iterable[Node],
    until: Callable[[], bool] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Spin ``nodes`` on one EventsExecutor until Ctrl-C/SIGTERM, ``until()`` or ``stop`` is set."""
    nodes = list(nodes)
    executor = EventsExecutor()
    for node in nodes:
        executor.add_node(node)
    stop = stop or threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while rclpy.ok() and not stop.is_set() and not (until and until()):
            executor.spin_once(timeout_sec=0.05)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        for node in nodes:
            executor.remove_node(node)
        executor.shutdown()


def wait_until(nodes: Iterable[Node], condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Spin until ``condition()`` holds (discovery, matching, a first message); TimeoutError names ``what``."""
    deadline = time.monotonic() + timeout_s
    spin(nodes, until=lambda: condition() or time.monotonic() > deadline)
    if not condition():
        raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")


def clean_shared_memory() -> str:
    """Remove FastDDS shared-memory ports and segments left by killed processes (``fastdds shm clean``).

    Zombie segments accumulate in /dev/shm when DDS processes are killed; measured here they cut a
    1 kHz policy node from ~930 to ~750 achieved Hz. Segments of live processes are left alone.
    """
    tool = Path(sys.prefix) / "bin" / "fastdds"
    if not tool.exists():
        return "fastdds tool not installed"
    env = dict(os.environ, PATH=f"{tool.parent}{os.pathsep}{os.environ.get('PATH', '')}")  # its python: ours
    result = subprocess.run([str(tool), "shm", "clean"], capture_output=True, text=True, env=env, timeout=60)
    return result.stdout.strip()


def run_node(
    factory: Callable[..., Node],
    parameters: dict[str, object],
    seconds: float | None = None,
    start: Callable[[Node], None] | None = None,
) -> dict:
    """Run one node in its own rclpy context until Ctrl-C or ``seconds``; returns its ``diagnostics()``.

    What `reflexlab serve` and `reflexlab sim-bridge` share; ``start`` may refuse by raising.
    """
    from rclpy.parameter import Parameter

    rclpy.init()
    node = factory(parameter_overrides=[Parameter(k, value=v) for k, v in parameters.items()])
    try:
        if start is not None:
            start(node)
        t0 = time.monotonic()
        spin([node], until=(lambda: time.monotonic() - t0 >= seconds) if seconds else None)
        return node.diagnostics()
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def node_main(
    factory: Callable[[], Node],
    argv: list[str] | None = None,
    *,
    name: str = "",
    errors: tuple[type[Exception], ...] = (),
    start: Callable[[Node], str | None] | None = None,
    print_diagnostics: bool = False,
) -> None:
    """The ``ros2 run`` entry point every node shares: init, build, start, spin until Ctrl-C, clean up.

    ``errors`` are the ones a user can fix (unreachable robot, bad config, missing file): printed as
    ``name: message`` and exit code 1, no traceback. ``start`` may refuse by returning the reason (logged
    as fatal, exit code 1). ``print_diagnostics`` prints the node's ``diagnostics()`` after Ctrl-C.
    """
    rclpy.init(args=argv if argv is not None else sys.argv)
    node = None
    try:
        node = factory()
        refused = start(node) if start is not None else None
        if refused is not None:
            node.get_logger().fatal(f"not started: {refused}")
            sys.exit(1)
        spin([node])
        if print_diagnostics:
            print(node.diagnostics())  # type: ignore[attr-defined]
    except errors as e:
        print(f"{name or (node.get_name() if node is not None else 'node')}: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
