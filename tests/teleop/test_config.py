"""Teleop YAML configs: the shipped files load, mistakes name their key, the factory picks the device."""

from __future__ import annotations

from pathlib import Path

import pytest

from teleop.config import load_teleop_config, make_device, teleop_config_from_dict
from teleop.devices.config import GamepadConfig, KeyboardConfig, SpaceMouseConfig

ROOT = Path(__file__).parents[2] / "config" / "teleop"


@pytest.mark.parametrize(
    ("name", "cls", "device"),
    [
        ("spacemouse", SpaceMouseConfig, "SpaceMouse"),
        ("gamepad", GamepadConfig, "Gamepad"),
        ("keyboard", KeyboardConfig, "Keyboard"),
    ],
)
def test_shipped_configs_load_and_make_their_device(name, cls, device):
    config = load_teleop_config(ROOT / f"{name}.yaml")
    assert isinstance(config.device, cls)
    assert type(make_device(config)).__name__ == device


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "device: missing"),
        ({"device": {"kind": "joystick"}}, "device.kind: 'joystick' is not one of"),
        ({"device": {"kind": "spacemouse", "buttons": {"deadman": 3}}}, r"device.buttons.deadman: expected str, got 3"),
        ({"device": {"kind": "spacemouse", "modle": "X"}}, "device.modle: unknown key; valid keys: kind, model"),
        (
            {"device": {"kind": "spacemouse", "calibration": {"deadzone": [0.1, 0.2]}}},
            "device.calibration.deadzone: needs",
        ),
        ({"device": {"kind": "gamepad", "twist": {"forward": []}}}, "device.twist.forward: not an axis"),
        (
            {"device": {"kind": "gamepad", "twist": {"x": [{"axis": 1, "hat": 0}]}}},
            r"device.twist.x\[0\]: name exactly one",
        ),
        ({"device": {"kind": "keyboard", "keys": {"w": "forward"}}}, "device.keys.w: 'forward' is not a signed axis"),
        (
            {"device": {"kind": "keyboard"}, "frame": {"command_frame": "world"}},
            "frame.command_frame: 'world' is not one",
        ),
        ({"device": {"kind": "keyboard"}, "arbiter": {"handback_steps": 2.5}}, "arbiter.handback_steps: expected int"),
    ],
)
def test_errors_name_the_key(data, message):
    with pytest.raises(ValueError, match=message):
        teleop_config_from_dict(data)


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("device: {kind: keyboard}\nframe: {max_linear_speed: fast}\n")
    with pytest.raises(ValueError, match=r"bad.yaml: frame.max_linear_speed: expected float, got 'fast'"):
        load_teleop_config(path)
