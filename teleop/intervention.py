"""A device plus the arbiter, as the per-step intervention hook a real-robot env calls.

`real.env.RealEnv` asks ``decide(policy_action, hold_action, state)`` once per step; this reads the
device then and there (so the person's input is as fresh as the step) and lets the arbiter choose.
It depends on no robot code: the caller's ``teleop_action(reading, state)`` turns a reading into
an action (typically `teleop.frames.FrameMapper` + "EE target = current pose + twist·dt").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from teleop.arbiter import ArbiterStep, InterventionArbiter
from teleop.devices.base import TeleopDevice, TeleopReading


class DeviceIntervention:
    """`real.env.Intervention` backed by a `TeleopDevice` and an `InterventionArbiter`."""

    def __init__(
        self,
        device: TeleopDevice,
        arbiter: InterventionArbiter,
        teleop_action: Callable[[TeleopReading, Any], np.ndarray],
    ) -> None:
        self.device, self.arbiter, self.teleop_action = device, arbiter, teleop_action
        self.last_reading: TeleopReading | None = None

    def decide(self, policy_action: np.ndarray, hold_action: np.ndarray, state: Any) -> ArbiterStep:
        reading = self.last_reading = self.device.read()
        return self.arbiter.step(policy_action, reading, hold_action, lambda r: self.teleop_action(r, state))

    def reset(self, seed: int | None = None) -> None:
        """A new episode (a person at a device needs no seed)."""
        self.arbiter.reset()
