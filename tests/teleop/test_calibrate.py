"""Calibration fitted from recorded SpaceMouse reports read through pyspacemouse."""

from __future__ import annotations

import numpy as np
import pytest

from teleop.calibrate import fit_calibration
from teleop.devices.base import shape_axes
from teleop.devices.config import AxisCalibration, SpaceMouseConfig
from teleop.devices.spacemouse import SpaceMouse
from tests.teleop.hid_replay import HidReplay, load_recordings


def raw_samples(name: str) -> np.ndarray:
    model, reports = load_recordings()[name]
    hid = HidReplay(model, [])
    mouse = SpaceMouse(SpaceMouseConfig(model=model), hid=hid)
    mouse.open()
    out = []
    for report in reports:
        hid.feed([report])
        out.append(mouse.read().raw)
    return np.array(out)


def test_fit_from_recorded_rest_and_sweep():
    rest, sweep = raw_samples("compact_calibration_rest"), raw_samples("compact_calibration_sweep")
    cal, notes = fit_calibration(rest, sweep)
    jitter_counts = np.array([7, 5, 3, 2, 0, 4])  # per axis, from the recording
    np.testing.assert_allclose(cal.deadzone, np.round(jitter_counts / 350 * 1.5, 3))
    assert cal.scale[4] == 1.0 and any(n.startswith("pitch: never moved") for n in notes)
    full = shape_axes(np.max(np.abs(sweep), axis=0), cal.deadzone, cal.scale, cal.sign)
    np.testing.assert_allclose(np.delete(full, 4), 1.0, atol=2e-3)  # every moved axis now reaches 1
    assert cal.scale[0] < 1.0 < cal.scale[3]  # x overshoots nominal, roll (Rx) falls short
    assert not shape_axes(rest, cal.deadzone, cal.scale, cal.sign).any()  # untouched reads exactly zero


def test_fit_keeps_sign():
    rest, sweep = np.zeros((3, 6)), np.full((3, 6), 0.9)
    cal, _ = fit_calibration(rest, sweep, sign=(1, -1, 1, 1, 1, 1))
    assert cal.sign[1] == -1.0 and cal.scale[0] == pytest.approx(1 / 0.9, abs=1e-3)
    assert isinstance(cal, AxisCalibration)
