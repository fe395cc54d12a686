"""Procedural race courses: walled closed loops, each drawn from a seed, with the geometry a driver and a reward need.

A course's centreline is a star-shaped polar curve round the origin, r(θ) = R (1 + Σ_k a_k cos(kθ + φ_k)) for a
few low harmonics k = 2…5 (ovals, beans, trefoils), stretched along a random axis. Star-shaped means the
centreline never crosses itself; a course is kept only if its walls cannot fold either (the tightest bend's
radius leaves room for the inner wall) and distant parts of the loop stay a track apart, else the seed's next
draw is tried. The car drives counter-clockwise (θ increasing): the left wall is the inner one.

Every position along the loop is its arc length ``s`` from the start (θ = 0); `Course.project` maps a point to
(s, signed lateral offset), which is how progress, laps and the scripted driver see the car.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.spec import goal_in_car_frame

SPACING = 0.1  # m between the centreline's stored points


@dataclass(frozen=True)
class CourseShape:
    """How courses are drawn (the distribution, not one course)."""

    radius: float = 6.0  # m: the centreline's mean distance from the course's centre
    harmonics: tuple[int, ...] = (2, 3, 4, 5)
    amplitude: float = 0.32  # the largest harmonic's amplitude, as a fraction of the radius (k-th: / (k - 1))
    stretch: tuple[float, float] = (0.8, 1.5)  # the loop is scaled by this range along a random axis
    width: float = C.TRACK_WIDTH
    min_bend_radius: float = 1.6  # m: the centreline's tightest bend (the inner wall is width / 2 inside it)
    attempts: int = 200


class Course:
    """One closed course: its centreline sampled every ``SPACING`` m, counter-clockwise, and its width.

    Attributes (beside the constructor's): ``s`` (M,) arc length of each point, ``heading`` (M,) direction of
    travel (rad), ``curvature`` (M,) 1/m, positive bending left, ``length`` m round the centreline.
    """

    def __init__(self, centre: np.ndarray, width: float, seed: int = -1) -> None:
        self.centre, self.width, self.seed = np.asarray(centre, np.float64), float(width), int(seed)
        d = np.diff(self.centre, axis=0, append=self.centre[:1])
        seg = np.linalg.norm(d, axis=1)
        self.heading = np.arctan2(d[:, 1], d[:, 0])
        turn = np.angle(np.exp(1j * (np.roll(self.heading, -1) - self.heading)))
        self.s = np.concatenate([[0.0], np.cumsum(seg)[:-1]])
        self.curvature = np.roll(turn / seg, 1)
        self.length = float(seg.sum())

    # --- drawing --------------------------------------------------------------------------------------------------
    @classmethod
    def generate(cls, seed: int, shape: CourseShape | None = None) -> Course:
        """The course of ``seed``: the same seed, the same course, on any machine."""
        shape = shape or CourseShape()
        if seed < 0:
            raise ValueError(f"course seeds are >= 0, got {seed}")
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xC0]))  # a stream of its own, not the episode's
        for _ in range(shape.attempts):
            course = cls(_centreline(rng, shape), shape.width, int(seed))
            if course.problem(shape) is None:
                return course
        raise ValueError(f"course seed {seed}: no valid course in {shape.attempts} draws of {shape}")

    def problem(self, shape: CourseShape) -> str | None:
        """Why this course cannot be raced with these walls (None: it can)."""
        bend = 1.0 / max(float(np.abs(self.curvature).max()), 1e-9)
        if bend < shape.min_bend_radius:
            return f"a bend of radius {bend:.2f} m, tighter than {shape.min_bend_radius} m"
        # Points more than two track widths apart along the loop must be more than a track (plus both walls) apart.
        gap = self.width + 2 * C.WALL_THICKNESS + 0.4
        far = np.abs(self.s[:, None] - self.s[None, :])
        far = np.minimum(far, self.length - far) > 2.5 * self.width
        dist = np.linalg.norm(self.centre[:, None] - self.centre[None, :], axis=-1)
        if (dist[far] < gap).any():
            return f"two stretches of the loop come within {dist[far].min():.2f} m of each other"
        return None

    # --- geometry -------------------------------------------------------------------------------------------------
    def project(self, xy: np.ndarray) -> tuple[float, float]:
        """(s, lateral) of a point: its arc length along the course and its signed distance from the centreline
        (positive left of the direction of travel)."""
        p = np.asarray(xy, np.float64)[:2]
        i = int(np.argmin(((self.centre - p) ** 2).sum(axis=1)))
        h = self.heading[i]
        t, n = np.array([np.cos(h), np.sin(h)]), np.array([-np.sin(h), np.cos(h)])
        r = p - self.centre[i]
        return float((self.s[i] + r @ t) % self.length), float(r @ n)

    def point(self, s: float | np.ndarray) -> np.ndarray:
        """(…, 2) the centreline at arc length ``s`` (any real: the loop wraps)."""
        s = np.asarray(s, np.float64) % self.length
        closed = np.vstack([self.centre, self.centre[:1]])
        knots = np.append(self.s, self.length)
        return np.stack([np.interp(s, knots, closed[:, 0]), np.interp(s, knots, closed[:, 1])], axis=-1)

    def heading_at(self, s: float) -> float:
        """The direction of travel at arc length ``s`` (rad)."""
        i = int(np.searchsorted(self.s, s % self.length, side="right") - 1)
        return float(self.heading[i])

    def curvature_ahead(self, s: float, distance: float) -> float:
        """The largest |curvature| (1/m) over the next ``distance`` m from ``s``."""
        ahead = (self.s - s) % self.length <= distance
        return float(np.abs(self.curvature[ahead]).max()) if ahead.any() else 0.0

    def checkpoints(self, spacing: float = C.CHECKPOINT_SPACING, start: float = 0.0) -> np.ndarray:
        """(K, 2) points on the centreline every ``spacing`` m from ``start``, the last one at ``start`` + length:
        what one lap along the middle of the course drops (FastRLAP takes them from a recorded lap instead)."""
        k = max(round(self.length / spacing), 3)
        return self.point(start + self.length * np.arange(1, k + 1) / k)

    def walls(self, segments: int = C.WALL_SEGMENTS) -> np.ndarray:
        """(2, segments, 4) boxes along the left and right walls: centre x, y, half length, yaw.

        Each wall is the centreline offset by half the width plus half the wall's thickness, cut into segments of
        equal length; each box overlaps its neighbours by half a thickness so that bends leave no gaps.
        """
        out = np.zeros((2, segments, 4))
        normal = np.stack([-np.sin(self.heading), np.cos(self.heading)], axis=1)
        offset = self.width / 2 + C.WALL_THICKNESS / 2
        for side, sign in enumerate((1.0, -1.0)):  # left (inner), right (outer)
            line = self.centre + sign * offset * normal
            closed = np.vstack([line, line[:1]])
            along = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(closed, axis=0), axis=1))])
            cut = np.linspace(0.0, along[-1], segments + 1)
            ends = np.stack([np.interp(cut, along, closed[:, 0]), np.interp(cut, along, closed[:, 1])], axis=1)
            d = ends[1:] - ends[:-1]
            out[side, :, :2] = (ends[1:] + ends[:-1]) / 2
            out[side, :, 2] = np.linalg.norm(d, axis=1) / 2 + C.WALL_THICKNESS / 2
            out[side, :, 3] = np.arctan2(d[:, 1], d[:, 0])
        return out


def _centreline(rng: np.random.Generator, shape: CourseShape) -> np.ndarray:
    """One draw of a star-shaped loop, resampled every ``SPACING`` m, starting at θ = 0, counter-clockwise."""
    theta = np.linspace(0.0, 2 * np.pi, 4096, endpoint=False)
    r = np.ones_like(theta)
    for k in shape.harmonics:
        r += rng.uniform(0.0, shape.amplitude / (k - 1)) * np.cos(k * theta + rng.uniform(0, 2 * np.pi))
    xy = shape.radius * r[:, None] * np.stack([np.cos(theta), np.sin(theta)], axis=1)
    axis = rng.uniform(0, np.pi)
    u = np.array([np.cos(axis), np.sin(axis)])
    xy = xy + (rng.uniform(*shape.stretch) - 1.0) * (xy @ u)[:, None] * u  # stretch along u (keeps it star-shaped)
    closed = np.vstack([xy, xy[:1]])
    along = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(closed, axis=0), axis=1))])
    n = int(along[-1] / SPACING)
    cut = np.linspace(0.0, along[-1], n, endpoint=False)
    return np.stack([np.interp(cut, along, closed[:, 0]), np.interp(cut, along, closed[:, 1])], axis=1)


def lap_checkpoints(positions: np.ndarray, spacing: float = C.CHECKPOINT_SPACING) -> np.ndarray:
    """(K, 2) checkpoints every ``spacing`` m along one recorded lap (positions (T, 2), in driving order), the last
    where the lap began: what FastRLAP drives through, from one slow lap driven by a person or a scripted driver.

    A lap that does not come back to where it began (within ``spacing``), or is too short for three checkpoints,
    is refused with the distances, as is a path with non-finite points.
    """
    p = np.asarray(positions, np.float64)
    if p.ndim != 2 or p.shape[1] != 2 or len(p) < 2:
        raise ValueError(f"a lap is a (T, 2) path of positions, got shape {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError(f"the lap has non-finite positions (first at step {int(np.argwhere(~np.isfinite(p))[0, 0])})")
    along = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(p, axis=0), axis=1))])
    if along[-1] < 3 * spacing:
        raise ValueError(f"the lap is {along[-1]:.1f} m long: too short for checkpoints every {spacing:g} m")
    gap = float(np.linalg.norm(p[-1] - p[0]))
    if gap > spacing:
        raise ValueError(
            f"the lap does not close a loop: it ends {gap:.1f} m from where it began (at most {spacing:g} m): "
            "record a whole lap, back to the start"
        )
    k = max(round(along[-1] / spacing), 3)
    cut = along[-1] * np.arange(1, k + 1) / k
    points = np.stack([np.interp(cut, along, p[:, 0]), np.interp(cut, along, p[:, 1])], axis=1)
    points[-1] = p[0]  # the lap ends where it began
    return points


class CheckpointTracker:
    """Which checkpoint a car drives to: the next of ``points`` (in driving order, the last where a lap ends), moved
    on when the car comes within ``radius``; the env and the policy node track the goal the same way."""

    def __init__(self, points: np.ndarray, radius: float = C.CHECKPOINT_RADIUS) -> None:
        self.points = np.asarray(points, np.float64)
        if self.points.ndim != 2 or self.points.shape[1] != 2 or len(self.points) < 3:
            raise ValueError(f"checkpoints are (K >= 3, 2) positions, got shape {self.points.shape}")
        if not np.isfinite(self.points).all():
            raise ValueError("checkpoints have non-finite positions")
        self.radius = float(radius)
        self.next = 0

    @property
    def goal(self) -> np.ndarray:
        return self.points[self.next]

    def start(self, pose: np.ndarray) -> None:
        """Aim at the nearest checkpoint, or the one after it when the nearest is behind the car or reached."""
        k = int(np.argmin(np.linalg.norm(self.points - pose[:2], axis=1)))
        direction, dist = goal_in_car_frame(pose, self.points[k])
        self.next = (k + 1) % len(self.points) if direction[0] < 0 or dist <= self.radius else k

    def update(self, position: np.ndarray) -> tuple[int, bool]:
        """(the checkpoint reached at ``position``, or −1; whether it completed a lap)."""
        if np.linalg.norm(self.points[self.next] - position) > self.radius:
            return -1, False
        reached = self.next
        self.next = (self.next + 1) % len(self.points)
        return reached, reached == len(self.points) - 1
