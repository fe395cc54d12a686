"""`car-race` profiles: which course an episode is on, and how the scripted driver drives.

FastRLAP learns on a course it has never seen from prior data gathered elsewhere, so the courses are split:
``prior`` (the default) puts each episode on one of ``PRIOR_COURSES`` (by its seed), the courses for prior data
and demonstrations of driving in general; ``test`` is ``TEST_COURSE`` alone, which no prior episode visits.
"""

from __future__ import annotations

from dataclasses import dataclass

from reflexlab.tasks.car_race.constants import EPISODE_STEPS

TEST_COURSE = 0
PRIOR_COURSES = tuple(range(1, 9))


@dataclass(frozen=True)
class CarRaceConfig:
    """A profile of the task; speeds in m/s, noise in action units (both actions are in [−1, 1])."""

    course: int | None = None  # None: episode seed s drives on PRIOR_COURSES[s % 8]; an int: always that course
    episode_steps: int = EPISODE_STEPS
    driver_speed: float = 2.0  # the scripted driver's speed on straights (it slows for bends)
    driver_noise_std: float = 0.05  # added to the scripted driver's steering
    odometry_noise_std: float = 0.02  # m/s on the wheel-odometry speed the policy reads

    def course_of(self, seed: int) -> int:
        """The course an episode of ``seed`` runs on."""
        return self.course if self.course is not None else PRIOR_COURSES[int(seed) % len(PRIOR_COURSES)]


def prior() -> CarRaceConfig:
    return CarRaceConfig()


def test() -> CarRaceConfig:
    return CarRaceConfig(course=TEST_COURSE)
