"""Typed teleop configs, loaded from YAML (``config/teleop/*.yaml``), and the device factory.

One file describes one operator set-up: which device, how its buttons are named, how it is
calibrated, which frame its motion is meant in and how the arbiter hands control back and forth.
Loading is strict: an unknown or mistyped key is an error that names the key (``device.buttons.dedman``),
because a silently ignored key in a teleop config is a robot that moves the wrong way.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from teleop.devices.base import AXES, TeleopDevice

#: A device's twist axes as ``+x``/``-yaw`` strings (the sign says which way the input drives it).
SignedAxis = str


def parse_signed_axis(text: SignedAxis) -> tuple[int, float]:
    """``"-yaw"`` → (index of yaw, -1.0); a bare name is positive."""
    sign = -1.0 if text.startswith("-") else 1.0
    name = text.lstrip("+-")
    if name not in AXES:
        raise ValueError(f"{text!r} is not a signed axis; use +/- and one of {', '.join(AXES)}")
    return AXES.index(name), sign


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


DeviceConfig = SpaceMouseConfig | GamepadConfig | KeyboardConfig
_DEVICE_KINDS: dict[str, type] = {"spacemouse": SpaceMouseConfig, "gamepad": GamepadConfig, "keyboard": KeyboardConfig}


@dataclass(frozen=True)
class FrameConfig:
    """How a device twist becomes a robot command (see `teleop.frames`).

    Args:
        mode: ``twist`` (an end-effector twist in the robot base frame) or ``joint_delta``.
        command_frame: the frame the operator's motion is meant in: ``base`` or ``tool`` (the end
            effector's own axes, rotated into base with its current orientation).
        operator: where the operator stands, as a preset (``facing_robot``, ``behind_robot``,
            ``left_of_robot``, ``right_of_robot``), or None to use ``device_rotation_rpy_deg``.
        device_rotation_rpy_deg: fixed device→command-frame rotation, extrinsic x-y-z (roll, pitch, yaw).
        max_linear_speed: m/s at full deflection (the norm is also limited to it).
        max_angular_speed: rad/s at full deflection (likewise).
        joint_axes: ``joint_delta``: per joint, the signed device axis driving it ('' for none).
        max_joint_speed: ``joint_delta``: rad/s (or m/s) per joint at full deflection.
    """

    mode: Literal["twist", "joint_delta"] = "twist"
    command_frame: Literal["base", "tool"] = "base"
    operator: str | None = "facing_robot"
    device_rotation_rpy_deg: tuple[float, float, float] | None = None
    max_linear_speed: float = 0.1
    max_angular_speed: float = 0.5
    joint_axes: tuple[SignedAxis, ...] = ()
    max_joint_speed: float = 0.5

    def __post_init__(self) -> None:
        if (self.operator is None) == (self.device_rotation_rpy_deg is None):
            raise ValueError("operator: set either operator (a preset) or device_rotation_rpy_deg, not both/neither")
        for i, axis in enumerate(self.joint_axes):
            if axis:
                try:
                    parse_signed_axis(axis)
                except ValueError as e:
                    raise ValueError(f"joint_axes[{i}]: {e}") from None
        if self.mode == "joint_delta" and not self.joint_axes:
            raise ValueError("joint_axes: joint_delta mode needs one signed axis per joint")


@dataclass(frozen=True)
class ArbiterConfig:
    """Who commands the robot (see `teleop.arbiter`).

    Args:
        engage: ``deadman`` (teleop while held), ``toggle`` (each press flips), ``motion`` (any
            input above ``motion_threshold`` takes over, as in HIL-SERL).
        deadman_button / toggle_button: logical button names in the device config.
        motion_threshold: ``motion``: largest |axis| that counts as the person acting.
        motion_release_steps: ``motion``: idle steps before control goes back.
        handback_steps: steps over which the action blends from the last teleop action to the policy's.
        hold_on_disconnect_under_policy: hold the robot when the device drops while the policy drives
            (default: the policy continues and each step records that nobody can intervene).
    """

    engage: Literal["deadman", "toggle", "motion"] = "deadman"
    deadman_button: str = "deadman"
    toggle_button: str = "toggle"
    motion_threshold: float = 0.1
    motion_release_steps: int = 10
    handback_steps: int = 10
    hold_on_disconnect_under_policy: bool = False


@dataclass(frozen=True)
class TeleopConfig:
    """One operator set-up: device, frame mapping, arbitration."""

    device: DeviceConfig
    frame: FrameConfig = field(default_factory=FrameConfig)
    arbiter: ArbiterConfig = field(default_factory=ArbiterConfig)


def load_teleop_config(path: str | Path) -> TeleopConfig:
    """Read a teleop YAML file; errors name the file and the offending key."""
    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    try:
        return teleop_config_from_dict(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def teleop_config_from_dict(data: dict[str, Any]) -> TeleopConfig:
    """Build a `TeleopConfig` from plain data (``device.kind`` selects the device class)."""
    if not isinstance(data, dict) or "device" not in data:
        raise ValueError("device: missing (a mapping with kind: spacemouse | gamepad | keyboard)")
    device = data["device"]
    kind = device.get("kind") if isinstance(device, dict) else None
    if kind not in _DEVICE_KINDS:
        raise ValueError(f"device.kind: {kind!r} is not one of {', '.join(_DEVICE_KINDS)}")
    return TeleopConfig(
        device=_build(_DEVICE_KINDS[kind], device, "device"),
        frame=_build(FrameConfig, data.get("frame") or {}, "frame"),
        arbiter=_build(ArbiterConfig, data.get("arbiter") or {}, "arbiter"),
    )


def make_device(config: TeleopConfig | DeviceConfig) -> TeleopDevice:
    """The device a config names (not yet opened). Imports pygame/pyspacemouse only when needed."""
    device = config.device if isinstance(config, TeleopConfig) else config
    if isinstance(device, SpaceMouseConfig):
        from teleop.devices.spacemouse import SpaceMouse

        return SpaceMouse(device)
    if isinstance(device, GamepadConfig):
        from teleop.devices.gamepad import Gamepad

        return Gamepad(device)
    if isinstance(device, KeyboardConfig):
        from teleop.devices.keyboard import Keyboard

        return Keyboard(device)
    raise TypeError(f"not a teleop device config: {type(device).__name__}")


# --- strict YAML → dataclass ------------------------------------------------------------------
def _build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise ValueError(f"{where}.{key}: unknown key; valid keys: {', '.join(names)}")
        kwargs[key] = _convert(hints[key], value, f"{where}.{key}")
    try:
        return cls(**kwargs)
    except ValueError as e:
        raise ValueError(f"{where}.{e}" if ":" in str(e).split()[0] else f"{where}: {e}") from None


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, where)
            except ValueError as e:
                errors.append(str(e))
        raise ValueError(errors[-1] if len(errors) == 1 else f"{where}: {value!r} matches none of {hint}")
    if origin is Literal:
        if value not in args:
            raise ValueError(f"{where}: {value!r} is not one of {', '.join(map(str, args))}")
        return value
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        items = args[:1] * len(value) if args[-1:] == (Ellipsis,) else args
        if len(items) != len(value):
            raise ValueError(f"{where}: expected {len(items)} values, got {len(value)}")
        return tuple(_convert(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(items, value, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        return {str(k): _convert(args[1], v, f"{where}.{k}") for k, v in value.items()}
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint in (int, str, bool) and type(value) is hint:
        return value
    raise ValueError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {value!r}")
