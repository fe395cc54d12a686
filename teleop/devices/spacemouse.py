"""3Dconnexion SpaceMouse through pyspacemouse, with the faults that make one "read zero" diagnosed.

pyspacemouse decodes raw HID reports (``SpaceMouseDevice._process``): byte 0 is the report ID and
selects which axes/buttons a report carries (the device spec's ``channel``); an axis is a
little-endian int16 at ``byte1``/``byte2`` times ``scale`` (±1) divided by ``axis_scale`` (350).
Its ``read()`` consumes at most one report per call and reads ``bytes_to_read`` bytes (the spec's
highest axis byte + 1). That is where the usual complaints come from, and what this module guards:

* **hidraw permissions**: ``hid_open_path`` fails; we say so and print the udev rule to install.
* **wrong device spec**: older devices send translation in report 1 and rotation in report 2
  (7 bytes each); newer ones (SpaceMouse Wireless/Pro Wireless/Enterprise) send all six axes in
  one 13-byte report 1. With the wrong spec either rotation never updates, or reports arrive with
  IDs nothing decodes. Both are detected from the reports actually seen and reported with the fix.
* **backlog**: one report per ``read()`` at a control rate below the device's report rate (~60–125 Hz)
  lets reports queue, so motion lags and "won't return to zero"; we drain the queue every read.
* **silence**: a device at rest sends nothing, so silence alone is not a fault, but a device that
  has sent *nothing* for ``silence_warning_s`` since open gets a warning listing the likely causes.
* **unplug**: the HID read fails (easyhid raises ``HIDException``); ``read()`` then reports
  ``connected=False`` with the reason and never raises, and pyspacemouse's own ``read()`` — which
  would quietly return the last state forever — is never called again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyspacemouse
from easyhid import HIDException
from pyspacemouse import AxisConvention, DeviceInfo, SpaceMouseDevice, SpaceMouseState

from teleop.devices.base import AXES, TeleopDeviceError, TeleopReading, disconnected, shape_axes
from teleop.devices.config import SpaceMouseConfig

log = logging.getLogger(__name__)

#: Reports drained per `read()` at most (a few control periods' worth at the device's report rate).
MAX_REPORTS_PER_READ = 64

UDEV_RULE = (
    "# /etc/udev/rules.d/99-spacemouse.rules  — 3Dconnexion (256f) and Logitech-era (046d) devices\n"
    'KERNEL=="hidraw*", ATTRS{idVendor}=="256f", MODE="0660", GROUP="plugdev", TAG+="uaccess"\n'
    'KERNEL=="hidraw*", ATTRS{idVendor}=="046d", ATTRS{idProduct}=="c62[5-9b]", MODE="0660", '
    'GROUP="plugdev", TAG+="uaccess"\n'
    "# then: sudo udevadm control --reload-rules && sudo udevadm trigger; re-plug; user in group plugdev"
)


def device_spec(model: str) -> DeviceInfo:
    """pyspacemouse's spec for ``model`` in the device-axis convention of `teleop.devices.base` (HID_Z_UP)."""
    specs = pyspacemouse.get_device_specs()
    if model not in specs:
        raise TeleopDeviceError(f"model: unknown SpaceMouse model {model!r}; pyspacemouse knows {', '.join(specs)}")
    return pyspacemouse.apply_axis_convention(specs[model], AxisConvention.HID_Z_UP)


class _ReportTap:
    """Passes the HID device through to pyspacemouse unchanged, noting each report's ID and size.

    The diagnosis needs to know which report IDs arrive; pyspacemouse only exposes the decoded state.
    """

    def __init__(self, hid: Any) -> None:
        self.hid = hid
        self.report_ids: dict[int, int] = {}

    def read(self, size: int) -> bytes:
        data = self.hid.read(size)
        if data:
            self.report_ids[data[0]] = self.report_ids.get(data[0], 0) + 1
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hid, name)


