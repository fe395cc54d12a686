"""Keyboard through pygame's event queue (events posted as SDL would deliver them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from teleop.config import load_teleop_config
from teleop.devices.base import TeleopDeviceError
from teleop.devices.config import KeyboardConfig

CONFIG = Path(__file__).parents[2] / "config" / "teleop" / "keyboard.yaml"


def keyboard(sdl, config: KeyboardConfig | None = None):
    from teleop.devices.keyboard import Keyboard

    device = Keyboard(config or load_teleop_config(CONFIG).device)
    device.open()
    return device


def key(sdl, kind: int, name: str) -> None:
    sdl.event.post(sdl.event.Event(kind, key=sdl.key.key_code(name), mod=0))


def test_held_keys_drive_axes_until_released(sdl):
    device = keyboard(sdl)
    key(sdl, sdl.KEYDOWN, "w")
    key(sdl, sdl.KEYDOWN, "q")
    np.testing.assert_array_equal(device.read().twist, [0, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(device.read().twist, [0, 1, 0, 0, 0, 1])  # still held
    key(sdl, sdl.KEYDOWN, "s")  # opposite keys cancel
    assert device.read().twist[1] == 0
    key(sdl, sdl.KEYUP, "w")
    key(sdl, sdl.KEYUP, "q")
    np.testing.assert_array_equal(device.read().twist, [0, -1, 0, 0, 0, 0])


def test_buttons_and_focus_loss_releases_everything(sdl):
    device = keyboard(sdl)
    key(sdl, sdl.KEYDOWN, "space")
    key(sdl, sdl.KEYDOWN, "d")
    r = device.read()
    assert r.pressed("toggle") and r.twist[0] == 1
    sdl.event.post(sdl.event.Event(sdl.WINDOWFOCUSLOST))
    r = device.read()
    assert not r.pressed("toggle") and not r.twist.any()


def test_other_events_are_left_for_others(sdl):
    device = keyboard(sdl)
    sdl.event.post(sdl.event.Event(sdl.USEREVENT, code=7))
    device.read()
    assert [e.code for e in sdl.event.get(sdl.USEREVENT)] == [7]


def test_unknown_key_name_is_an_error_naming_the_key(sdl):
    with pytest.raises(TeleopDeviceError, match=r"keys\.wq: 'wq' is not a pygame key name"):
        keyboard(sdl, KeyboardConfig(keys={"wq": "+x"}, window=False))
