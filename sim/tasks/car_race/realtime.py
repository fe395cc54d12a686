"""`car-race` stepped one physics step at a time, commanded as the car's driver is: the sim-as-real car's scene.

The car bridge (`sim.ros.car_bridge`) locks it to the wall clock and speaks the car's topics
(`reflexlab.ros.topics.CarTopics`). Commands arrive as a ROS base takes them, a speed and a yaw rate; like the
car's driver (`real.car`), this turns them into the rear wheels' speed target and the front wheels' angle,
atan(wheelbase · ω / v), keeping the angle while the car is all but stopped (where it changes nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.config import CarRaceConfig
from reflexlab.tasks.car_race.course import Course
from sim.tasks.car_race.env import start_car
from sim.tasks.car_race.scene import CAR_GEOMS, build_model, place_walls, wall_ids

STEER_MIN_SPEED = 0.05  # m/s: below this a yaw-rate command leaves the steering where it is


@dataclass(frozen=True)
class SimCarState:
    """What the car's sensors read (world frame for the pose; the car's frame for velocities and acceleration)."""

    position: np.ndarray  # x, y, z
    quat_wxyz: np.ndarray
    yaw: float
    velocity: np.ndarray  # forward, left (m/s)
    yaw_rate: float  # rad/s
    wheel_speed: float  # m/s from the rear wheels' spin (what the wheel encoders give)


class RealtimeCarRace:
    """One `car-race` scene for the car bridge.

    Args:
        seed: the first episode (where on the course the car starts; the course too when ``course`` is None).
        course: the course to race (None: each episode's from its seed, as the ``prior`` profile).
    """

    def __init__(self, seed: int = 0, course: int | None = None) -> None:
        self.config = CarRaceConfig(course=course)
        self.model = build_model()
        self.data = mujoco.MjData(self.model)
        self.dt = float(self.model.opt.timestep)
        self._walls = wall_ids(self.model).ravel()
        self._car = np.array([self.model.geom(n).id for n in CAR_GEOMS])
        self._spin = [self.model.joint(f"{n}_spin").dofadr[0] for n in ("rl", "rr")]
        self._body = self.model.body("car").id
        self._courses: dict[int, Course] = {}
        self.course: Course | None = None
        self.reset(seed)

    @property
    def time(self) -> float:
        return float(self.data.time)

    def reset(self, seed: int) -> None:
        """A new episode: the car at rest on the centreline at the seed's place (on the seed's course, if any)."""
        number = self.config.course_of(seed)
        if number not in self._courses:
            self._courses[number] = Course.generate(number)
        if self.course is not self._courses[number]:
            self.course = self._courses[number]
            place_walls(self.model, self.course.walls())
        start_car(self.model, self.data, self.course, np.random.default_rng(seed))
        self.collisions = 0
        self._steer = 0.0

    def command(self, speed: float, yaw_rate: float) -> None:
        """A Twist's speed (m/s) and yaw rate (rad/s), clipped to what the car can do."""
        if not (np.isfinite(speed) and np.isfinite(yaw_rate)):
            raise ValueError(f"non-finite command: speed {speed}, yaw rate {yaw_rate}")
        speed = float(np.clip(speed, -C.MAX_SPEED, C.MAX_SPEED))
        if abs(speed) >= STEER_MIN_SPEED:
            self._steer = float(np.clip(np.arctan(C.WHEELBASE * yaw_rate / speed), -C.MAX_STEER, C.MAX_STEER))
        self.data.ctrl[:2] = self._steer
        self.data.ctrl[2:] = speed / C.WHEEL_RADIUS

    def brake(self) -> None:
        """The watchdog's command: the wheels held at zero speed, the steering where it is."""
        self.data.ctrl[2:] = 0.0

    def step(self) -> None:
        mujoco.mj_step(self.model, self.data)
        g1, g2 = self.data.contact.geom1[: self.data.ncon], self.data.contact.geom2[: self.data.ncon]
        walls, car = (
            np.isin(g1, self._walls) | np.isin(g2, self._walls),
            np.isin(g1, self._car) | np.isin(g2, self._car),
        )
        self.collisions += int((walls & car).any())

    def state(self) -> SimCarState:
        d = self.data
        pos, quat = d.xpos[self._body].copy(), d.xquat[self._body].copy()
        w, x, y, z = quat
        yaw = float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
        rot = d.xmat[self._body].reshape(3, 3)
        lin = rot.T @ d.qvel[0:3]  # the free joint's linear velocity is in the world frame
        return SimCarState(
            position=pos,
            quat_wxyz=quat,
            yaw=yaw,
            velocity=lin[:2],
            yaw_rate=float(d.qvel[5]),
            wheel_speed=float(d.qvel[self._spin].mean() * C.WHEEL_RADIUS),
        )

    def acceleration(self) -> np.ndarray:
        """(3,) specific force in the car's frame (m/s², gravity included), as an IMU reads it. Its own call: body
        accelerations need a pass stepping leaves out (`mj_rnePostConstraint`), which only the IMU pays for."""
        acc = np.zeros(6)
        mujoco.mj_rnePostConstraint(self.model, self.data)
        mujoco.mj_objectAcceleration(self.model, self.data, mujoco.mjtObj.mjOBJ_BODY, self._body, acc, 1)
        return acc[3:]