class SpaceMouse:
    """A SpaceMouse as a `TeleopDevice`.

    Args:
        config: model, path, button names, calibration.
        hid: an already-found HID device (easyhid ``HIDDevice`` or anything with its ``open``/``read``/
            ``close``/``set_nonblocking``, e.g. a replay of recorded reports); None: enumerate.
        clock: host clock for reading stamps and the silence warning.
    """

    def __init__(
        self, config: SpaceMouseConfig, hid: Any | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self._hid = hid
        self._clock = clock
        self._mouse: SpaceMouseDevice | None = None
        self._tap: _ReportTap | None = None
        self._reason = "not opened"
        self._warned: set[str] = set()

    # --- lifecycle --------------------------------------------------------------------------
    def open(self) -> None:
        if self.config.model is not None:
            device_spec(self.config.model)  # an unknown model fails before any device is touched
        hid, model = self._find()
        spec = device_spec(model)
        unknown = sorted(set(self.config.buttons.values()) - set(spec.button_names))
        if unknown:
            raise TeleopDeviceError(
                f"buttons: {model} has no button(s) {unknown}; its buttons are {list(spec.button_names) or 'none'}"
            )
        self._tap = _ReportTap(hid)
        mouse = SpaceMouseDevice(info=spec, device=self._tap)  # type: ignore[arg-type]
        try:
            mouse.open()
        except RuntimeError as e:
            raise TeleopDeviceError(self._open_failure(getattr(hid, "path", None), e)) from e
        hid.set_nonblocking(True)
        self._counts = {"reports": 0, "axis": 0, "button": 0, "button_changes": 0}
        self._moved = np.zeros(6, dtype=bool)
        self._last_buttons: list[int] = []
        mouse.configure(callback=self._on_report, dof_callback=self._on_axes, button_callback=self._on_buttons)
        self._mouse, self._model, self._opened_at, self._reason = mouse, model, self._clock(), ""
        log.info("opened %s (%s)", model, getattr(hid, "path", "?"))

    def close(self) -> None:
        if self._mouse is not None:
            with contextlib.suppress(HIDException, OSError):  # already gone: nothing left to release
                self._mouse.close()
        self._mouse = None

    # --- reading ----------------------------------------------------------------------------
    def read(self) -> TeleopReading:
        now = self._clock()
        if self._mouse is None:
            return disconnected(self._reason, now)
        try:
            for _ in range(MAX_REPORTS_PER_READ):
                before = self._counts["reports"]
                state = self._mouse.read()
                if self._counts["reports"] == before:
                    break
        except (HIDException, OSError) as e:
            self._reason = f"SpaceMouse {self._model} read failed (unplugged, or the receiver lost it): {e}"
            log.error(self._reason)
            self.close()
            return disconnected(self._reason, now)
        raw = np.array([getattr(state, axis) for axis in AXES])
        cal = self.config.calibration
        twist = shape_axes(raw, cal.deadzone, cal.scale, cal.sign)  # type: ignore[arg-type]
        names = self._mouse.info.button_names
        buttons = {name: bool(state.buttons[names.index(button)]) for name, button in self.config.buttons.items()}
        return TeleopReading(twist, buttons, now, warning=self._diagnose(now), raw=raw)

    # --- pyspacemouse callbacks (run inside its report parser) -------------------------------
    def _on_report(self, state: SpaceMouseState) -> None:
        self._counts["reports"] += 1

    def _on_axes(self, state: SpaceMouseState) -> None:
        self._counts["axis"] += 1
        self._moved |= np.array([getattr(state, axis) != 0.0 for axis in AXES])

    def _on_buttons(self, state: SpaceMouseState, buttons: list[int]) -> None:
        self._counts["button"] += 1
        if buttons != self._last_buttons:
            self._counts["button_changes"] += 1
        self._last_buttons = buttons

    # --- diagnosis --------------------------------------------------------------------------
    def _diagnose(self, now: float) -> str:
        """The likeliest reason this device reads zero, from the reports seen so far ('' if none)."""
        assert self._mouse is not None and self._tap is not None
        spec = self._mouse.info
        c = self._counts
        decoded = {s.channel for s in spec.mappings.values()} | {s.channel for s in spec.button_specs}
        stray = {rid: n for rid, n in self._tap.report_ids.items() if rid not in decoded}
        none_moved = not self._moved.any()
        half_moved = self._moved[:3].any() != self._moved[3:].any()
        warning = ""
        if sum(stray.values()) >= 5 and (none_moved or half_moved):
            warning = (
                f"SpaceMouse reports with ID(s) {sorted(stray)} arrive but the {self._model} spec decodes only "
                f"{sorted(decoded)}: wrong device model/spec (set model: in the teleop config; "
                f"{_layout_hint(spec)})"
            )
        elif c["button_changes"] >= 2 and c["axis"] >= 10 and none_moved:
            warning = (
                f"SpaceMouse buttons change but motion reads zero in all {c['axis']} axis reports: the "
                f"{self._model} spec does not match this device's report layout (set model:; {_layout_hint(spec)})"
            )
        elif c["axis"] >= self.config.spec_check_reports and half_moved:
            dead = "rotation" if self._moved[:3].any() else "translation"
            warning = (
                f"SpaceMouse {dead} has read zero in all {c['axis']} motion reports. If you did move it that way, "
                f"the {self._model} spec has the wrong report layout ({_layout_hint(spec)}); set model:"
            )
        elif c["reports"] == 0 and now - self._opened_at > self.config.silence_warning_s:
            warning = (
                f"no HID report from SpaceMouse {self._model} in {now - self._opened_at:.0f} s since open. If the "
                "cap was moved: (1) another HID interface of the device was opened — set path: to the right "
                "/dev/hidrawN (pyspacemouse.get_connected_devices_by_path() lists them); (2) a wireless device is "
                "asleep or paired to another receiver (over USB cable, some wireless models send nothing — use "
                "the receiver or Bluetooth); (3) permissions on /dev/hidraw*: install the udev rule:\n" + UDEV_RULE
            )
        if warning and warning not in self._warned:
            self._warned.add(warning)
            log.warning(warning)
        return warning

    def _find(self) -> tuple[Any, str]:
        """The HID device to open and the spec name to decode it with."""
        if self._hid is not None:
            return self._hid, self.config.model or self._model_for(self._hid)
        from easyhid import Enumeration

        devices = Enumeration().find()
        if self.config.path is not None:
            matches = [d for d in devices if os.path.realpath(d.path) == os.path.realpath(self.config.path)]
            if not matches:
                raise TeleopDeviceError(
                    f"path: no HID device at {self.config.path} (found: {[d.path for d in devices] or 'none'})"
                )
            return matches[0], self.config.model or self._model_for(matches[0])
        specs = pyspacemouse.get_device_specs()
        for d in devices:
            for name, spec in specs.items():
                if (d.vendor_id, d.product_id) == spec.hid_id and self.config.model in (None, name):
                    return d, name
        seen = [f"{d.vendor_id:04x}:{d.product_id:04x} {d.product_string}" for d in devices]
        raise TeleopDeviceError(
            f"no supported SpaceMouse{' ' + self.config.model if self.config.model else ''} found "
            f"(HID devices seen: {seen or 'none'}). If it is plugged in but absent here, hidraw is not "
            "visible (container without /dev/hidraw*?), or it is a model pyspacemouse lacks."
        )

    @staticmethod
    def _model_for(hid: Any) -> str:
        for name, spec in pyspacemouse.get_device_specs().items():
            if (hid.vendor_id, hid.product_id) == spec.hid_id:
                return name
        raise TeleopDeviceError(
            f"model: HID device {hid.vendor_id:04x}:{hid.product_id:04x} is not a SpaceMouse pyspacemouse knows; "
            "name the model whose report layout it shares"
        )

    @staticmethod
    def _open_failure(path: str | None, error: Exception) -> str:
        if path and os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
            return (
                f"cannot open SpaceMouse at {path}: permission denied (hidraw nodes are root-only by default). "
                f"Install this udev rule:\n{UDEV_RULE}"
            )
        return (
            f"cannot open SpaceMouse at {path or '?'} ({error}). Check that it is still plugged in and that no "
            f"other program holds it; if permissions are the cause, install this udev rule:\n{UDEV_RULE}"
        )


def _layout_hint(spec: DeviceInfo) -> str:
    """One line on the report layout a spec expects, so the user can pick a spec that matches."""
    channels = sorted({s.channel for s in spec.mappings.values()})
    if len(channels) == 1:
        return (
            f"this spec expects all six axes in one {spec.bytes_to_read}-byte report {channels[0]}; devices that send "
            "rotation in a separate report 2 need e.g. SpaceNavigator or SpaceMouseCompact"
        )
    return (
        f"this spec expects translation and rotation in separate reports {channels} of {spec.bytes_to_read} bytes; "
        "devices sending all six axes in one 13-byte report need e.g. SpaceMouseWireless or SpaceMouseProWireless"
    )
