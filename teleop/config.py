"""Typed teleop configs, loaded from YAML (``config/teleop/*.yaml``), and the device factory.

One file describes one operator set-up: which device, how its buttons are named, how it is
calibrated, which frame its motion is meant in and how the arbiter hands control back and forth.
Loading is strict (`reflexlab.config`): an unknown or mistyped key is an error that names the key
(``device.buttons.dedman``), because a silently ignored key in a teleop config is a robot that moves
the wrong way. The devices' own configs live beside them, in `teleop.devices.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from reflexlab.config import from_dict, load_yaml
from teleop.devices.base import SignedAxis, TeleopDevice, parse_signed_axis
from teleop.devices.config import DeviceConfig, GamepadConfig, KeyboardConfig, SpaceMouseConfig


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
    """Read a teleop YAML file; errors name the file and the offending dotted key."""
    return load_yaml(TeleopConfig, path, what="teleop config")


def teleop_config_from_dict(data: dict[str, Any]) -> TeleopConfig:
    """Build a `TeleopConfig` from plain data (``device.kind`` selects the device class)."""
    return from_dict(TeleopConfig, data)


def make_device(config: TeleopConfig | DeviceConfig) -> TeleopDevice:
    """The device a config names (not yet opened).

    The device modules are imported here, on first use, because they load pygame or pyspacemouse
    at import time and reading or checking a config must not. They never import this module.
    """
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
