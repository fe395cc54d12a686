"""Plays recorded SpaceMouse HID reports at the hidapi boundary, for pyspacemouse's real parser.

`HidReplay` stands where easyhid's ``HIDDevice`` (a hidapi handle on /dev/hidrawN) stands and
keeps its observable behaviour: ``read(size)`` returns the next report cut to ``size`` bytes (as
hidraw does) in a zero-filled buffer of ``size`` bytes (as easyhid does), an empty bytearray when
nothing is queued (non-blocking), and raises ``HIDException`` once the device is unplugged.
Everything above it — pyspacemouse's ``SpaceMouseDevice``, device specs and report parser — is the
installed library.
"""

from __future__ import annotations

from pathlib import Path

import pyspacemouse
from easyhid import HIDException

DATA = Path(__file__).parent / "data" / "spacemouse_reports.txt"
UNPLUG = "unplug"


def load_recordings(path: Path = DATA) -> dict[str, tuple[str, list[bytes | str]]]:
    """Section name → (pyspacemouse model, reports); see the data file's header for the format."""
    out: dict[str, tuple[str, list[bytes | str]]] = {}
    name = ""
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            name = line.strip("[]")
            out[name] = ("", [])
        elif line.startswith("model:"):
            out[name] = (line.split(":", 1)[1].strip(), out[name][1])
        else:
            out[name][1].append(UNPLUG if line == UNPLUG else bytes.fromhex(line))
    return out


class HidReplay:
    """A recorded SpaceMouse on the HID side of pyspacemouse (see module doc)."""

    def __init__(self, model: str, reports: list[bytes | str], fail_open: bool = False) -> None:
        spec = pyspacemouse.get_device_specs()[model]
        self.vendor_id, self.product_id = spec.vendor_id, spec.product_id
        self.path = "/dev/hidraw-replay"
        self.product_string, self.manufacturer_string = model, "3Dconnexion"
        self.serial_number, self.release_number = "", 0x0110
        self.queue = list(reports)
        self.fail_open = fail_open
        self.is_open = self.unplugged = False

    def feed(self, reports: list[bytes | str]) -> None:
        self.queue.extend(reports)

    def open(self) -> None:
        if self.fail_open:
            raise HIDException("Failed to open device")  # what easyhid raises when hid_open_path fails
        self.is_open = True

    def set_nonblocking(self, enable: bool) -> None:
        assert self.is_open

    def read(self, size: int = 64) -> bytearray:
        if not self.is_open:
            raise HIDException("HIDDevice not open")
        if self.unplugged or (self.queue and self.queue[0] == UNPLUG):
            self.unplugged = True
            raise HIDException("Failed to read from HID device: -1")
        if not self.queue:
            return bytearray()
        report = self.queue.pop(0)
        assert isinstance(report, bytes)
        return bytearray(report[:size].ljust(size, b"\0"))

    def close(self) -> None:
        self.is_open = False
