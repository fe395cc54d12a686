"""Small real-time helpers of the serving loop: a token bucket that bounds the control rate and a
fixed-size latency window with percentiles.

Kept free of ROS so that they have their own tests (as diffusion_policy does with its precise
sleep and ring buffers).
"""

from __future__ import annotations

import numpy as np


class TokenBucket:
    """Allows on average ``rate_hz`` events per second with bursts of at most ``capacity``.

    The policy node steps on every fresh state, so a publisher flooding it at 10 kHz would
    otherwise make it command at 10 kHz and multiply the safety filter's per-step rate limit.
    """

    def __init__(self, rate_hz: float, capacity: float = 2.0) -> None:
        if not rate_hz > 0 or not capacity >= 1:
            raise ValueError(f"token bucket needs rate_hz > 0 and capacity >= 1, got {rate_hz}, {capacity}")
        self.rate = rate_hz
        self.capacity = capacity
        self.tokens = capacity
        self.t: float | None = None

    def take(self, t: float) -> bool:
        """Spend a token at time ``t`` (s) if one is available."""
        if self.t is not None:
            self.tokens = min(self.capacity, self.tokens + (t - self.t) * self.rate)
        self.t = t
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class LatencyWindow:
    """The last ``size`` samples, for percentiles over a recent window at O(1) cost per sample."""

    def __init__(self, size: int) -> None:
        self.buf = np.zeros(max(1, size))
        self.n = 0

    def clear(self) -> None:
        """Forget every sample (e.g. the warm-up's)."""
        self.n = 0

    def add(self, value: float) -> None:
        self.buf[self.n % len(self.buf)] = value
        self.n += 1

    def values(self) -> np.ndarray:
        return self.buf[: min(self.n, len(self.buf))]

    def percentiles(self, qs: tuple[float, ...] = (50, 99, 99.9)) -> list[float]:
        v = self.values()
        return [float("nan")] * len(qs) if v.size == 0 else [float(x) for x in np.percentile(v, qs)]
