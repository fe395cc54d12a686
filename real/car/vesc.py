"""The VESC motor controller's serial protocol (the ESC of most 1/10 research cars: MuSHR, F1TENTH, FastRLAP's).

Why not a library: PyPI's ``pyvesc`` 1.0.5 (2017) fails to import on Python 3.11 (it imports ``PyCRC``, which its
``pycrc`` dependency does not provide) and ``pyvesc-fix`` 1.0.3 imports ``pyvesc.protocol``, which no ``pyvesc``
release has. The protocol is small, so it is here, after the VESC firmware's ``comm`` packets:

* a packet is ``0x02, length (1 byte), payload, CRC-16/XMODEM of the payload (big endian), 0x03``; payloads of
  256 bytes or more start ``0x03, length (2 bytes)`` instead. The CRC is the standard library's
  (`binascii.crc_hqx`, CRC-CCITT with initial value 0, which is XMODEM);
* a payload is a command id then big-endian fields: ``COMM_SET_RPM`` (int32 electrical RPM),
  ``COMM_SET_SERVO_POS`` (int16 position × 1000, 0–1), ``COMM_SET_CURRENT_BRAKE`` (int32 mA), ``COMM_ALIVE``;
  ``COMM_GET_VALUES`` asks for the telemetry `VescValues` parses.

`Vesc` speaks it over a serial port (pyserial); `SyntheticVesc` is a device on a pseudo-terminal that answers as
the firmware does, for tests and for running the car's driver without hardware.
"""

from __future__ import annotations

import binascii
import os
import struct
import threading
import time
from dataclasses import dataclass

COMM_GET_VALUES = 4
COMM_SET_CURRENT_BRAKE = 7
COMM_SET_RPM = 8
COMM_SET_SERVO_POS = 12
COMM_ALIVE = 30
MAX_PAYLOAD = 512  # the firmware's PACKET_MAX_PL_LEN: a longer length field is noise

# COMM_GET_VALUES' reply after its id (firmware 3.x–6.x): name, struct code, divisor.
_VALUES = (
    ("temp_fet", "h", 10),
    ("temp_motor", "h", 10),
    ("avg_motor_current", "i", 100),
    ("avg_input_current", "i", 100),
    ("avg_id", "i", 100),
    ("avg_iq", "i", 100),
    ("duty_cycle", "h", 1000),
    ("rpm", "i", 1),
    ("v_in", "h", 10),
    ("amp_hours", "i", 10000),
    ("amp_hours_charged", "i", 10000),
    ("watt_hours", "i", 10000),
    ("watt_hours_charged", "i", 10000),
    ("tachometer", "i", 1),
    ("tachometer_abs", "i", 1),
    ("fault", "b", 1),
)
_VALUES_FORMAT = ">" + "".join(code for _, code, _ in _VALUES)


def pack(payload: bytes) -> bytes:
    """One packet around ``payload``."""
    n = len(payload)
    if not 0 < n <= MAX_PAYLOAD:
        raise ValueError(f"a VESC payload is 1 to {MAX_PAYLOAD} bytes, got {n}")
    head = bytes((0x02, n)) if n < 256 else bytes((0x03,)) + struct.pack(">H", n)
    return head + payload + struct.pack(">H", binascii.crc_hqx(payload, 0)) + b"\x03"


class Unpacker:
    """Bytes from the wire in, whole payloads out; noise and packets with a bad CRC are skipped and counted.

    A packet that looks incomplete is waited for, unless a whole valid packet already starts after it: then its
    start was noise (a stray 0x02 or 0x03), and waiting would swallow the packets behind it.
    """

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.corrupt = 0

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        out = []
        while self.buffer:
            found = _packet_at(self.buffer, 0)
            if found is None:  # incomplete: wait, unless a valid packet starts later
                later = next(
                    (i for i in range(1, len(self.buffer)) if isinstance(_packet_at(self.buffer, i), tuple)), None
                )
                if later is None:
                    break
                self._drop(later)
            elif found is False:
                self._drop(1)
            else:
                payload, end = found
                out.append(payload)
                del self.buffer[:end]
        return out

    def _drop(self, n: int) -> None:
        self.corrupt += 1
        del self.buffer[:n]


def _packet_at(buffer: bytearray, i: int) -> tuple[bytes, int] | bool | None:
    """The packet starting at ``i``: (payload, end) when whole and valid, None when it could still be (incomplete),
    False when it cannot."""
    start = buffer[i]
    if start not in (0x02, 0x03):
        return False
    head = 2 if start == 0x02 else 3
    if len(buffer) < i + head:
        return None
    n = buffer[i + 1] if start == 0x02 else struct.unpack(">H", buffer[i + 1 : i + 3])[0]
    if n == 0 or n > MAX_PAYLOAD or (start == 0x03 and n < 256):
        return False
    end = i + head + n + 3
    if len(buffer) < end:
        return None
    payload = bytes(buffer[i + head : i + head + n])
    crc = struct.unpack(">H", buffer[i + head + n : i + head + n + 2])[0]
    if buffer[end - 1] != 0x03 or crc != binascii.crc_hqx(payload, 0):
        return False
    return payload, end - i


def set_rpm(erpm: int) -> bytes:
    return pack(struct.pack(">Bi", COMM_SET_RPM, int(erpm)))


def set_servo(position: float) -> bytes:
    """The servo output, 0 to 1 (0.5: centre)."""
    if not 0.0 <= position <= 1.0:
        raise ValueError(f"servo position {position} is outside [0, 1]")
    return pack(struct.pack(">Bh", COMM_SET_SERVO_POS, round(position * 1000)))


