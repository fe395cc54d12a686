"""`car-race` in MuJoCo: a car lapping a walled course from throttle and steering at 10 Hz, seen by its own camera.

Each scene owns a copy of the one scene model (`scene`), its walls placed on the course of its episode (a seed picks
it, `config.CarRaceConfig.course_of`), so a batch may race several courses at once and a scene changes course
without recompiling anything. An episode starts on the centreline at a seeded place along the course, pointing the
way of travel, at rest.

Per step the env reports what FastRLAP's loop needs and a person would otherwise watch for: ``collision`` (the car
touched a wall this step), ``stuck`` (its last ``STUCK_STEPS`` positions within ``STUCK_RADIUS``), the checkpoint
reached and lap times. The next checkpoint is what the policy steers by; a lap is every checkpoint in order, and
success is the first lap. The reward is the lap's progress in [0, 1] (push-T's coverage, the peg's depth): how far
along the course the car has come, counting only forward driving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import mujoco
import numpy as np

from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.config import CarRaceConfig
from reflexlab.tasks.car_race.course import Course
from reflexlab.tasks.car_race.spec import make_spec, observation
from sim.tasks.car_race.scene import CAR_GEOMS, build_model, place_walls, wall_ids


@dataclass
class _Scene:
    model: mujoco.MjModel
    data: mujoco.MjData
    course: Course | None = None
    checkpoints: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    next_checkpoint: int = 0
    applied: np.ndarray = field(default_factory=lambda: np.zeros(2))  # the last command the car got (rate-limited)
    travelled: float = 0.0  # m along the course since the start, forward minus backward
    s: float = 0.0  # arc length now
    positions: list[np.ndarray] = field(default_factory=list)  # the last STUCK_STEPS positions
    laps: list[int] = field(default_factory=list)  # the step at which each lap ended
    rng: np.random.Generator = field(default_factory=np.random.default_rng)  # odometry noise


class CarRaceEnv:
    """A batch of `car-race` scenes stepped together at 10 Hz.

    Args:
        num_envs: independent scenes.
        episode_steps: control steps before an episode is truncated (default: the config's).
        config: which course an episode is on, odometry noise (and the scripted driver's settings).
    """

    spec = make_spec()
    spec_factory = staticmethod(lambda cfg=None: make_spec())
    # What `sim.demos` records beside observation and action: the car's true pose and the course it is on.
    demo_features: ClassVar[dict[str, tuple[int, ...]]] = {"observation.environment_state": (4,)}

    def __init__(
        self, num_envs: int = 1, episode_steps: int | None = None, config: CarRaceConfig | None = None
    ) -> None:
        self.config = config or CarRaceConfig()
        self.num_envs = num_envs
        self.episode_steps = self.config.episode_steps if episode_steps is None else episode_steps
        self.scenes = []
        for _ in range(num_envs):
            model = build_model()
            self.scenes.append(_Scene(model, mujoco.MjData(model)))
        m = self.scenes[0].model
        self._walls = wall_ids(m).ravel()
        self._car = np.array([m.geom(n).id for n in CAR_GEOMS])
        self._qadr = m.joint("car").qposadr[0]
        self._dadr = m.joint("car").dofadr[0]
        self._spin = [m.joint(f"{n}_spin").dofadr[0] for n in ("rl", "rr")]
        self._courses: dict[int, Course] = {}
        self._max_step = C.MAX_ACTION_RATE * C.CONTROL_DT
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.max_progress = np.zeros(num_envs)
        self.succeeded = np.zeros(num_envs, dtype=bool)
        self.done = np.zeros(num_envs, dtype=bool)
        self._obs = np.zeros((num_envs, self.spec.policy_obs.size), np.float32)
        self._renderers: list[Any] = [None] * num_envs  # a sim.render.SceneRenderer per scene, once asked

    # --- state ---------------------------------------------------------------------------------------------------
    def pose(self) -> np.ndarray:
        """(N, 3) each car's x, y and yaw (rad)."""
        return np.array([self._pose(s) for s in self.scenes])

    def _pose(self, s: _Scene) -> np.ndarray:
        q = s.data.qpos[self._qadr : self._qadr + 7]
        w, x, y, z = q[3:7]
        return np.array([q[0], q[1], np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))])

    def speed(self) -> np.ndarray:
        """(N,) forward speed from the rear wheels' spin (wheel odometry, m/s; it overstates a spinning wheel)."""
        return np.array([self._odometry(s) for s in self.scenes])

    def _odometry(self, s: _Scene) -> float:
        return float(s.data.qvel[self._spin].mean() * C.WHEEL_RADIUS)

    def ground_speed(self) -> np.ndarray:
        """(N,) the car's true speed over the floor along its heading (m/s)."""
        yaw = self.pose()[:, 2]
        v = np.array([s.data.qvel[self._dadr : self._dadr + 2] for s in self.scenes])
        return v[:, 0] * np.cos(yaw) + v[:, 1] * np.sin(yaw)

    def yaw_rate(self) -> np.ndarray:
        """(N,) rad/s about the vertical (the IMU's gyro z on a level floor)."""
        return np.array([s.data.qvel[self._dadr + 5] for s in self.scenes])

    def courses(self) -> list[Course]:
        return [s.course for s in self._started()]

    def _started(self) -> list[_Scene]:
        """The scenes, each on its course (every method but `reset` needs one)."""
        if any(s.course is None for s in self.scenes):
            raise RuntimeError("car-race: reset() before anything else (a scene has no course yet)")
        return self.scenes

    def checkpoint(self) -> np.ndarray:
        """(N, 2) the checkpoint each car is driving to."""
        return np.array([s.checkpoints[min(s.next_checkpoint, len(s.checkpoints) - 1)] for s in self.scenes])

    def observation(self) -> np.ndarray:
        return self._obs.copy()

    def progress(self) -> np.ndarray:
        """(N,) the reward: the first lap's progress in [0, 1] (forward driving along the centreline)."""
        return np.array([np.clip(s.travelled / s.course.length, 0.0, 1.0) for s in self._started()])

    def hold_action(self) -> np.ndarray:
        """(N, 2) what a hold commands: throttle 0 (the wheels' speed servo brakes), the steering where it is."""
        return np.array([(0.0, s.applied[1]) for s in self.scenes])

    def expert_inputs(self) -> list[tuple[np.ndarray, float, Course]]:
        """What the scripted driver acts on, per scene: the true pose, the odometry speed and the course."""
        pose, speed = self.pose(), self.speed()
        return [(pose[i], float(speed[i]), s.course) for i, s in enumerate(self._started())]

    def environment_state(self) -> np.ndarray:
        """(N, 4) x, y, yaw and the course's seed: recorded beside demonstrations, never a policy input."""
        return np.array([(*p, s.course.seed) for p, s in zip(self.pose(), self._started(), strict=True)])

    def lap_steps(self, i: int) -> list[int]:
        """Scene ``i``'s lap times so far, in control steps."""
        laps = self.scenes[i].laps
        return [b - a for a, b in zip([0, *laps[:-1]], laps, strict=True)]

    def render(self, camera: str, height: int, width: int, scenes: np.ndarray | None = None) -> np.ndarray:
        """(N, height, width, 3) uint8 RGB frames of MJCF camera ``camera`` (``front``: the car's; ``top``)."""
        from sim.render import SceneRenderer

        chosen = range(self.num_envs) if scenes is None else [int(i) for i in scenes]
        out = np.empty((len(chosen), height, width, 3), np.uint8)
        for k, i in enumerate(chosen):
            renderer = self._renderers[i]
            if renderer is None:  # each scene has its own model (its own walls)
                renderer = self._renderers[i] = SceneRenderer(self.scenes[i].model)
            out[k] = renderer.render([self.scenes[i].data], camera, height, width)[0]
        return out

    def episode_metrics(self) -> dict[str, np.ndarray]:
        """``max_coverage``: the first lap's best progress; ``success``: a lap was completed."""
        return {"max_coverage": self.max_progress.copy(), "success": self.succeeded.copy()}

    # --- episodes ------------------------------------------------------------------------------------------------
    def reset(self, seeds: list[int] | np.ndarray) -> np.ndarray:
        """Start one episode per scene from its seed: its course, where on it the car starts, the odometry noise."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset needs {self.num_envs} seeds, got {len(seeds)}")
        for i, (s, seed) in enumerate(zip(self.scenes, seeds, strict=True)):
            self._reset_scene(s, int(seed))
            self._obs[i] = self._observe(i)
        self.steps[:] = 0
        self.done[:] = False
        self.succeeded[:] = False
        self.max_progress[:] = 0.0
        return self.observation()

    def course(self, seed: int) -> Course:
        """Course ``seed`` (drawn once, kept)."""
        if seed not in self._courses:
            self._courses[seed] = Course.generate(seed)
        return self._courses[seed]

    def _reset_scene(self, s: _Scene, seed: int) -> None:
        course = self.course(self.config.course_of(seed))
        if s.course is not course:
            place_walls(s.model, course.walls())
            s.course = course
        rng = np.random.default_rng(seed)
        start = start_car(s.model, s.data, course, rng)
        x, y = course.point(start)
        s.checkpoints = course.checkpoints(start=start)
        s.next_checkpoint = 0
        s.applied = np.zeros(2)
        s.travelled, s.s = 0.0, start
        s.positions = [np.array([x, y])]
        s.laps = []
        s.rng = np.random.default_rng(rng.integers(2**63))

    def _observe(self, i: int) -> np.ndarray:
        s = self.scenes[i]
        speed = self._odometry(s) + s.rng.normal(0.0, self.config.odometry_noise_std)
        goal = s.checkpoints[min(s.next_checkpoint, len(s.checkpoints) - 1)]
        return observation(speed, float(s.data.qvel[self._dadr + 5]), self._pose(s), goal, s.applied)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Apply (throttle, steering) commands (N, 2); returns obs, progress (the reward), done, info.

        Commands are clipped to [−1, 1] and their change per step to ``MAX_ACTION_RATE``, as the deploy safety
        filter would; scenes that are done are frozen (their episode is scored once).
        """
        actions = np.asarray(actions, dtype=np.float64).reshape(self.num_envs, 2)
        if not np.isfinite(actions).all():
            raise ValueError("car-race: non-finite throttle or steering")
        collision = np.zeros(self.num_envs, dtype=bool)
        stuck = np.zeros(self.num_envs, dtype=bool)
        lap = np.zeros(self.num_envs, dtype=bool)
        for i, s in enumerate(self.scenes):
            if self.done[i]:
                continue
            s.applied = s.applied + np.clip(np.clip(actions[i], -1, 1) - s.applied, -self._max_step, self._max_step)
            s.data.ctrl[:2] = s.applied[1] * C.MAX_STEER
            s.data.ctrl[2:] = s.applied[0] * C.MAX_SPEED / C.WHEEL_RADIUS
            for _ in range(C.DECIMATION):
                mujoco.mj_step(s.model, s.data)
                collision[i] |= self._touching_wall(s.data)
            lap[i] = self._advance(s)
            stuck[i] = self._stuck(s)
            self._obs[i] = self._observe(i)
        self.steps[~self.done] += 1
        for i in np.flatnonzero(lap):
            self.scenes[i].laps.append(int(self.steps[i]))
        prog = self.progress()
        success = np.array([bool(s.laps) for s in self.scenes])
        self.max_progress = np.maximum(self.max_progress, np.where(self.done, 0.0, prog))
        self.succeeded |= success & ~self.done
        newly_done = ~self.done & (success | (self.steps >= self.episode_steps))
        self.done |= newly_done
        info = {
            "success": success,
            "max_coverage": self.max_progress.copy(),
            "collision": collision,
            "stuck": stuck,
            "lap": lap,
        }
        return self.observation(), prog, newly_done, info

    def _touching_wall(self, data: mujoco.MjData) -> bool:
        g1, g2 = data.contact.geom1[: data.ncon], data.contact.geom2[: data.ncon]
        return bool(
            (
                np.isin(g1, self._walls) & np.isin(g2, self._car) | np.isin(g2, self._walls) & np.isin(g1, self._car)
            ).any()
        )

    def _advance(self, s: _Scene) -> bool:
        """Progress along the course and the checkpoints; True when this step completes a lap."""
        assert s.course is not None
        xy = self._pose(s)[:2]
        now, _ = s.course.project(xy)
        ds = (now - s.s + s.course.length / 2) % s.course.length - s.course.length / 2
        s.travelled += ds
        s.s = now
        s.positions = [*s.positions[-(C.STUCK_STEPS - 1) :], xy]
        if np.linalg.norm(s.checkpoints[s.next_checkpoint] - xy) > C.CHECKPOINT_RADIUS:
            return False
        s.next_checkpoint += 1
        if s.next_checkpoint < len(s.checkpoints):
            return False
        s.next_checkpoint = 0  # the last checkpoint is where the lap began: the next lap's are the same
        return True

    @staticmethod
    def _stuck(s: _Scene) -> bool:
        if len(s.positions) < C.STUCK_STEPS:
            return False
        p = np.array(s.positions)
        return bool(np.linalg.norm(p - p.mean(axis=0), axis=1).max() <= C.STUCK_RADIUS)


def start_car(model: mujoco.MjModel, data: mujoco.MjData, course: Course, rng: np.random.Generator) -> float:
    """Reset the scene with the car at rest on the centreline, at a place along ``course`` drawn from ``rng``,
    pointing the way of travel; returns that place's arc length."""
    start = float(rng.uniform(0.0, course.length))
    x, y = course.point(start)
    yaw = course.heading_at(start)
    mujoco.mj_resetData(model, data)
    adr = model.joint("car").qposadr[0]
    data.qpos[adr : adr + 7] = (x, y, C.WHEEL_RADIUS + 0.01, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
    mujoco.mj_forward(model, data)
    return start
