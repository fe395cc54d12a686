"""SpaceMouse: recorded HID reports through pyspacemouse's own spec and report parser."""

from __future__ import annotations

import numpy as np
import pytest

from teleop.devices.base import TeleopDeviceError
from teleop.devices.config import AxisCalibration, SpaceMouseConfig
from teleop.devices.spacemouse import UDEV_RULE, SpaceMouse
from tests.teleop.hid_replay import HidReplay, load_recordings

RECORDINGS = load_recordings()


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def opened(name: str, clock: Clock | None = None, **config) -> tuple[SpaceMouse, HidReplay]:
    model, reports = RECORDINGS[name]
    hid = HidReplay(model, reports)
    mouse = SpaceMouse(SpaceMouseConfig(model=model, **config), hid=hid, clock=clock or Clock())
    mouse.open()
    return mouse, hid


def test_push_forward_reads_plus_y_in_device_axes():
    mouse, _ = opened("compact_push_forward", calibration=AxisCalibration(deadzone=0.0))
    reading = mouse.read()
    assert reading.connected and not reading.warning
    np.testing.assert_allclose(reading.twist, [0, 1, 0, 0, 0, 0], atol=1e-9)


def test_lift_right_and_ccw_twist_split_reports():
    mouse, _ = opened("compact_lift_right_and_twist_ccw", calibration=AxisCalibration(deadzone=0.0))
    np.testing.assert_allclose(mouse.read().twist, [0.5, 0, 1, 0, 0, 200 / 350], atol=1e-9)


def test_single_13_byte_report_layout():
    mouse, _ = opened("wireless_push_forward_and_twist_ccw", calibration=AxisCalibration(deadzone=0.0))
    np.testing.assert_allclose(mouse.read().twist, [0, 1, 0, 0, 0, 200 / 350], atol=1e-9)


def test_buttons_map_to_logical_names():
    mouse, hid = opened("compact_buttons", buttons={"deadman": "LEFT", "toggle": "RIGHT"})
    _, reports = RECORDINGS["compact_buttons"]
    hid.queue = []
    seen = []
    for report in reports:
        hid.feed([report])
        r = mouse.read()
        seen.append((r.pressed("deadman"), r.pressed("toggle")))
    assert seen == [(True, False), (True, True), (False, True)]


def test_unknown_button_name_is_an_error_naming_the_buttons():
    with pytest.raises(TeleopDeviceError, match=r"buttons: SpaceMouseCompact has no button\(s\) \['BTN_1'\]"):
        opened("compact_buttons", buttons={"deadman": "BTN_1"})


def test_deadzone_and_calibration_sign_scale():
    mouse, _ = opened("compact_small_noise")
    np.testing.assert_array_equal(mouse.read().twist, np.zeros(6))
    cal = AxisCalibration(deadzone=0.0, scale=(1, 0.5, 1, 1, 1, 1), sign=(1, 1, -1, 1, 1, 1))
    mouse, _ = opened("compact_lift_right_and_twist_ccw", calibration=cal)
    np.testing.assert_allclose(mouse.read().twist[:3], [0.5, 0, -1], atol=1e-9)
    mouse, _ = opened("compact_push_forward", calibration=AxisCalibration(deadzone=0.5, scale=2.0))
    np.testing.assert_allclose(mouse.read().twist[1], 1.0)  # clipped to [-1, 1]


def test_backlog_is_drained_each_read():
    """One read consumes every queued report, so release shows at once (not seconds later)."""
    mouse, hid = opened("compact_backlog")
    np.testing.assert_array_equal(mouse.read().twist, np.zeros(6))
    assert not hid.queue


def test_unplug_reports_disconnected_and_never_raises():
    mouse, _ = opened("compact_unplug")
    first = mouse.read()  # the push, then the failing read
    assert not first.connected
    assert "read failed" in first.reason and "Failed to read from HID device" in first.reason
    np.testing.assert_array_equal(first.twist, np.zeros(6))
    again = mouse.read()
    assert not again.connected and again.reason == first.reason
    mouse.close()
    mouse.close()


def test_open_failure_names_the_udev_rule():
    model, reports = RECORDINGS["compact_push_forward"]
    mouse = SpaceMouse(SpaceMouseConfig(model=model), hid=HidReplay(model, reports, fail_open=True))
    with pytest.raises(TeleopDeviceError) as err:
        mouse.open()
    assert UDEV_RULE in str(err.value) and 'ATTRS{idVendor}=="256f"' in UDEV_RULE
    assert not mouse.read().connected


def test_split_spec_on_single_report_device_reads_zero_and_says_why():
    mouse, _ = opened("wireless_rotation_read_as_compact")
    reading = mouse.read()
    np.testing.assert_array_equal(reading.twist, np.zeros(6))
    assert "buttons change but motion reads zero" in reading.warning
    assert "SpaceMouseWireless" in reading.warning  # the fix names a spec with the other layout


def test_single_report_spec_on_split_device_flags_undecoded_report_ids():
    mouse, _ = opened("compact_reports_read_as_wireless", calibration=AxisCalibration(deadzone=0.0))
    reading = mouse.read()
    assert reading.twist[1] == pytest.approx(1.0) and not reading.twist[3:].any()
    assert "ID(s) [2]" in reading.warning and "SpaceNavigator" in reading.warning


def test_silence_since_open_warns_with_causes():
    clock = Clock()
    config = SpaceMouseConfig(model="SpaceMouseCompact", silence_warning_s=5.0)
    mouse = SpaceMouse(config, hid=HidReplay("SpaceMouseCompact", []), clock=clock)  # never sends anything
    mouse.open()
    assert mouse.read().warning == ""
    clock.t += 6.0
    warning = mouse.read().warning
    assert "no HID report" in warning and "/dev/hidraw" in warning and UDEV_RULE in warning


def test_enumeration_without_devices_explains():
    """The real easyhid/hidapi enumeration (no SpaceMouse on this machine)."""
    with pytest.raises(TeleopDeviceError, match="no supported SpaceMouse"):
        SpaceMouse(SpaceMouseConfig()).open()
    with pytest.raises(TeleopDeviceError, match="path: no HID device at /dev/hidraw9"):
        SpaceMouse(SpaceMouseConfig(path="/dev/hidraw9")).open()


def test_unknown_model_lists_known_ones():
    with pytest.raises(TeleopDeviceError, match="SpaceMouseWireless"):
        SpaceMouse(SpaceMouseConfig(model="SpaceBall")).open()
