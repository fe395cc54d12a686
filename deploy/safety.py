"""The safety filter: the last code between a policy's output and a robot's joint targets.

Whatever the policy, the network or the state stream does, what leaves this filter is finite,
inside the joint limits and moves no faster than the allowed rate. When the robot's state is
stale (older than a few control periods), a camera the policy reads goes stale, or the policy's
output is unusable (NaN/inf, wrong length), the filter holds the last safe command ("hold") or
follows the measured position ("damp": the PD then only damps motion). Every intervention is
counted by kind, so a node can report them rather than hide them.

Pure numpy and independent of ROS, so the policy node, a real-robot env and tests share it.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

import numpy as np

from reflexlab.robot import SafetyLimits

StaleMode = Literal["hold", "damp"]


class SafetyFilter:
    """Filters joint-position targets at a fixed control rate.

    Args:
        limits: joint limits and maximum target rate.
        rate_hz: the rate at which `__call__` is invoked (one call per control period).
        stale_after_periods: state older than this many periods counts as stale.
        stale_mode: what to command while the state is stale or the policy output is unusable.
        stale_after_s: the staleness threshold in seconds, when the state arrives at another rate
            than ``rate_hz`` (a policy node steps at its control rate, targets change at the policy's).
    """

    def __init__(
        self,
        limits: SafetyLimits,
        rate_hz: float,
        stale_after_periods: float = 3.0,
        stale_mode: StaleMode = "hold",
        stale_after_s: float | None = None,
    ) -> None:
        if stale_mode not in ("hold", "damp"):
            raise ValueError(f"stale_mode must be 'hold' or 'damp', got {stale_mode!r}")
        self.limits = limits
        self.lower = np.asarray(limits.lower, dtype=np.float64)
        self.upper = np.asarray(limits.upper, dtype=np.float64)
        self.max_step = limits.max_rate / rate_hz
        self.stale_after_s = stale_after_s if stale_after_s is not None else stale_after_periods / rate_hz
        self.stale_mode = stale_mode
        self.interventions: Counter[str] = Counter()
        self._last: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.limits.names)

    @property
    def last_command(self) -> np.ndarray | None:
        """The last command this filter let through (None before `reset`)."""
        return None if self._last is None else self._last.copy()

    def reset(self, measured_pos: np.ndarray) -> None:
        """Start from the robot's measured position (clipped into the limits)."""
        pos = np.asarray(measured_pos, dtype=np.float64)
        if pos.shape != (self.size,) or not np.isfinite(pos).all():
            raise ValueError(f"safety filter reset needs {self.size} finite joint positions, got {pos!r}")
        self._last = np.clip(pos, self.lower, self.upper)

    def __call__(
        self, target: np.ndarray | None, state_age_s: float, measured_pos: np.ndarray | None = None
    ) -> np.ndarray:
        """The command to send this period. ``target`` is the policy's joint-position target."""
        if not state_age_s <= self.stale_after_s:  # also catches a NaN age
            return self.hold(measured_pos, "stale_state")
        if self._last is None:
            raise RuntimeError("SafetyFilter.reset(measured_pos) must be called before filtering")
        return self._limited(self._usable(target, self._fallback(measured_pos)))

    def hold(self, measured_pos: np.ndarray | None, reason: str) -> np.ndarray:
        """The stale mode's command (hold the last safe one, or damp), counted under ``reason``: for inputs other
        than the state going stale (a camera's frames, say), which the caller judges."""
        if self._last is None:
            raise RuntimeError("SafetyFilter.reset(measured_pos) must be called before filtering")
        self.interventions[reason] += 1
        return self._limited(self._fallback(measured_pos))

    def _limited(self, wanted: np.ndarray) -> np.ndarray:
        """``wanted`` clipped into the limits and stepped towards at the allowed rate; the new last command."""
        assert self._last is not None
        # np.minimum/maximum rather than np.clip/allclose: this runs at 1 kHz and they cost ~5x more.
        clipped = np.minimum(np.maximum(wanted, self.lower), self.upper)
        if (clipped != wanted).any():
            self.interventions["position_limit"] += 1
        delta = clipped - self._last
        step = np.minimum(np.maximum(delta, -self.max_step), self.max_step)
        if (np.abs(step - delta) > 1e-12).any():
            self.interventions["rate_limit"] += 1
        # The rate limit keeps us inside the limits (both ends are), but guard against rounding.
        self._last = np.minimum(np.maximum(self._last + step, self.lower), self.upper)
        return self._last.copy()

    def _fallback(self, measured_pos: np.ndarray | None) -> np.ndarray:
        assert self._last is not None
        if self.stale_mode == "damp" and measured_pos is not None:
            pos = np.asarray(measured_pos, dtype=np.float64)
            if pos.shape == (self.size,) and np.isfinite(pos).all():
                return pos
        return self._last

    def _usable(self, target: np.ndarray | None, fallback: np.ndarray) -> np.ndarray:
        if target is None:
            self.interventions["missing_target"] += 1
            return fallback
        t = np.asarray(target, dtype=np.float64)
        if t.shape != (self.size,):
            self.interventions["wrong_shape"] += 1
            return fallback
        if not np.isfinite(t).all():
            self.interventions["non_finite"] += 1
            return fallback
        return t
