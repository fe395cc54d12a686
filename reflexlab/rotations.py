"""L0: rotations in numpy for the robot side (the serving path carries no torch); torch versions live with the tasks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def projected_gravity(quat_xyzw: Sequence[float]) -> np.ndarray:
    """The unit gravity direction (0, 0, -1) in the base frame of orientation ``quat`` (x, y, z, w)."""
    x, y, z, w = (float(v) for v in quat_xyzw)
    n = math.sqrt(x * x + y * y + z * z + w * w)
    x, y, z, w = x / n, y / n, z / n, w / n
    # R^T (0, 0, -1) = minus the third row of R (body -> world)
    return np.array([-2 * (x * z - w * y), -2 * (y * z + w * x), 2 * (x * x + y * y) - 1])
