"""What the real-time sim bridges share: physics locked to the wall clock, the driver's command watchdog, and the
node around them (`RealtimeBridge`: reset handshake, diagnostics, a rendered camera).

A bridge's timer fires every physics period, but timers slip, so each tick asks `WallClock.due` how many steps the
wall clock says are owed and runs them; when it has fallen more than ``catch_up`` steps behind (the machine was
busy), simulated time slips rather than bursting through a backlog the robot would never see. `CommandWatchdog` is
what every driver does when commands stop: after ``timeout_s`` of silence it trips, once, until a command returns.
"""

from __future__ import annotations

import math
import time
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from reflexlab.ros.common import diagnostics_msg

MAX_CATCH_UP = 10  # physics steps per tick before simulated time is allowed to slip


class WallClock:
    """Physics steps owed to the wall clock since the last `restart`."""

    def __init__(self, dt: float, catch_up: int = MAX_CATCH_UP) -> None:
        self.dt, self.catch_up = dt, catch_up
        self.restart()

    def restart(self) -> None:
        self.steps = 0
        self.start = time.monotonic()

    def due(self, now: float) -> range:
        """The numbers (1-based, since `restart`) of the steps to run now, at most ``catch_up`` of them; they count
        as run once returned."""
        owed = math.floor((now - self.start) / self.dt) - self.steps
        if owed > self.catch_up:
            self.start += (owed - self.catch_up) * self.dt  # simulated time slips
            owed = self.catch_up
        first = self.steps + 1
        self.steps += max(0, owed)
        return range(first, self.steps + 1)

    def elapsed(self) -> float:
        return time.monotonic() - self.start


class CommandWatchdog:
    """Silence of more than ``timeout_s`` after a command trips it; the next command re-arms it."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.trips = 0
        self.reset()

    def reset(self) -> None:
        """Forget the last command (a new episode): nothing to time out until the next one."""
        self.last: float | None = None
        self.tripped = False

    def fed(self) -> None:
        self.last = time.monotonic()
        self.tripped = False

    def trips_now(self, now: float) -> bool:
        """True once, at the tick the silence first passes the timeout."""
        if self.tripped or self.last is None or now - self.last <= self.timeout_s:
            return False
        self.tripped = True
        self.trips += 1
        return True


class RealtimeBridge(Node):
    """A simulated robot on the wall clock behind its driver's topics: what the arm and car bridges share.

    A subclass builds ``self.sim`` (``dt``, ``time``, ``step()``, ``reset(seed)``, ``model``, ``data``), its
    topics, then calls `_start_bridge`; it says what a step publishes (`_after_step`), what silence does
    (`_on_silence`), what a reset publishes (`_after_reset`) and adds its own `diagnostics`.
    """

    kind = "sim robot"  # the /diagnostics status name's suffix
    hardware_id = "sim"
    silence = "stopped: no commands"  # the status message while the watchdog has tripped

    def _start_bridge(
        self,
        timeout_s: float,
        sim_reset: str,
        sim_reset_done: str,
        diagnostics_period_s: float,
        camera: tuple[Any, float, tuple[int, int], str, str] | None = None,
    ) -> None:
        """Clock, watchdog, reset handshake, diagnostics and (``camera``: publisher, rate, (height, width), MJCF
        camera, frame id) a rendered camera; then the physics timer starts."""
        from std_msgs.msg import Int64

        from sim.ros.scene_camera import SceneCamera

        self.clock = WallClock(self.sim.dt, MAX_CATCH_UP)
        self.watchdog = CommandWatchdog(timeout_s)
        self.resets = 0
        self._reset_done_pub = self.create_publisher(Int64, sim_reset_done, 10)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_subscription(Int64, sim_reset, self._on_reset, 10)
        self._camera = None if camera is None else SceneCamera(self, self.sim.model, self.sim.data, *camera)
        self.create_timer(self.sim.dt, self._tick)
        self.create_timer(diagnostics_period_s, self._publish_diagnostics)

    def _after_step(self, step: int) -> None:
        """Publish what step number ``step`` (1-based since the last reset) owes its subscribers."""

    def _after_reset(self) -> None:
        """Publish the reset scene's state before the reset's echo."""

    def _on_silence(self) -> None:
        """What the driver does when commands stop (hold, brake)."""

    def _on_reset(self, msg: Any) -> None:
        self.sim.reset(int(msg.data))
        self.resets += 1
        self.clock.restart()
        self.watchdog.reset()
        self._after_reset()
        self._reset_done_pub.publish(msg)

    def _tick(self) -> None:
        now = time.monotonic()
        if self.watchdog.trips_now(now):
            self._on_silence()
            self.get_logger().warning(f"no command for {self.watchdog.timeout_s:g} s: {self.silence}")
        for step in self.clock.due(now):
            self.sim.step()
            self._after_step(step)

    def diagnostics(self) -> dict[str, float | int | str]:
        wall = self.clock.elapsed()
        return {
            "sim_time_s": self.sim.time,
            "real_time_factor": self.sim.time / wall if wall > 0 else 0.0,
            "resets": self.resets,
            "watchdog_trips": self.watchdog.trips,
            "camera_frames": self._camera.frames if self._camera is not None else 0,
        }

    def _publish_diagnostics(self) -> None:
        tripped = self.watchdog.tripped
        level = DiagnosticStatus.WARN if tripped else DiagnosticStatus.OK
        message = self.silence if tripped else "running"
        self._diag_pub.publish(diagnostics_msg(self, self.kind, self.hardware_id, level, message, self.diagnostics()))

    def destroy_node(self) -> None:
        if getattr(self, "_camera", None) is not None:
            self._camera.close()
        super().destroy_node()
