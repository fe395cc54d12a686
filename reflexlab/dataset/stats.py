"""Per-feature statistics (stats.json): mergeable moments, so no one re-reads the data to update them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Moments:
    """Count, mean, sum of squared deviations, min and max of one feature.

    Mergeable (Chan et al.'s parallel variance), so the writer updates all-frame stats per episode without re-reading
    the data, and the reader builds them file by file while it validates.
    """

    count: int
    mean: np.ndarray
    m2: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        v = values.astype(np.float64).reshape(len(values), -1)
        mean = v.mean(axis=0)
        return cls(len(v), mean, ((v - mean) ** 2).sum(axis=0), v.min(axis=0), v.max(axis=0))

    def merge(self, other: Moments) -> Moments:
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / n)
        return Moments(n, mean, m2, np.minimum(self.low, other.low), np.maximum(self.high, other.high))

    def to_json(self) -> dict[str, list[float]]:
        std = np.sqrt(self.m2 / self.count)
        return {
            "mean": self.mean.tolist(),
            "std": std.tolist(),
            "min": self.low.tolist(),
            "max": self.high.tolist(),
            "count": [self.count],
        }


def merge_stats(a: dict[str, Moments], b: dict[str, Moments]) -> dict[str, Moments]:
    """The moments of ``a``'s and ``b``'s frames together, for every feature of ``b``."""
    return {k: a[k].merge(m) if k in a else m for k, m in b.items()}


def stats_json(stats: dict[str, Moments]) -> dict[str, dict[str, list[float]]]:
    """The content of stats.json (and of `Dataset.stats`): per feature mean, std, min, max and count, as lists."""
    return {k: m.to_json() for k, m in stats.items()}