def brake(current_a: float) -> bytes:
    return pack(struct.pack(">Bi", COMM_SET_CURRENT_BRAKE, round(current_a * 1000)))


def alive() -> bytes:
    return pack(bytes((COMM_ALIVE,)))


def get_values() -> bytes:
    return pack(bytes((COMM_GET_VALUES,)))


@dataclass(frozen=True)
class VescValues:
    """The telemetry the car's driver uses from ``COMM_GET_VALUES``."""

    rpm: float  # electrical RPM (motor RPM × pole pairs)
    tachometer: int  # electrical revolutions × 6, signed
    v_in: float  # battery volts
    avg_motor_current: float  # A
    fault: int  # the firmware's fault code (0: none)

    @classmethod
    def parse(cls, payload: bytes) -> VescValues:
        if not payload or payload[0] != COMM_GET_VALUES:
            raise ValueError(f"not a COMM_GET_VALUES reply: {payload[:1].hex()}")
        size = struct.calcsize(_VALUES_FORMAT)
        if len(payload) - 1 < size:
            raise ValueError(f"COMM_GET_VALUES reply of {len(payload) - 1} bytes, expected at least {size}")
        raw = dict(zip((n for n, _, _ in _VALUES), struct.unpack(_VALUES_FORMAT, payload[1 : 1 + size]), strict=True))
        scale = {n: d for n, _, d in _VALUES}
        return cls(
            rpm=raw["rpm"] / scale["rpm"],
            tachometer=int(raw["tachometer"]),
            v_in=raw["v_in"] / scale["v_in"],
            avg_motor_current=raw["avg_motor_current"] / scale["avg_motor_current"],
            fault=int(raw["fault"]),
        )

    def payload(self) -> bytes:
        """The reply's payload as the firmware sends it (for `SyntheticVesc`)."""
        values = dict.fromkeys((n for n, _, _ in _VALUES), 0)
        values.update(
            rpm=round(self.rpm),
            tachometer=self.tachometer,
            v_in=round(self.v_in * 10),
            avg_motor_current=round(self.avg_motor_current * 100),
            fault=self.fault,
        )
        return bytes((COMM_GET_VALUES,)) + struct.pack(_VALUES_FORMAT, *values.values())


class Vesc:
    """A VESC on a serial port: commands out, telemetry on request.

    Args:
        port: the device (``/dev/ttyACM0``; a `SyntheticVesc`'s ``port``).
        timeout_s: how long `values` waits for the reply.
    """

    def __init__(self, port: str, timeout_s: float = 0.05) -> None:
        import serial

        self.port = port
        self._serial = serial.Serial(port, baudrate=115200, timeout=0.005, write_timeout=0.1)
        self._unpacker = Unpacker()
        self.timeout_s = timeout_s

    def send(self, packet: bytes) -> None:
        self._serial.write(packet)

    def values(self) -> VescValues:
        """Ask for the telemetry and wait for it; TimeoutError naming the port when none comes."""
        self._serial.write(get_values())
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            for payload in self._unpacker.feed(self._serial.read(256)):
                if payload[0] == COMM_GET_VALUES:
                    return VescValues.parse(payload)
        raise TimeoutError(f"no COMM_GET_VALUES reply from the VESC on {self.port} within {self.timeout_s * 1e3:g} ms")

    def close(self) -> None:
        self._serial.close()


class SyntheticVesc:
    """A VESC on a pseudo-terminal: it decodes every packet, runs a motor whose electrical RPM follows the RPM target
    with a first-order lag (``tau_s``; a brake current stops it), keeps the servo position, and answers
    ``COMM_GET_VALUES``. ``port`` is the device to open; ``log`` counts the commands by id."""

    def __init__(self, tau_s: float = 0.1) -> None:
        import tty

        self._master, slave = os.openpty()
        tty.setraw(slave)
        self.port = os.ttyname(slave)
        self._slave = slave
        self.tau_s = tau_s
        self.rpm = 0.0
        self.target: float | None = 0.0  # None: braking
        self.servo = 0.5
        self.tachometer = 0.0
        self.log: dict[int, int] = {}
        self._unpacker = Unpacker()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="synthetic-vesc", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import select

        last = time.monotonic()
        while not self._stop.is_set():
            ready, _, _ = select.select([self._master], [], [], 0.002)
            now = time.monotonic()
            self._spin(now - last)
            last = now
            if ready:
                try:
                    data = os.read(self._master, 4096)
                except OSError:
                    return
                for payload in self._unpacker.feed(data):
                    self._handle(payload)

    def _spin(self, dt: float) -> None:
        target = 0.0 if self.target is None else self.target
        self.rpm += (target - self.rpm) * min(1.0, dt / self.tau_s)
        self.tachometer += self.rpm / 60.0 * 6 * dt

    def _handle(self, payload: bytes) -> None:
        command = payload[0]
        self.log[command] = self.log.get(command, 0) + 1
        if command == COMM_SET_RPM:
            self.target = float(struct.unpack(">i", payload[1:5])[0])
        elif command == COMM_SET_CURRENT_BRAKE:
            self.target = None
        elif command == COMM_SET_SERVO_POS:
            self.servo = struct.unpack(">h", payload[1:3])[0] / 1000
        elif command == COMM_GET_VALUES:
            values = VescValues(self.rpm, round(self.tachometer), 12.0, 0.0, 0)
            os.write(self._master, pack(values.payload()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        os.close(self._master)
        os.close(self._slave)
