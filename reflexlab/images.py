"""Camera frames as a policy reads them: one resize shared by training and serving, and frame histories.

A policy with cameras (`reflexlab.spec.ImageInput`) reads uint8 RGB, channel-first, at the size it
was trained at; the camera delivers (H, W, 3) at its own resolution. Training (`policies.imitation`)
and every server (`deploy.step_actor`, the policy node) resize through `FrameResizer`, so what the
robot feeds the network is what the network was trained on, to the last grey level. The filter is
antialiased bilinear (a triangle whose support widens with the shrink factor, as PIL and
``torch.nn.functional.interpolate(..., mode="bilinear", antialias=True)`` compute it; it agrees with
torch's within one grey level, the difference being float rounding at exact halves); numpy only,
because the serving side imports no torch.
"""

from __future__ import annotations

import numpy as np


def resize_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) float32 weights of the antialiased bilinear resize along one axis; each row sums to 1.

    Output pixel i is centred at input coordinate scale (i + 0.5), scale = n_in / n_out; when shrinking, the
    triangle's support grows to ``scale`` input pixels each side, so every input pixel counts (no aliasing).
    """
    if min(n_in, n_out) < 1:
        raise ValueError(f"resize from {n_in} to {n_out} pixels: both must be >= 1")
    scale = n_in / n_out
    support = max(scale, 1.0)
    inv = 1.0 / support
    weights = np.zeros((n_out, n_in), dtype=np.float32)
    for i in range(n_out):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)  # int() truncates towards zero, as the reference does
        hi = min(int(center + support + 0.5), n_in)
        x = (np.arange(lo, hi, dtype=np.float32) - np.float32(center) + np.float32(0.5)) * np.float32(inv)
        w = np.clip(1.0 - np.abs(x), 0.0, None).astype(np.float32)
        weights[i, lo:hi] = w / w.sum()
    return weights


class FrameResizer:
    """Camera frames (H, W, 3) uint8 RGB of any size → (3, height, width) uint8, the policy's input.

    The weights of each input size are computed once and kept: a camera's size does not change
    while it streams, so a frame costs two small matrix products.
    """

    def __init__(self, height: int, width: int) -> None:
        if min(height, width) < 1:
            raise ValueError(f"frames resized to {height}x{width}: height and width must be >= 1")
        self.size = (int(height), int(width))
        self._weights: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, frame: np.ndarray) -> np.ndarray:
        """One frame, channel-first, at the policy's size (a copy, never a view of the caller's buffer)."""
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            raise ValueError(
                f"frame is {frame.dtype} {frame.shape}, expected uint8 RGB (height, width, 3), channels last"
            )
        h, w = frame.shape[:2]
        if (h, w) == self.size:
            return np.ascontiguousarray(frame.transpose(2, 0, 1))
        if (h, w) not in self._weights:
            self._weights[(h, w)] = (resize_weights(h, self.size[0]), resize_weights(w, self.size[1]).T.copy())
        rows, cols = self._weights[(h, w)]
        # Width first, then height, in float32, as the reference resize does; then round to the nearest level.
        wide = np.matmul(frame.transpose(2, 0, 1).astype(np.float32), cols)
        out = np.matmul(rows, wide)
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)
