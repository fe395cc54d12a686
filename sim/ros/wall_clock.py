"""What the real-time sim bridges share: physics locked to the wall clock, and the driver's command watchdog.

A bridge's timer fires every physics period, but timers slip, so each tick asks `WallClock.due` how many steps the
wall clock says are owed and runs them; when it has fallen more than ``catch_up`` steps behind (the machine was
busy), simulated time slips rather than bursting through a backlog the robot would never see. `CommandWatchdog` is
what every driver does when commands stop: after ``timeout_s`` of silence it trips, once, until a command returns.
"""

from __future__ import annotations

import math
import time


class WallClock:
    """Physics steps owed to the wall clock since the last `restart`."""

    def __init__(self, dt: float, catch_up: int = 10) -> None:
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
