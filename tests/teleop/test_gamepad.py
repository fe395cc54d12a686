"""Gamepad through pygame's joystick API, driven by SDL's virtual joystick (dummy video driver)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from teleop.config import load_teleop_config
from teleop.devices.base import TeleopDeviceError
from teleop.devices.config import AxisSource, GamepadConfig

CONFIG = Path(__file__).parents[2] / "config" / "teleop" / "gamepad.yaml"


@pytest.fixture
def pad(sdl):
    from tests.teleop.sdl_virtual import VirtualJoystick

    joy = VirtualJoystick()
    joy.set_axis(2, -1.0)  # an xpad's triggers rest at -1
    joy.set_axis(5, -1.0)
    yield joy


def gamepad(config: GamepadConfig | None = None):
    from teleop.devices.gamepad import Gamepad

    device = Gamepad(config or load_teleop_config(CONFIG).device)
    device.open()
    return device


def test_shipped_mapping_stick_trigger_hat_and_buttons(pad):
    device = gamepad()
    np.testing.assert_array_equal(device.read().twist, np.zeros(6))  # at rest, triggers at -1 read 0
    pad.set_axis(1, -1.0)  # left stick pushed up
    pad.set_axis(5, 1.0)  # right trigger fully in
    pad.set_hat(0, (1, 0))
    pad.set_button(4, True)  # LB: the deadman
    r = device.read()
    np.testing.assert_allclose(r.twist, [0, 1, 1, 0, 1, 0], atol=1e-4)  # get_axis: raw / 32768
    assert r.pressed("deadman") and not r.pressed("toggle") and r.connected


def test_deadzone_is_rescaled_not_a_step(pad):
    device = gamepad()
    pad.set_axis(0, 0.05)
    assert device.read().twist[0] == 0.0
    pad.set_axis(0, 0.55)
    assert device.read().twist[0] == pytest.approx(0.5, abs=1e-4)  # (0.55 - 0.1) / 0.9


def test_trigger_reading_zero_before_first_rest_counts_as_released(sdl):
    from tests.teleop.sdl_virtual import VirtualJoystick

    joy = VirtualJoystick()  # triggers at 0: as some drivers report them until first touched
    device = gamepad()
    assert device.read().twist[2] == 0.0  # not 0.5
    joy.set_axis(5, 1.0)
    assert device.read().twist[2] == 0.0  # still unknown rest: stay safe
    joy.set_axis(5, -1.0)
    device.read()
    joy.set_axis(5, 1.0)
    assert device.read().twist[2] == pytest.approx(1.0, abs=1e-4)


def test_unplug_is_disconnected_and_replug_reconnects(pad, sdl):
    from tests.teleop.sdl_virtual import VirtualJoystick

    device = gamepad()
    pad.set_axis(1, -1.0)
    assert device.read().twist[1] == pytest.approx(1.0, abs=1e-4)
    pad.unplug()
    r = device.read()
    assert not r.connected and "removed" in r.reason
    np.testing.assert_array_equal(r.twist, np.zeros(6))
    assert not device.read().connected
    again = VirtualJoystick()  # the same kind of pad plugged back in (same GUID)
    again.set_axis(2, -1.0)
    again.set_axis(5, -1.0)
    again.set_axis(0, 1.0)
    device.read()  # sees JOYDEVICEADDED
    r = device.read()
    assert r.connected and r.twist[0] == pytest.approx(1.0, abs=1e-4)


def test_missing_pad_and_bad_mapping_are_errors(sdl):
    from tests.teleop.sdl_virtual import VirtualJoystick

    with pytest.raises(TeleopDeviceError, match="index: joystick 0 not present"):
        gamepad()
    VirtualJoystick(axes=2, buttons=2, hats=0)
    cfg = GamepadConfig(twist={"z": (AxisSource(trigger=5),)})
    with pytest.raises(TeleopDeviceError, match=r"twist\.z: .* has 2 triggers, no trigger 5"):
        gamepad(cfg)
    with pytest.raises(TeleopDeviceError, match="name_contains"):
        gamepad(dataclasses.replace(cfg, twist={}, name_contains="DualSense"))
