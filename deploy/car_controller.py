"""The car policy's serving loop without ROS: odometry, IMU and camera frames in, a safe Twist out.

`deploy.ros.car_policy_node` wraps it, as `deploy.ros.policy_node` wraps `deploy.controller` for joint robots; a test
drives exactly the same logic. A car policy (a `car-race` generator reading the car's camera: FastRLAP's encoder and
head, or an imitation student) acts when a frame arrives: `step` assembles the observation (speed, yaw rate, the next
checkpoint in the car's frame, the last action), runs the policy through `deploy.step_actor.StepActor` (frame
resize, histories, chunks), then clips and rate-limits its (throttle, steering) as the car's env does, and returns
the Twist for it (`car_race.spec.twist_of`).

It never commands on stale input: odometry or IMU older than ``max_state_age_s``, or a camera older than
``max_frame_age_s``, gives the brake (speed 0, steering kept) with the reason counted; so does a NaN action. Frames
of another size than the car's config gives the camera, duplicate or old stamps, and non-finite odometry are
rejected and counted by reason.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np

from deploy.controller import Stamped, StateRejected, check_stamp
from deploy.step_actor import StepActor
from real.car.config import CarFile
from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.course import CheckpointTracker
from reflexlab.tasks.car_race.spec import make_spec, observation, twist_of


class CarController:
    """Serves one car policy on one car.

    Args:
        model: the exported `car-race` policy (a generator; its Spec lists the cameras it reads).
        config: the car (cameras and their sizes, safety ages).
        checkpoints: (K, 2) in the odometry frame, the last where a lap ends (`course.lap_checkpoints`).
        seed: the policy's noise.
    """

    def __init__(self, model: Path, config: CarFile, checkpoints: np.ndarray, seed: int = 0) -> None:
        self.actor = StepActor(model, make_spec(), seed)  # refuses a model for another robot or task
        self.config = config
        missing = [c for c in self.actor.cameras if c not in config.cameras]
        if missing:
            have = sorted(config.cameras)
            raise ValueError(f"model {Path(model).name} reads camera(s) {missing}; the car's config lists {have}")
        self.tracker = CheckpointTracker(checkpoints)
        self.rejected: Counter[str] = Counter()
        self.brakes: Counter[str] = Counter()
        self.policy_steps = 0  # steps the policy acted on (a chunk policy runs its network on some)
        self._max_move = C.MAX_ACTION_RATE / make_spec().control_rate_hz
        self.reset()

    def reset(self) -> None:
        """Forget every input and the policy's history: the next step needs fresh ones."""
        self._odometry: Stamped | None = None
        self._imu: Stamped | None = None
        self._frames: dict[str, Stamped] = {}
        self._applied = np.zeros(2)
        self._started = False
        self.actor.reset()

    # --- inputs --------------------------------------------------------------------------------------------------
    def set_odometry(self, position: np.ndarray, yaw: float, speed: float, stamp_ns: int, t: float) -> None:
        pose = np.array([*np.asarray(position, np.float64)[:2], yaw, speed])
        self._odometry = self._checked("odometry", pose, self._odometry, stamp_ns, t)

    def set_imu(self, yaw_rate: float, stamp_ns: int, t: float) -> None:
        self._imu = self._checked("imu", np.array([yaw_rate], np.float64), self._imu, stamp_ns, t)

    def set_image(self, camera: str, pixels: np.ndarray, stamp_ns: int, t: float) -> None:
        """A camera's frame, (H, W, 3) uint8 RGB at the size the car's config gives that camera."""
        try:
            if camera not in self.actor.cameras:
                raise StateRejected("unknown_camera", f"camera {camera!r} is not one the policy reads")
            want = self.config.cameras[camera]
            if pixels.shape != (want.height, want.width, 3) or pixels.dtype != np.uint8:
                raise StateRejected(
                    "wrong_size",
                    f"camera {camera!r} frame is {pixels.dtype} {pixels.shape}, expected uint8 RGB "
                    f"({want.height}, {want.width}, 3) as the car's config says",
                )
            check_stamp(self._frames.get(camera), stamp_ns, f"camera {camera!r} frame")
        except StateRejected as e:
            self.rejected[f"images.{camera}.{e.reason}"] += 1
            raise
        self._frames[camera] = Stamped(pixels, stamp_ns, t)

    def _checked(self, what: str, value: np.ndarray, last: Stamped | None, stamp_ns: int, t: float) -> Stamped:
        try:
            if not np.isfinite(value).all():
                raise StateRejected("non_finite", f"{what} has non-finite values: {value.tolist()}")
            check_stamp(last, stamp_ns, what)
        except StateRejected as e:
            self.rejected[f"{what}.{e.reason}"] += 1
            raise
        return Stamped(value, stamp_ns, t)

    def ages(self, t: float) -> dict[str, float]:
        """Seconds since each input last arrived (inf before its first): odometry, imu and every camera."""
        inputs = {"odometry": self._odometry, "imu": self._imu} | {c: self._frames.get(c) for c in self.actor.cameras}
        return {k: t - v.t if v is not None else math.inf for k, v in inputs.items()}

    def stale(self, t: float) -> list[str]:
        """The inputs too old to act on."""
        s = self.config.safety
        limit = {"odometry": s.max_state_age_s, "imu": s.max_state_age_s}
        return [k for k, age in self.ages(t).items() if not age <= limit.get(k, s.max_frame_age_s)]

    # --- the step ------------------------------------------------------------------------------------------------
    def step(self, t: float) -> tuple[float, float]:
        """The Twist (speed, yaw rate) to publish now: the policy's action, or the brake."""
        stale = self.stale(t)
        if stale:
            return self._brake("stale:" + ",".join(stale))
        x, y, yaw, speed = self._odometry.value  # type: ignore[union-attr]
        pose = np.array([x, y, yaw])
        if not self._started:
            self.tracker.start(pose)
            self._started = True
        self.tracker.update(pose[:2])
        yaw_rate = float(self._imu.value[0])  # type: ignore[union-attr]
        obs = observation(speed, yaw_rate, pose, self.tracker.goal, self._applied)
        action = self.actor.act(obs, {c: f.value for c, f in self._frames.items() if c in self.actor.cameras})
        self.policy_steps += 1
        if not np.isfinite(action).all():
            return self._brake("non_finite_action")
        wanted = np.clip(action, -1.0, 1.0)
        self._applied = self._applied + np.clip(wanted - self._applied, -self._max_move, self._max_move)
        return self._twist()

    def _brake(self, reason: str) -> tuple[float, float]:
        self.brakes[reason] += 1
        self._applied = np.array([0.0, self._applied[1]])
        return self._twist()

    def _twist(self) -> tuple[float, float]:
        s = self.config.safety
        speed, yaw_rate = twist_of(*self._applied)
        return float(np.clip(speed, -s.max_speed, s.max_speed)), yaw_rate
