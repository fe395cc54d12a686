"""The serving control loop without ROS: validated robot state in, safe joint targets out.

`PolicyController` is what the ROS 2 policy node (`deploy.ros.policy_node`) wraps; it is kept
free of ROS so that a real-robot env or a test drives exactly the same logic. Per control step it

1. checks that the robot state (joints + IMU) is fresh; stale state goes to the safety filter's
   hold/damp mode, whatever the policy would say;
2. runs the policy at the *model's* control rate (a policy trained at 50 Hz is evaluated at 50 Hz,
   with its last action and gait clock advancing as in training), however fast the node steps;
3. passes the target through the always-on `SafetyFilter` (limits, rate, NaN guard); between
   policy steps the filtered command holds, as the trained policy's targets did.

An action-chunk model (`Spec.is_generator`, served by `OnnxGenerator`) is sampled at the policy
rate too, on the history of the last To policy observations and seeded noise; a `ChunkExecutor`
(receding horizon or temporal ensembling) then gives the target of every control step, and with
"linear" interpolation the filtered command moves every control step instead of holding.

Every state message is validated before it can reach the policy: a wrong length, a missing joint,
NaN/inf, an implausible value, an out-of-order or duplicated stamp is rejected and counted by
reason, and the last good state ages until the watchdog holds the robot.

A generator whose Spec lists cameras (`Spec.images`) reads each one's frames too (`set_image`,
sized as the robot config's ``cameras`` says, resized to the model's size on receipt), as a
history pushed at every policy step beside the observations'. It is not armed before every camera
has delivered, and while any camera's newest frame is older than ``safety.max_frame_age_s`` the
robot holds (the filter's stale mode, counted as ``stale_frames``): it never acts on an old picture.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deploy.runner import OnnxGenerator, OnnxPolicy
from deploy.safety import SafetyFilter
from reflexlab.chunking import ChunkConfig, ChunkExecutor, ObservationHistory
from reflexlab.images import FrameResizer
from reflexlab.robot import RobotConfig, gait_hz
from reflexlab.rotations import projected_gravity


class StateRejected(ValueError):
    """A state or command message that was not used; ``reason`` is the counter key."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass
class Stamped:
    """A message's value as taken, its stamp and its receipt time (staleness is judged on our clock, not the
    sender's)."""

    value: Any
    stamp_ns: int
    t: float  # receipt time (s, monotonic)


