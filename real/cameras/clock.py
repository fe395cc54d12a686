"""Device clock → host clock: a minimum-latency estimate of the offset between the two.

Why: a RealSense hardware timestamp is the camera's own clock (ms since it booted), taken near
the middle of the exposure; a policy needs the frame's time on the host/ROS clock to know how old
the image is. Each frame gives one sample ``host_arrival − device_time`` = offset + transport
latency. Latency is never negative and only sometimes near its minimum (USB scheduling, the
driver, Python's GIL add delay, never subtract it), so the smallest sample over a recent window
is the best estimate of the offset; taking a window, not all history, follows slow drift between
the two crystals. The mapped stamp is therefore ``device_time + min(samples)``, which is never
later than the frame's arrival.

A device timestamp that is not after the previous one is a clock glitch (or a camera reset): that
frame is refused, so the stamps handed out stay strictly increasing. When such frames keep coming
the camera's clock has restarted, and the mapping starts over.
"""

from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass(frozen=True)
class ClockMapping:
    """What ``ClockMapper.map`` returns for one frame."""

    host_ns: int  # the frame's time on the host clock (0 when refused)
    accepted: bool  # False: the device time went backwards; drop the frame
    reset: bool = False  # True: the mapping restarted (the device clock jumped back and stayed)


class ClockMapper:
    """Maps device timestamps (ms) to host nanoseconds; see the module docstring."""

    def __init__(self, window_s: float = 2.0, resync_after: int = 3, fixed_offset_ns: int | None = None) -> None:
        """``window_s`` of device time is searched for the least latency; ``resync_after`` refused
        frames in a row mean the device clock restarted; ``fixed_offset_ns`` skips the estimate
        (timestamps librealsense already put on the host clock: offset 0)."""
        self.window_s = window_s
        self.resync_after = resync_after
        self.fixed_offset_ns = fixed_offset_ns
        # (device_ms, host − device in ns), offsets increasing front to back: a monotonic deque
        # whose front is the minimum over the window.
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self._last_device_ms: float | None = None
        self._last_host_ns = 0
        self._refused_in_row = 0

    def map(self, device_ms: float, host_arrival_ns: int) -> ClockMapping:
        reset = False
        if self._last_device_ms is not None and device_ms <= self._last_device_ms:
            self._refused_in_row += 1
            if self._refused_in_row < self.resync_after:
                return ClockMapping(0, accepted=False)
            self._samples.clear()
            self._last_host_ns = 0
            reset = True
        self._refused_in_row = 0
        self._last_device_ms = device_ms
        offset = host_arrival_ns - round(device_ms * 1e6) if self.fixed_offset_ns is None else self.fixed_offset_ns
        while self._samples and self._samples[-1][1] >= offset:
            self._samples.pop()
        self._samples.append((device_ms, offset))
        while self._samples[0][0] < device_ms - self.window_s * 1e3:
            self._samples.popleft()
        host_ns = round(device_ms * 1e6) + self._samples[0][1]
        # The minimum can fall by more than a frame period (startup, after a host stall): keep the
        # stamps strictly increasing anyway, as the clock they claim to be on is.
        host_ns = max(host_ns, self._last_host_ns + 1)
        self._last_host_ns = host_ns
        return ClockMapping(host_ns, accepted=True, reset=reset)

    @property
    def offset_ns(self) -> int | None:
        """The current device→host offset estimate (host = device + offset), None before any frame."""
        return self._samples[0][1] if self._samples else None
