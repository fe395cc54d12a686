"""The devices' configs: what each device kind reads from the ``device:`` section of a teleop YAML file.

They live beside the devices (which import them) and not in `teleop.config` (which loads a whole
set-up and opens the device it names), so that imports run one way only: ``teleop.config`` →
``teleop.devices``. They are apart from the device modules because those import pygame or
pyspacemouse at import time, and reading a config must not load hardware libraries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from teleop.devices.base import AXES, SignedAxis, parse_signed_axis


@dataclass(frozen=True)
class AxisCalibration:
    """Per-axis shaping of raw device values (order: x, y, z, roll, pitch, yaw).

    A scalar applies to all six axes. ``scale`` maps the device's real full deflection onto 1
    (measure it with ``teleop.calibrate``); ``sign`` flips axes.
    """

    deadzone: float | tuple[float, ...] = 0.05
    scale: float | tuple[float, ...] = 1.0
    sign: float | tuple[float, ...] = 1.0

    def __post_init__(self) -> None:
        for name in ("deadzone", "scale", "sign"):
            value = getattr(self, name)
            per_axis = (float(value),) * 6 if isinstance(value, (int, float)) else tuple(map(float, value))
            if len(per_axis) != 6:
                raise ValueError(f"{name}: needs one value or six (x, y, z, roll, pitch, yaw), got {len(per_axis)}")
            object.__setattr__(self, name, per_axis)
        if not all(0.0 <= d < 1.0 for d in self.deadzone):  # type: ignore[union-attr]
            raise ValueError(f"deadzone: each value must be in [0, 1), got {self.deadzone}")


@dataclass(frozen=True)
class SpaceMouseConfig:
    """A 3Dconnexion device read through pyspacemouse.

    Args:
        model: pyspacemouse device-spec name (``SpaceMouseWireless``, …); None: pick by USB VID/PID.
            Naming it matters: a spec of the wrong report layout is the classic "rotations read zero".
        path: ``/dev/hidrawN`` to open; None: the first HID interface of the model.
        buttons: logical name (``deadman``, ``toggle``, …) → pyspacemouse button name (``LEFT``, ``BTN_1``).
        silence_warning_s: warn (with likely causes) after this long open without a single HID report.
        spec_check_reports: after this many motion reports, rotation/translation that never moved is
            reported as a device-spec mismatch.
    """

    kind: Literal["spacemouse"] = "spacemouse"
    model: str | None = None
    path: str | None = None
    buttons: dict[str, str] = field(default_factory=dict)
    calibration: AxisCalibration = field(default_factory=AxisCalibration)
    silence_warning_s: float = 10.0
    spec_check_reports: int = 200


@dataclass(frozen=True)
class AxisSource:
    """One gamepad input feeding a twist axis: exactly one of ``axis``/``trigger``/``hat``/``button``.

    ``trigger`` is an analogue trigger, which SDL reports as an axis resting at -1: it is mapped to
    [0, 1] (released = 0). ``hat_axis`` picks the hat's x (right +) or y (up +) component.
    """

    axis: int | None = None
    trigger: int | None = None
    hat: int | None = None
    hat_axis: Literal["x", "y"] = "x"
    button: int | None = None
    sign: float = 1.0

    def __post_init__(self) -> None:
        chosen = [k for k in ("axis", "trigger", "hat", "button") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(f"name exactly one of axis, trigger, hat, button (got {chosen or 'none'})")


@dataclass(frozen=True)
class GamepadConfig:
    """A game controller through pygame's joystick API (SDL).

    Args:
        index: which joystick when ``name_contains`` is None.
        name_contains: pick the first joystick whose name contains this (case-insensitive).
        twist: device twist axis (``x`` … ``yaw``) → inputs summed into it.
        buttons: logical name → SDL button index.
        calibration: applied after the sources are summed.
    """

    kind: Literal["gamepad"] = "gamepad"
    index: int = 0
    name_contains: str | None = None
    twist: dict[str, tuple[AxisSource, ...]] = field(default_factory=dict)
    buttons: dict[str, int] = field(default_factory=dict)
    calibration: AxisCalibration = field(default_factory=lambda: AxisCalibration(deadzone=0.1))

    def __post_init__(self) -> None:
        for name in self.twist:
            if name not in AXES:
                raise ValueError(f"twist.{name}: not an axis; use one of {', '.join(AXES)}")


@dataclass(frozen=True)
class KeyboardConfig:
    """Keys held down → full-scale motion on an axis (pygame key names: ``w``, ``up``, ``left shift``).

    Args:
        keys: key name → signed axis (``+y``, ``-yaw``).
        buttons: logical name → key name.
        window: open a small pygame window; SDL delivers key events only to a focused window.
    """

    kind: Literal["keyboard"] = "keyboard"
    keys: dict[str, SignedAxis] = field(default_factory=dict)
    buttons: dict[str, str] = field(default_factory=dict)
    window: bool = True

    def __post_init__(self) -> None:
        for key, axis in self.keys.items():
            try:
                parse_signed_axis(axis)
            except ValueError as e:
                raise ValueError(f"keys.{key}: {e}") from None


#: One device's config; its ``kind`` field says which (the strict loader picks the class by it).
DeviceConfig = SpaceMouseConfig | GamepadConfig | KeyboardConfig