class PolicyController:
    """Assembles observations, runs the policy at its own rate and filters every command.

    Args:
        policy: the loaded model (`deploy.runner.load_model` picks the loader).
        robot: the robot config (limits, safety settings).
        rate_hz: the rate at which `step` is called (the node's control rate).
        policy_rate_hz: the rate at which the policy is evaluated; the model's control rate if None.
        chunking: how a generator's chunks are executed (ignored for a plain policy).
        seed: seeds a generator's noise; `reset` re-seeds, so every activation samples the same noise.
    """

    def __init__(
        self,
        policy: OnnxPolicy | OnnxGenerator,
        robot: RobotConfig,
        rate_hz: float,
        policy_rate_hz: float | None = None,
        chunking: ChunkConfig | None = None,
        seed: int = 0,
    ) -> None:
        robot.check_model(policy.spec)  # a camera the model reads must be one of the robot's
        self.policy = policy
        self.robot = robot
        self.spec = policy.spec
        self.rate_hz = float(rate_hz)
        self.policy_rate_hz = float(policy_rate_hz or self.spec.control_rate_hz)
        if not 0 < self.policy_rate_hz <= self.rate_hz:
            raise ValueError(f"policy rate {self.policy_rate_hz} Hz must be in (0, node rate {self.rate_hz} Hz]")
        s = robot.safety
        self.stale_after_s = s.stale_after_periods / self.rate_hz
        self.seed = seed
        self.chunks: ChunkExecutor | None = None
        if isinstance(policy, OnnxGenerator):
            self.chunks = ChunkExecutor.from_spec(self.spec, self.policy_rate_hz, chunking)
            self.history = ObservationHistory(self.spec.observation_horizon, policy.obs_size)
        # Each camera's frames at the model's size, resized on receipt; a history of them beside the observations'.
        self.cameras = {i.name: FrameResizer(i.height, i.width) for i in self.spec.images}
        self.frame_history = {
            i.name: ObservationHistory(self.spec.observation_horizon, i.shape, np.uint8) for i in self.spec.images
        }
        self.max_frame_age_s = s.max_frame_age_s
        # True when the target moves every control step (interpolated chunks), not once per policy step.
        self.streaming = self.chunks is not None and self.chunks.config.interpolation == "linear"
        # The filter runs once per target change and budgets max_rate over the time between changes.
        # Held targets change once per policy period: max_rate / policy rate per change, one step per
        # period, no ramp (as training saw them; a ramp at the node rate changed the sim-to-sim gait
        # measurably), the command holding in between. Interpolated targets change every control step:
        # max_rate / node rate per step, the same speed bound spread over the period.
        self.filter = SafetyFilter(
            robot.safety_limits(self.spec),
            self.rate_hz if self.streaming else self.policy_rate_hz,
            stale_mode=s.stale_mode,
            stale_after_s=self.stale_after_s,
        )
        self.n = len(robot.joint_names)
        self.offset = np.asarray(self.spec.action.offset, dtype=np.float64)
        self.lower = np.asarray(robot.joint_lower) - s.position_margin
        self.upper = np.asarray(robot.joint_upper) + s.position_margin
        self.max_vel = np.asarray(robot.joint_max_velocity) * s.velocity_margin
        self.max_command = np.asarray(s.max_command, dtype=np.float64)
        terms = {t.name for t in self.spec.policy_obs.terms}
        self.gait_hz = gait_hz(self.spec) if "gait_phase" in terms else 0.0
        self.rejected: Counter[str] = Counter()
        self.inferences = 0
        self.non_finite_chunks = 0
        self._index_cache: tuple[tuple[str, ...], np.ndarray] | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the state and disarm: the next fresh state restarts the clock and the filter."""
        self._joints: Stamped | None = None
        self._imu: Stamped | None = None
        self._frames: dict[str, Stamped] = {}
        self._command = np.zeros(3)
        self._command_t = -math.inf
        self._last_action = np.zeros(self.spec.action.size, dtype=np.float32)
        self._t0: float | None = None
        self._next_infer = 0.0
        self._target: np.ndarray | None = None  # a plain policy's latest target
        if self.chunks is not None:
            self.chunks.reset()
            self.history.reset()
            for frames in self.frame_history.values():
                frames.reset()
            self.rng = np.random.default_rng(self.seed)

    @property
    def armed(self) -> bool:
        return self._t0 is not None

    # --- inputs ---------------------------------------------------------------------------------
    def set_joint_state(
        self, names: list[str] | tuple[str, ...], pos: np.ndarray, vel: np.ndarray, stamp_ns: int, t: float
    ) -> None:
        """Take a JointState (any joint order, extra joints allowed); raise `StateRejected` if unusable."""
        try:
            idx = self._joint_index(tuple(names))
            pos, vel = np.asarray(pos, dtype=np.float64), np.asarray(vel, dtype=np.float64)
            if pos.shape != (len(names),) or vel.shape != (len(names),):
                raise StateRejected(
                    "wrong_length", f"joint state has {len(names)} names, {pos.size} positions, {vel.size} velocities"
                )
            q, qd = pos[idx], vel[idx]
            if not (np.isfinite(q).all() and np.isfinite(qd).all()):
                raise StateRejected("non_finite", f"joint state has non-finite values for {self._bad(q, qd)}")
            out = (q < self.lower) | (q > self.upper)
            if out.any():
                j = int(np.argmax(out))
                raise StateRejected(
                    "implausible_position",
                    f"joint {self.robot.joint_names[j]} at {q[j]:.3g} rad, far outside its limits",
                )
            fast = np.abs(qd) > self.max_vel
            if fast.any():
                j = int(np.argmax(fast))
                raise StateRejected(
                    "implausible_velocity", f"joint {self.robot.joint_names[j]} at {qd[j]:.3g} rad/s, beyond its limit"
                )
            check_stamp(self._joints, stamp_ns, "joint state")
        except StateRejected as e:
            self.rejected[f"joint_states.{e.reason}"] += 1
            raise
        self._joints = Stamped((q, qd), stamp_ns, t)

    def set_imu(self, quat_xyzw: Sequence[float], gyro: Sequence[float], stamp_ns: int, t: float) -> None:
        """Take an IMU sample (orientation quaternion x, y, z, w; angular velocity in the base frame)."""
        try:  # plain floats: this runs at the state rate and numpy's per-call overhead dominates 7 numbers
            x, y, z, w = (float(v) for v in quat_xyzw)
            gx, gy, gz = (float(v) for v in gyro)
            if not all(math.isfinite(v) for v in (x, y, z, w, gx, gy, gz)):
                raise StateRejected("non_finite", "IMU sample has non-finite orientation or angular velocity")
            norm = math.sqrt(x * x + y * y + z * z + w * w)
            if abs(norm - 1.0) > 0.05:
                raise StateRejected("bad_orientation", f"IMU orientation quaternion has norm {norm:.3g}")
            if max(abs(gx), abs(gy), abs(gz)) > 50.0:
                raise StateRejected("implausible_angular_velocity", f"IMU angular velocity ({gx}, {gy}, {gz}) rad/s")
            check_stamp(self._imu, stamp_ns, "IMU sample")
        except StateRejected as e:
            self.rejected[f"imu.{e.reason}"] += 1
            raise
        self._imu = Stamped((projected_gravity((x, y, z, w)), np.array([gx, gy, gz])), stamp_ns, t)

    def set_velocity_command(self, command: np.ndarray, t: float) -> None:
        """Take a (vx, vy, yaw rate) command; clipped to the robot's command limits."""
        c = np.asarray(command, dtype=np.float64)
        if c.shape != (3,) or not np.isfinite(c).all():
            self.rejected["velocity_command.non_finite"] += 1
            raise StateRejected("non_finite", f"velocity command {c} is not 3 finite numbers")
        self._command = np.clip(c, -self.max_command, self.max_command)
        self._command_t = t

    def set_image(self, camera: str, pixels: np.ndarray, stamp_ns: int, t: float) -> None:
        """Take a camera's frame, (H, W, 3) uint8 RGB at the size the robot config gives the camera; raise
        `StateRejected` if unusable. Resized to the model's size here, once per frame, not per control step."""
        try:
            if camera not in self.cameras:
                raise StateRejected("unknown_camera", f"camera {camera!r} is not one the model reads")
            want = self.robot.cameras[camera]
            if pixels.shape != (want.height, want.width, 3) or pixels.dtype != np.uint8:
                raise StateRejected(
                    "wrong_size",
                    f"camera {camera!r} frame is {pixels.dtype} {pixels.shape}, expected uint8 RGB "
                    f"({want.height}, {want.width}, 3) as the robot config says",
                )
            check_stamp(self._frames.get(camera), stamp_ns, f"camera {camera!r} frame")
        except StateRejected as e:
            self.rejected[f"images.{camera}.{e.reason}"] += 1
            raise
        self._frames[camera] = Stamped((self.cameras[camera](pixels),), stamp_ns, t)

    def frame_ages(self, t: float) -> dict[str, float]:
        """Seconds since each camera the model reads last delivered a good frame (inf before its first)."""
        return {c: t - self._frames[c].t if c in self._frames else math.inf for c in self.cameras}

    def stale_cameras(self, t: float) -> list[str]:
        """The cameras whose newest frame is older than the robot's ``max_frame_age_s`` (or missing)."""
        return [c for c, age in self.frame_ages(t).items() if not age <= self.max_frame_age_s]

    def state_age(self, t: float) -> float:
        """Seconds since the older of the last good joint state and IMU sample (inf before both)."""
        if self._joints is None or self._imu is None:
            return math.inf
        return t - min(self._joints.t, self._imu.t)

    # --- the control step -----------------------------------------------------------------------
    def step(self, t: float) -> np.ndarray | None:
        """The filtered joint-position command at time ``t``; None until a fresh state has arrived."""
        age = self.state_age(t)
        blind = bool(self.cameras) and bool(self.stale_cameras(t))
        if self._t0 is None:
            if not age <= self.stale_after_s or blind:
                return None  # nothing safe to command yet: we do not know where the robot is, or cannot see
            self.filter.reset(self._joints.value[0])
            self._t0 = self._next_infer = t
        measured = self._joints.value[0] if self._joints is not None else None
        if not age <= self.stale_after_s:
            return self.filter(None, age, measured)  # hold or damp
        if blind:
            return self.filter.hold(measured, "stale_frames")  # the policy would act on an old picture
        if t >= self._next_infer - 0.5 / self.rate_hz:
            self._infer(t)
            self._next_infer += 1.0 / self.policy_rate_hz
            if self._next_infer < t:  # fell behind (e.g. state was stale): restart the schedule
                self._next_infer = t + 1.0 / self.policy_rate_hz
        elif not self.streaming:
            return self.filter.last_command  # between policy steps the command holds
        target = self._target if self.chunks is None else self._chunk_target(t)
        return self.filter(target, age, measured)

    def _chunk_target(self, t: float) -> np.ndarray | None:
        action = self.chunks(t)
        return None if action is None else self.policy.joint_targets(action)

    def observation_terms(self, t: float) -> dict[str, np.ndarray]:
        """The policy's observation terms (physical units) at time ``t`` from the latest state."""
        q, qd = self._joints.value
        gravity, gyro = self._imu.value
        command = self._command if t - self._command_t <= self.robot.safety.command_timeout_s else np.zeros(3)
        phase = 2.0 * math.pi * ((t - self._t0) * self.gait_hz % 1.0)
        return {
            "base_ang_vel": gyro,
            "projected_gravity": gravity,
            "velocity_command": command,
            "gait_phase": np.array([math.sin(phase), math.cos(phase)]),
            "joint_pos": q - self.offset,
            "joint_vel": qd,
            "last_action": self._last_action,
        }

    def _infer(self, t: float) -> None:
        """Evaluate the policy: a plain policy's next target, or a generator's next chunk."""
        obs = self.policy.assemble(self.observation_terms(t))
        self.inferences += 1
        if self.chunks is None:
            action = self.policy.act(obs)
            self._target = self.policy.joint_targets(action)  # the filter rejects a non-finite one
            if np.isfinite(action).all():
                self._last_action = action
            return
        images = {c: self.frame_history[c].push(self._frames[c].value[0]) for c in self.cameras}
        chunk = self.policy.sample(self.history.push(obs), rng=self.rng, images=images)
        if not np.isfinite(chunk).all():  # dropped: the previous plan continues towards its horizon
            self.non_finite_chunks += 1
            return
        self.chunks.add(chunk, t)
        # The action this policy step commits to (at its own stamp: no interpolation), which the
        # next observation reports as the last action, as a plain policy's does.
        self._last_action = self.chunks(t).astype(np.float32)

    # --- helpers --------------------------------------------------------------------------------
    def _joint_index(self, names: tuple[str, ...]) -> np.ndarray:
        if self._index_cache is not None and self._index_cache[0] == names:
            return self._index_cache[1]
        where = {n: i for i, n in enumerate(names)}
        missing = [n for n in self.robot.joint_names if n not in where]
        if missing:
            raise StateRejected("missing_joint", f"joint state lacks {', '.join(missing)}")
        idx = np.array([where[n] for n in self.robot.joint_names])
        self._index_cache = (names, idx)
        return idx

    def _bad(self, q: np.ndarray, qd: np.ndarray) -> str:
        bad = ~(np.isfinite(q) & np.isfinite(qd))
        return ", ".join(n for n, b in zip(self.robot.joint_names, bad, strict=True) if b)


def check_stamp(last: Stamped | None, stamp_ns: int, what: str) -> None:
    """Refuse a message whose stamp repeats or precedes the ``last`` one taken (None before the first)."""
    if last is None:
        return
    if stamp_ns == last.stamp_ns:
        raise StateRejected("duplicate_stamp", f"{what} repeats stamp {stamp_ns} ns")
    if stamp_ns < last.stamp_ns:
        raise StateRejected("out_of_order", f"{what} stamp {stamp_ns} ns is older than the last ({last.stamp_ns})")
