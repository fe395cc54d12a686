"""Per-feature statistics (stats.json): mergeable moments, so no one re-reads the data to update them.

Cameras get LeRobot's image statistics: per channel, over pixels, in [0, 1], shaped (3, 1, 1), ``count`` in frames.
LeRobot estimates them from up to a few hundred sampled frames; the writer folds in every frame it encodes, each
subsampled to at most `IMAGE_STATS_PIXELS` pixels.

Quantiles (``q01`` … ``q99``, LeRobot's `QUANTILES`, which its quantile normalisation reads) cannot be merged exactly
without the data; as LeRobot does, each part's quantiles (an episode's, a frame's pixels') are merged by their
count-weighted mean. Mean, std, min and max merge exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

IMAGE_STATS_PIXELS = 20_000  # per frame: a 640x480 frame is read every 4th row and column
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)  # LeRobot's DEFAULT_QUANTILES, stored as q01, q10, q50, q90, q99
_QUANTILE_KEYS = tuple(f"q{round(q * 100):02d}" for q in QUANTILES)


@dataclass(frozen=True)
class Moments:
    """Count, mean, sum of squared deviations, min, max and `QUANTILES` (one row each) of one feature.

    Mergeable (Chan et al.'s parallel variance), so the writer updates all-frame stats per episode without re-reading
    the data, and the reader builds them episode by episode while it validates.
    """

    count: int
    mean: np.ndarray
    m2: np.ndarray
    low: np.ndarray
    high: np.ndarray
    quantiles: np.ndarray  # (len(QUANTILES), d)

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        """The statistics of one episode's (or any part's) values, (T, …): per element over the T steps."""
        v = values.astype(np.float64).reshape(len(values), -1)
        mean = v.mean(axis=0)
        quantiles = np.quantile(v, QUANTILES, axis=0)
        return cls(len(v), mean, ((v - mean) ** 2).sum(axis=0), v.min(axis=0), v.max(axis=0), quantiles)

    @classmethod
    def of_image(cls, frame: np.ndarray) -> Moments:
        """One (H, W, 3) uint8 frame as a count of 1: its per-channel pixel mean, variance (as m2), min and max.

        Merging such frames weights each equally, which (every frame has the same pixels) gives exactly the pooled
        statistics of all their pixels, with ``count`` in frames, as LeRobot counts them.
        """
        height, width, _ = frame.shape
        stride = max(1, math.ceil(math.sqrt(height * width / IMAGE_STATS_PIXELS)))
        pixels = frame[::stride, ::stride].reshape(-1, frame.shape[2])
        # uint8: quantiles from each channel's 256-bin histogram, exact and far cheaper than sorting
        cdf = np.cumsum([np.bincount(channel, minlength=256) for channel in pixels.T], axis=1)
        ranks = np.asarray(QUANTILES) * len(pixels)  # the inverted-CDF quantile: first value reaching the rank
        quantiles = np.stack([np.searchsorted(channel, ranks) for channel in cdf], axis=1)
        as_float = pixels.astype(np.float64)
        return cls(
            1, as_float.mean(axis=0), as_float.var(axis=0), as_float.min(axis=0), as_float.max(axis=0), quantiles
        )

    @classmethod
    def from_image_json(cls, stats: dict[str, list]) -> Moments:
        """Back from `to_json` (``image=True``): a writer reopening a dataset cannot re-read every video frame."""
        scale = 255.0
        values = {k: np.asarray(v, np.float64).reshape(-1) * scale for k, v in stats.items() if k != "count"}
        count = int(np.asarray(stats["count"]).reshape(-1)[0])
        quantiles = np.stack([values.get(key, values["mean"]) for key in _QUANTILE_KEYS])  # absent: an older file
        return cls(count, values["mean"], values["std"] ** 2 * count, values["min"], values["max"], quantiles)

    def merge(self, other: Moments) -> Moments:
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / n)
        quantiles = (self.quantiles * self.count + other.quantiles * other.count) / n
        return Moments(n, mean, m2, np.minimum(self.low, other.low), np.maximum(self.high, other.high), quantiles)

    def to_json(self, *, image: bool = False) -> dict[str, list]:
        """mean, std, min, max as lists of the feature's shape and count as [n]; ``image``: the (3, 1, 1) per-channel
        form in [0, 1] (LeRobot's, which its normaliser broadcasts over (C, H, W) frames)."""
        std = np.sqrt(self.m2 / self.count)
        values = {"mean": self.mean, "std": std, "min": self.low, "max": self.high}
        values |= dict(zip(_QUANTILE_KEYS, self.quantiles, strict=True))
        if image:
            values = {k: (v / 255.0).reshape(-1, 1, 1) for k, v in values.items()}
        return {**{k: v.tolist() for k, v in values.items()}, "count": [self.count]}


def merge_stats(a: dict[str, Moments], b: dict[str, Moments]) -> dict[str, Moments]:
    """The moments of ``a``'s and ``b``'s frames together (a feature only one of them has keeps its own)."""
    return a | {k: a[k].merge(m) if k in a else m for k, m in b.items()}


def stats_json(stats: dict[str, Moments], images: Iterable[str] = ()) -> dict[str, dict[str, list]]:
    """The content of stats.json (and of `Dataset.stats`): per feature mean, std, min, max and count, as lists;
    the features named in ``images`` (cameras) in LeRobot's per-channel image form."""
    cameras = set(images)
    return {k: m.to_json(image=k in cameras) for k, m in stats.items()}
