"""Success and failure signals beside the task's own, plugged into `real.env.RealEnv` as ``detectors``.

On a real robot the task's reward is often not enough to end an episode: HIL-SERL has the person
press a key when the robot succeeded, and anything that leaves the reachable workspace (a block
pushed off the table) is a failure no policy can undo. Each detector sees the arm state and the
observation and returns (success, failure, reason).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from real.ros_arm import ArmState
from real.teleop_link import ArmIntervention


@dataclass
class ButtonDetector:
    """A person marks the episode: teleop buttons named ``success`` / ``failure`` in the teleop config.

    Reads the reading the intervention took this step (no second device read), so it costs nothing
    and sees exactly what the arbiter saw.
    """

    intervention: ArmIntervention
    success_button: str = "success"
    failure_button: str = "failure"

    def __call__(self, state: ArmState, obs: np.ndarray) -> tuple[bool, bool, str]:
        reading = self.intervention.last_reading
        if reading is None:
            return False, False, ""
        if reading.pressed(self.failure_button):
            return False, True, f"failure marked by the operator ({self.failure_button} button)"
        if reading.pressed(self.success_button):
            return True, False, f"success marked by the operator ({self.success_button} button)"
        return False, False, ""


@dataclass
class ObjectOutOfBounds:
    """Failure when a tracked object leaves a box (x, y, z in the base frame): pushed off the table, dropped."""

    name: str
    low: tuple[float, float, float]
    high: tuple[float, float, float]

    def __call__(self, state: ArmState, obs: np.ndarray) -> tuple[bool, bool, str]:
        position = state.objects[self.name][:3]
        if np.all(position >= self.low) and np.all(position <= self.high):
            return False, False, ""
        where = ", ".join(f"{v:.3f}" for v in position)
        return False, True, f"{self.name} left its box ({where} m not in {self.low}..{self.high})"
