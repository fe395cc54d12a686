"""The scripted driver: pure pursuit along the centreline, at a speed that slows for the bends ahead.

It stands in for the person who drives FastRLAP's slow demonstration lap, drives the prior data's laps on the other
courses, and (faster, noiseless) gives the bench a scripted expert's lap time. It reads the car's true pose and the
course, which the policy never gets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.config import CarRaceConfig
from reflexlab.tasks.car_race.course import Course

LATERAL_ACCEL = 3.5  # m/s²: the driver slows so that v² κ stays under this in the bends ahead


@dataclass
class DriverStep:
    """One step of the driver: its command (throttle, steering)."""

    target: np.ndarray


class CarDriver:
    """Closed-loop scripted driver for one scene; ``rng`` draws its steering noise."""

    def __init__(self, rng: np.random.Generator, config: CarRaceConfig | None = None, speed: float | None = None):
        config = config or CarRaceConfig()
        self.rng = rng
        self.speed = config.driver_speed if speed is None else speed
        self.noise_std = config.driver_noise_std

    def act(self, pose: np.ndarray, speed: float, course: Course) -> DriverStep:
        """The command for a car at ``pose`` (x, y, yaw) going ``speed`` m/s on ``course``."""
        s, _ = course.project(pose[:2])
        lookahead = 0.8 + 0.35 * max(speed, 0.0)
        d = course.point(s + lookahead) - pose[:2]
        alpha = np.arctan2(d[1], d[0]) - pose[2]
        steer = np.arctan2(2 * C.WHEELBASE * np.sin(alpha), np.linalg.norm(d)) / C.MAX_STEER
        bend = course.curvature_ahead(s, 1.0 + 1.5 * max(speed, 0.0))
        target_speed = min(self.speed, np.sqrt(LATERAL_ACCEL / max(bend, 1e-6)))
        steer += self.rng.normal(0.0, self.noise_std) if self.noise_std else 0.0
        return DriverStep(np.clip([target_speed / C.MAX_SPEED, steer], -1.0, 1.0))
