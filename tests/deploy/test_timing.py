"""The serving loop's real-time helpers: the token bucket bounds the rate, the window keeps the latest."""

import numpy as np
import pytest

from deploy.timing import LatencyWindow, TokenBucket


def test_token_bucket_allows_the_rate_on_average_and_a_small_burst() -> None:
    bucket = TokenBucket(rate_hz=100.0, capacity=2.0)
    # a 10 kHz flood for one second gets through at ~100 Hz (plus the initial burst)
    taken = sum(bucket.take(k * 1e-4) for k in range(10_000))
    assert 100 <= taken <= 102
    # a 100 Hz stream with jitter is never refused given the node's 10 % headroom (without it, the
    # token count is a random walk that eventually empties)
    bucket = TokenBucket(rate_hz=110.0, capacity=3.0)
    t = np.cumsum(0.01 + np.random.default_rng(0).uniform(-0.004, 0.004, 1000))
    assert all(bucket.take(float(x)) for x in t)


def test_token_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0.0)
    with pytest.raises(ValueError):
        TokenBucket(100.0, capacity=0.5)


def test_latency_window_keeps_only_the_latest_samples() -> None:
    w = LatencyWindow(100)
    assert all(np.isnan(w.percentiles()))
    for x in range(1000):
        w.add(float(x))
    assert w.values().min() == 900 and w.values().size == 100
    p50, p99, _ = w.percentiles()
    assert 940 <= p50 <= 960 and p99 >= 990
