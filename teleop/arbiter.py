"""Who commands the robot this step: the policy, the person, a handback blend between them, or a hold.

The arbiter knows neither the robot nor the device: it sees the policy's action, a `TeleopReading`,
the action that holds the robot still, and a function turning the reading into an action (the
caller composes `teleop.frames` with its action space, e.g. EE target += twist·dt). It only calls
that function while the person is in control.

States and why:

* ``policy`` → ``teleop`` when the person engages (deadman held, toggle pressed, or motion, per
  config) — at any step, with priority over everything except a disconnected device.
* ``teleop`` → ``handback`` when they let go: over ``handback_steps`` the action blends linearly
  from the last teleop action to the policy's, so the robot does not jump to wherever the policy
  happens to point. Handback steps are marked ``is_intervention=True`` with ``source="handback"``:
  the executed action is not the policy's, so learners that treat non-intervention steps as policy
  samples must not see them, while recorders can still tell them from the person's own steps.
  Re-engaging during handback goes straight back to ``teleop``.
* device disconnected while ``teleop`` or ``handback`` → ``hold``: the hold action, with the reason
  on every step, until the device is back *and* the person engages again (→ ``teleop``), or
  `acknowledge` is called (→ handback to the policy from the hold action). Control never silently
  returns to the policy after the person lost their device mid-intervention.
* device disconnected while the policy drives: the policy continues, each step's reason says that
  nobody can intervene (or it holds, with ``hold_on_disconnect_under_policy``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from teleop.config import ArbiterConfig
from teleop.devices.base import TeleopReading

Source = Literal["policy", "teleop", "handback", "hold"]


@dataclass(frozen=True)
class ArbiterStep:
    """The decision for one control step (same fields as `real.env.Decision`)."""

    action: np.ndarray
    is_intervention: bool
    source: Source
    reason: str = ""


@dataclass
class InterventionCounts:
    """Counts since the last `InterventionArbiter.reset`."""

    interventions: int = 0  # takeovers: entries into ``teleop``
    intervention_steps: int = 0  # steps with is_intervention (teleop + handback + hold)
    teleop_steps: int = 0
    handback_steps: int = 0
    hold_steps: int = 0
    disconnects: int = 0


class InterventionArbiter:
    """Decides each step between policy and person (see module doc for the states)."""

    def __init__(self, config: ArbiterConfig | None = None) -> None:
        self.config = config or ArbiterConfig()
        self.state: Source = "policy"
        self.counts = InterventionCounts()
        self._toggled = False
        self._toggle_was_down = False
        self._idle_steps = 0
        self._handback_from: np.ndarray | None = None
        self._handback_step = 0
        self._hold_reason = ""
        self._was_connected = True
        self._acknowledged = False
        self._last_teleop: np.ndarray | None = None

    def reset(self) -> None:
        """New episode: zero the counts and drop any handback/toggle; a hold stays until resolved."""
        self.counts = InterventionCounts()
        self._toggled = False
        self._idle_steps = 0
        if self.state != "hold":
            self.state = "policy"

    def acknowledge(self) -> None:
        """An operator confirms (e.g. from a UI) that the policy may continue after a hold."""
        if self.state == "hold":
            self._acknowledged = True
            self._begin_handback(self._handback_from)

    def step(
        self,
        policy_action: np.ndarray,
        reading: TeleopReading,
        hold_action: np.ndarray,
        teleop_action: Callable[[TeleopReading], np.ndarray],
    ) -> ArbiterStep:
        """Decide this step.

        Args:
            policy_action: what the policy asks for.
            reading: this step's device sample.
            hold_action: the action that keeps the robot where it is now.
            teleop_action: the person's action from the reading (called only while they command).
        """
        policy_action = np.asarray(policy_action, dtype=np.float64)
        hold_action = np.asarray(hold_action, dtype=np.float64)
        if not reading.connected:
            out = self._disconnected(policy_action, hold_action, reading)
        else:
            self._was_connected, self._acknowledged = True, False
            engaged = self._engaged(reading)
            if engaged:
                if self.state != "teleop":
                    self.counts.interventions += 1
                self.state = "teleop"
            elif self.state == "teleop":
                self._begin_handback(self._last_teleop)
            if self.state == "teleop":
                self._last_teleop = np.asarray(teleop_action(reading), dtype=np.float64)
                out = ArbiterStep(self._last_teleop, True, "teleop", reading.warning)
            elif self.state == "hold":
                out = ArbiterStep(hold_action, True, "hold", self._hold_reason + self._hold_hint())
            elif self.state == "handback":
                out = self._handback(policy_action)
            else:
                out = ArbiterStep(policy_action, False, "policy", reading.warning)
        self._count(out)
        return out

    # --- internals --------------------------------------------------------------------------
    def _engaged(self, reading: TeleopReading) -> bool:
        """Whether the person wants control this step (edge-triggered toggle, debounced motion)."""
        cfg = self.config
        if cfg.engage == "deadman":
            return reading.pressed(cfg.deadman_button)
        if cfg.engage == "toggle":
            down = reading.pressed(cfg.toggle_button)
            if down and not self._toggle_was_down:
                self._toggled = self.state not in ("teleop",)
            self._toggle_was_down = down
            return self._toggled
        active = float(np.max(np.abs(reading.twist))) > cfg.motion_threshold
        self._idle_steps = 0 if active else self._idle_steps + 1
        return active or (self.state == "teleop" and self._idle_steps < cfg.motion_release_steps)

    def _disconnected(self, policy_action: np.ndarray, hold_action: np.ndarray, reading: TeleopReading) -> ArbiterStep:
        if self._was_connected:
            self.counts.disconnects += 1
        self._was_connected = False
        self._toggled = False
        reason = f"teleop device disconnected: {reading.reason or 'no reason given'}"
        person_had_control = self.state == "teleop" or (self.state == "handback" and not self._acknowledged)
        must_hold = self.state == "policy" and self.config.hold_on_disconnect_under_policy and not self._acknowledged
        if person_had_control or must_hold:
            self.state, self._hold_reason = "hold", reason
        if self.state == "hold":
            self._handback_from = hold_action
            return ArbiterStep(hold_action, True, "hold", self._hold_reason)
        if self.state == "handback":  # acknowledged: finish handing back to the policy
            step = self._handback(policy_action)
            return ArbiterStep(step.action, True, "handback", f"{step.reason}; {reason}")
        return ArbiterStep(policy_action, False, "policy", reason + " (policy continues; nobody can intervene)")

    def _hold_hint(self) -> str:
        how = {"deadman": "hold the deadman", "toggle": "press toggle", "motion": "move the device"}[self.config.engage]
        return f" — device is back; holding until the operator takes over ({how}) or acknowledge()"

    def _begin_handback(self, start: np.ndarray | None) -> None:
        self._handback_from = start
        self._handback_step = 0
        self.state = "handback" if start is not None and self.config.handback_steps > 0 else "policy"

    def _handback(self, policy_action: np.ndarray) -> ArbiterStep:
        assert self._handback_from is not None
        self._handback_step += 1
        alpha = self._handback_step / self.config.handback_steps
        action = (1.0 - alpha) * self._handback_from + alpha * policy_action
        if self._handback_step >= self.config.handback_steps:
            self.state = "policy"
        return ArbiterStep(action, True, "handback", f"handback {self._handback_step}/{self.config.handback_steps}")

    def _count(self, out: ArbiterStep) -> None:
        c = self.counts
        c.intervention_steps += out.is_intervention
        c.teleop_steps += out.source == "teleop"
        c.handback_steps += out.source == "handback"
        c.hold_steps += out.source == "hold"
