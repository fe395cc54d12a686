"""The device protocol every teleop input implements, and the shaping all of them share.

Every device reports a 6-D twist in its *own* axes, in one convention, so that `teleop.frames`
needs one rotation per set-up and not one per device: x to the operator's right, y away from the
operator, z up, and roll/pitch/yaw right-handed about those (pyspacemouse's ``HID_Z_UP``). Values
are normalised to [-1, 1]; what that means in m/s or rad/s is decided by `teleop.frames`, never here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

AXES: tuple[str, ...] = ("x", "y", "z", "roll", "pitch", "yaw")

#: A device's twist axis as ``+x``/``-yaw`` (the sign says which way the input drives it).
SignedAxis = str


def parse_signed_axis(text: SignedAxis) -> tuple[int, float]:
    """``"-yaw"`` → (index of yaw, -1.0); a bare name is positive."""
    sign = -1.0 if text.startswith("-") else 1.0
    name = text.lstrip("+-")
    if name not in AXES:
        raise ValueError(f"{text!r} is not a signed axis; use +/- and one of {', '.join(AXES)}")
    return AXES.index(name), sign


class TeleopDeviceError(RuntimeError):
    """A device could not be opened; the message says what to do about it."""


@dataclass(frozen=True)
class TeleopReading:
    """One sample of a device.

    Attributes:
        twist: (6,) x, y, z, roll, pitch, yaw in the device's axes, each in [-1, 1].
        buttons: logical button name (``deadman``, ``toggle``, …, as named in the config) → held.
        stamp: host ``time.monotonic()`` when the sample was taken (devices carry no usable clock).
        connected: False once the device is gone; the twist is then zero and must not be used.
        reason: why the device is disconnected ('' while connected).
        warning: a suspected fault while still connected (e.g. a SpaceMouse that "reads zero").
        raw: (6,) the same axes before deadzone/calibration/clipping (what `teleop.calibrate` measures).
    """

    twist: np.ndarray
    buttons: Mapping[str, bool] = field(default_factory=dict)
    stamp: float = 0.0
    connected: bool = True
    reason: str = ""
    warning: str = ""
    raw: np.ndarray | None = None

    def pressed(self, name: str) -> bool:
        """Whether logical button ``name`` is held (False when unmapped or disconnected)."""
        return self.connected and bool(self.buttons.get(name, False))


@runtime_checkable
class TeleopDevice(Protocol):
    """An input device. ``read()`` never raises in the control loop: faults become ``connected=False``."""

    def open(self) -> None:
        """Acquire the device; raises `TeleopDeviceError` with a fix when it cannot."""
        ...

    def read(self) -> TeleopReading:
        """The newest sample (non-blocking)."""
        ...

    def close(self) -> None:
        """Release the device; safe to call twice."""
        ...


def disconnected(reason: str, stamp: float) -> TeleopReading:
    """The reading of a device that is gone: zero twist, no buttons, and why."""
    return TeleopReading(np.zeros(6), {}, stamp, connected=False, reason=reason)


def shape_axes(raw: np.ndarray, deadzone: Sequence[float], scale: Sequence[float], sign: Sequence[float]) -> np.ndarray:
    """Deadzone, then per-axis calibration, then clip to [-1, 1].

    The deadzone is *rescaled* (|v| in [dz, 1] maps onto [0, 1]) so the command grows continuously
    from zero instead of jumping to ``dz`` the moment the stick leaves the dead band. ``scale``
    corrects a device whose full deflection is not 1 (SpaceMice differ per model), ``sign`` flips an
    axis mounted the other way.
    """
    raw = np.asarray(raw, dtype=np.float64)
    dz = np.asarray(deadzone, dtype=np.float64)
    mag = np.clip((np.abs(raw) - dz) / np.maximum(1.0 - dz, 1e-9), 0.0, None)
    shaped = np.sign(raw) * mag * np.asarray(scale, dtype=np.float64) * np.asarray(sign, dtype=np.float64)
    return np.clip(shaped, -1.0, 1.0)
