"""The VESC protocol (real/car/vesc.py) against reference frames and through a serial port to a synthetic VESC."""

from __future__ import annotations

import binascii
import struct
import time

import pytest

from real.car import vesc


def test_packets_are_the_firmwares_frames() -> None:
    # COMM_ALIVE as VESC tools show it on the wire: 02 01 1e f3 ff 03 (CRC-16/XMODEM of 0x1e is 0xf3ff).
    assert vesc.alive() == bytes.fromhex("02011ef3ff03")
    rpm = vesc.set_rpm(-1000)
    assert rpm[:3] == bytes((0x02, 5, vesc.COMM_SET_RPM)) and struct.unpack(">i", rpm[3:7])[0] == -1000
    assert rpm[7:9] == struct.pack(">H", binascii.crc_hqx(rpm[2:7], 0)) and rpm[-1] == 0x03
    assert vesc.set_servo(0.5304)[3:5] == struct.pack(">h", 530)
    assert struct.unpack(">i", vesc.brake(10.0)[3:7])[0] == 10000  # mA
    long = vesc.pack(bytes(300))
    assert long[:3] == bytes((0x03, 0x01, 0x2C)) and len(long) == 3 + 300 + 3
    with pytest.raises(ValueError, match="outside"):
        vesc.set_servo(1.2)


def test_the_unpacker_skips_noise_and_corrupt_packets() -> None:
    u = vesc.Unpacker()
    bad_crc = bytearray(vesc.set_rpm(7))
    bad_crc[-2] ^= 0xFF
    stream = b"\x00\xff\x13" + vesc.set_rpm(5) + bytes(bad_crc) + vesc.alive() + vesc.pack(bytes(300))
    payloads = []
    for i in range(0, len(stream), 7):  # arriving in pieces, as a serial port delivers them
        payloads += u.feed(stream[i : i + 7])
    assert [p[0] for p in payloads] == [vesc.COMM_SET_RPM, vesc.COMM_ALIVE, 0]
    assert struct.unpack(">i", payloads[0][1:])[0] == 5 and u.corrupt >= 2


def test_telemetry_round_trips_and_a_short_reply_is_named() -> None:
    values = vesc.VescValues(rpm=-2345.0, tachometer=99, v_in=11.7, avg_motor_current=3.25, fault=0)
    assert vesc.VescValues.parse(values.payload()) == values
    with pytest.raises(ValueError, match="reply of 10 bytes, expected at least"):
        vesc.VescValues.parse(values.payload()[:11])
    with pytest.raises(ValueError, match="not a COMM_GET_VALUES reply"):
        vesc.VescValues.parse(vesc.alive()[2:3])


def test_a_synthetic_vesc_on_a_serial_port_follows_commands_and_brakes() -> None:
    device = vesc.SyntheticVesc(tau_s=0.05)
    port = vesc.Vesc(device.port)
    try:
        port.send(vesc.set_rpm(4000))
        port.send(vesc.set_servo(0.7))
        time.sleep(0.3)
        values = port.values()
        assert 3800 < values.rpm <= 4000 and values.tachometer > 0 and device.servo == pytest.approx(0.7)
        port.send(vesc.brake(10.0))
        time.sleep(0.3)
        assert abs(port.values().rpm) < 100
        assert device.log[vesc.COMM_SET_RPM] == 1 and device.log[vesc.COMM_GET_VALUES] == 2
    finally:
        port.close()
        device.close()
    silent = vesc.Vesc(vesc.SyntheticVesc().port, timeout_s=0.02)  # a device whose firmware never answers
    silent._serial.write = lambda data: len(data)  # type: ignore[method-assign]  (the request never arrives)
    with pytest.raises(TimeoutError, match="no COMM_GET_VALUES reply from the VESC on /dev/pts/"):
        silent.values()
