"""The ring buffer: newest first, bounded, consistent under a concurrent writer."""

from __future__ import annotations

import threading

import pytest

from real.cameras.ring import RingBuffer


def test_empty_ring_has_nothing() -> None:
    ring: RingBuffer[int] = RingBuffer(3)
    assert ring.latest() is None
    assert ring.newest() == []
    assert len(ring) == 0


def test_newest_first_and_overwrites_oldest() -> None:
    ring: RingBuffer[int] = RingBuffer(3)
    for i in range(5):
        ring.push(i)
    assert ring.latest() == 4
    assert ring.newest() == [4, 3, 2]
    assert ring.newest(2) == [4, 3]
    assert ring.newest(10) == [4, 3, 2]
    assert ring.newest(0) == []
    assert len(ring) == 3
    assert ring.pushed == 5


def test_partially_filled() -> None:
    ring: RingBuffer[str] = RingBuffer(4)
    ring.push("a")
    ring.push("b")
    assert ring.newest() == ["b", "a"]


def test_rejects_zero_capacity() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RingBuffer(0)


def test_readers_see_consecutive_newest_first_while_a_writer_pushes() -> None:
    """Every snapshot is a run of consecutive items, newest first; latest() never goes back in time."""
    ring: RingBuffer[int] = RingBuffer(8)
    n = 20_000
    done = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        for i in range(n):
            ring.push(i)
        done.set()

    def reader() -> None:
        last = -1
        while not done.is_set():
            snap = ring.newest()
            if snap and snap != list(range(snap[0], snap[0] - len(snap), -1)):
                errors.append(f"not consecutive: {snap}")
            newest = ring.latest()
            if newest is not None:
                if newest < last:
                    errors.append(f"latest went back from {last} to {newest}")
                last = newest

    threads = [threading.Thread(target=writer), *(threading.Thread(target=reader) for _ in range(3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert ring.latest() == n - 1
    assert ring.newest() == list(range(n - 1, n - 9, -1))
