"""A fixed-size, thread-safe ring buffer that hands out its newest items first.

Why: a camera thread writes frames at the camera's rate while a policy reads at its own; the
policy wants the newest frame (never a backlog), and a few older ones for history or debugging.
Capacity is fixed so memory stays bounded however slowly the reader runs: the oldest item is
overwritten. One lock guards a slot list; readers copy out references, never the frames.
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class RingBuffer(Generic[T]):
    """Newest-first ring of at most ``capacity`` items; ``push`` from one thread, read from any."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._slots: list[T | None] = [None] * capacity
        self._count = 0  # items ever pushed; the newest sits at (count - 1) % capacity
        self._lock = threading.Lock()

    def push(self, item: T) -> None:
        with self._lock:
            self._slots[self._count % self.capacity] = item
            self._count += 1

    def latest(self) -> T | None:
        """The newest item, or None before the first push."""
        with self._lock:
            return self._slots[(self._count - 1) % self.capacity] if self._count else None

    def newest(self, n: int | None = None) -> list[T]:
        """Up to ``n`` items (all held when None), newest first."""
        with self._lock:
            held = min(self._count, self.capacity)
            k = held if n is None else max(0, min(n, held))
            return [self._slots[(self._count - 1 - i) % self.capacity] for i in range(k)]  # type: ignore[misc]

    @property
    def pushed(self) -> int:
        """Items pushed since creation (including those overwritten)."""
        return self._count

    def __len__(self) -> int:
        return min(self._count, self.capacity)
