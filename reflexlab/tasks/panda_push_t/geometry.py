"""The T block's geometry in its own (centre-of-mass) frame: coverage, boundary and normals.

Coverage is the benchmark's score, area(goal ∩ block) / area(goal). Two rotated rectangles per T
make an exact polygon clipping possible, but a fixed grid of points inside the goal T (1 mm
spacing, ~6,300 points) is exact to 0.1 % and vectorises over a batch of poses: a point counts
when it lies inside the block's bar or stem.
"""

from __future__ import annotations

import numpy as np

from reflexlab.tasks.panda_push_t import constants as C

# (centre x, centre y, half x, half y) of the bar and the stem in the block frame.
RECTS = np.array(
    [
        (*C.BAR_CENTER, C.BAR_SIZE[0] / 2, C.BAR_SIZE[1] / 2),
        (*C.STEM_CENTER, C.STEM_SIZE[0] / 2, C.STEM_SIZE[1] / 2),
    ]
)
AREA = C.BAR_SIZE[0] * C.BAR_SIZE[1] + C.STEM_SIZE[0] * C.STEM_SIZE[1]


def inside(points: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """Which block-frame points (..., 2) lie inside the T grown by ``eps``."""
    p = points[..., None, :]
    d = np.abs(p - RECTS[:, :2]) <= RECTS[:, 2:] + eps
    return (d[..., 0] & d[..., 1]).any(axis=-1)


def _grid(spacing: float = 0.001) -> np.ndarray:
    lo = (RECTS[:, :2] - RECTS[:, 2:]).min(axis=0)
    hi = (RECTS[:, :2] + RECTS[:, 2:]).max(axis=0)
    xs = np.arange(lo[0] + spacing / 2, hi[0], spacing)
    ys = np.arange(lo[1] + spacing / 2, hi[1], spacing)
    pts = np.stack(np.meshgrid(xs, ys), axis=-1).reshape(-1, 2)
    return pts[inside(pts)]


GOAL_GRID = _grid()


def rotation(yaw: np.ndarray | float) -> np.ndarray:
    """2×2 rotation matrices (..., 2, 2) for yaw angles."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def to_world(pose: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Block-frame points (..., 2) to world for a pose (x, y, yaw)."""
    return points @ rotation(pose[2]).T + pose[:2]


def to_block(pose: np.ndarray, points: np.ndarray) -> np.ndarray:
    """World points (..., 2) to the frame of the block at ``pose``."""
    return (points - pose[:2]) @ rotation(pose[2])


GOAL_POSE = np.asarray(C.GOAL_POSE)


def coverage(block_pose: np.ndarray, goal_pose: np.ndarray = GOAL_POSE) -> np.ndarray:
    """area(goal ∩ block) / area(goal) for block poses (..., 3) (x, y, yaw)."""
    block_pose = np.asarray(block_pose, dtype=np.float64)
    world = to_world(goal_pose, GOAL_GRID)  # (P, 2)
    rel = world - block_pose[..., None, :2]  # (..., P, 2)
    local = np.einsum("...pj,...jk->...pk", rel, rotation(block_pose[..., 2]))
    return inside(local).mean(axis=-1)


def boundary(spacing: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Points on the T's outline (block frame) with outward unit normals, every ~``spacing`` m.

    Corners are left out (their normal is ambiguous) and so are points where bar and stem meet
    (inside the T's outline).
    """
    pts, normals = [], []
    for cx, cy, hx, hy in RECTS:
        for axis, half, other in ((0, hx, hy), (1, hy, hx)):
            n_pts = max(1, round(2 * other / spacing))
            offs = (np.arange(n_pts) + 0.5) / n_pts * 2 * other - other
            for sign in (-1.0, 1.0):
                for o in offs:
                    p = np.array([cx, cy], dtype=np.float64)
                    p[axis] += sign * half
                    p[1 - axis] += o
                    n = np.zeros(2)
                    n[axis] = sign
                    if not inside(p + n * 1e-4):  # on the outline, not at the bar-stem seam
                        pts.append(p)
                        normals.append(n)
    return np.asarray(pts), np.asarray(normals)


def radius() -> float:
    """Distance from the COM to the T's farthest corner."""
    corners = np.array([(sx, sy) for sx in (-1, 1) for sy in (-1, 1)])
    return float(max(np.linalg.norm(r[:2] + corners * r[2:], axis=1).max() for r in RECTS))
