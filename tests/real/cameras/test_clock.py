"""Device→host clock mapping: least-latency offset, strictly increasing stamps, refused glitches."""

from __future__ import annotations

import numpy as np

from real.cameras.clock import ClockMapper

MS = 1_000_000  # ns
OFFSET = 1_700_000_000 * 10**9  # host = device + OFFSET when the latency is zero


def test_offset_is_the_least_latency_seen() -> None:
    rng = np.random.default_rng(0)
    mapper = ClockMapper(window_s=2.0)
    latencies = 2 * MS + rng.exponential(3 * MS, 60).astype(int)
    latencies[10] = 1 * MS  # one frame got through almost at once
    stamps = []
    for i, lat in enumerate(latencies):
        device_ms = 1000.0 + i * 1000 / 30
        mapped = mapper.map(device_ms, OFFSET + round(device_ms * MS) + int(lat))
        assert mapped.accepted
        assert mapped.host_ns <= OFFSET + round(device_ms * MS) + lat  # never after the arrival
        stamps.append(mapped.host_ns)
    assert mapper.offset_ns == OFFSET + 1 * MS
    assert np.all(np.diff(stamps) > 0)


def test_window_follows_a_slowly_rising_offset() -> None:
    """A sample older than the window no longer holds the estimate down (clock drift)."""
    mapper = ClockMapper(window_s=1.0)
    mapper.map(0.0, OFFSET)  # zero latency once
    for i in range(1, 40):  # then 5 ms for 1.3 s
        mapper.map(i * 33.3, OFFSET + round(i * 33.3 * MS) + 5 * MS)
    assert mapper.offset_ns == OFFSET + 5 * MS


def test_backwards_timestamp_is_refused_and_stamps_stay_increasing() -> None:
    mapper = ClockMapper()
    first = mapper.map(100.0, OFFSET + 100 * MS)
    glitch = mapper.map(90.0, OFFSET + 134 * MS)
    repeat = mapper.map(100.0, OFFSET + 135 * MS)
    after = mapper.map(133.3, OFFSET + 134 * MS)
    assert first.accepted and after.accepted
    assert not glitch.accepted and not repeat.accepted
    assert after.host_ns > first.host_ns
    assert not after.reset


def test_clock_restart_resyncs_after_repeated_refusals() -> None:
    mapper = ClockMapper(resync_after=3)
    for i in range(10):
        mapper.map(5000.0 + i * 33.3, OFFSET + round((5000 + i * 33.3) * MS))
    results = [mapper.map(10.0 + i * 33.3, OFFSET + round((5333 + i * 33.3) * MS)) for i in range(4)]
    assert [r.accepted for r in results] == [False, False, True, True]
    assert results[2].reset
    assert results[3].host_ns > results[2].host_ns


def test_fixed_offset_keeps_host_domain_stamps() -> None:
    mapper = ClockMapper(fixed_offset_ns=0)
    mapped = mapper.map(1_700_000_000_000.5, 1_700_000_000_010 * MS)
    assert mapped.host_ns == round(1_700_000_000_000.5 * MS)
