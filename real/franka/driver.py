"""FrankaDriver: the FR3's 1 kHz torque loop, fed by a policy at 10–100 Hz.

The robot wants a torque every millisecond; a policy produces a target every 10–100 ms, from
another thread. The driver owns the loop in its own thread and decouples the two: targets are
clipped (workspace box, joint margins) and stored; every cycle the loop moves a smooth reference
towards the latest target (`interpolation`), computes an impedance torque (joint or Cartesian,
plus the Coriolis torque from libfranka's model; the robot compensates gravity itself),
saturates it and limits its rate to what the robot accepts, and writes it.

What can go wrong is handled in the loop, not left to the caller: a policy that stops sending
(``command_timeout_s``) makes the arm hold where it is; a reflex (``franka.ControlException``)
is counted and, when the config allows, cleared with ``automatic_error_recovery()`` after which
the arm holds its new position; otherwise the loop stops and `state()` reports the error.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from dataclasses import dataclass

import mujoco
import numpy as np
import pylibfranka as franka

from real.franka.config import FrankaConfig
from real.franka.constants import CONTROL_PERIOD_S, DQ_MAX, N_JOINTS, Q_MAX, Q_MIN
from real.franka.interpolation import SmoothOrientation, SmoothReference, normalized

_RING = 1 << 16  # cycle periods kept for percentiles (~65 s at 1 kHz)
# control_command_success_rate is over the last 100 commands, so it means nothing in a motion's first 100
_SUCCESS_WINDOW = 100


class FrankaError(RuntimeError):
    """The robot refused, failed or could not be reached; the message says what to do."""


class FrankaUnreachableError(FrankaError):
    pass


class FrankaVersionError(FrankaError):
    pass


@dataclass(frozen=True)
class FrankaState:
    """A consistent snapshot of one control cycle (copied, safe to keep)."""

    q: np.ndarray  # rad
    dq: np.ndarray  # rad/s
    tau_J: np.ndarray  # Nm, measured link-side torque
    position: np.ndarray  # m, EE (O_T_EE) in the base frame
    quaternion_wxyz: np.ndarray  # EE orientation
    time_s: float  # robot clock
    robot_mode: str  # pylibfranka.RobotMode name: Move, Idle, Reflex, …
    control_command_success_rate: float  # fraction of the last commands that reached the robot in time
    holding: bool  # no fresh target within command_timeout_s: holding position
    running: bool  # the torque loop is running
    last_error: str | None


class FrankaDriver:
    """Connect with `start()`, stream targets with `set_joint_target` / `set_ee_target`, `stop()` at the end."""

    def __init__(self, config: FrankaConfig) -> None:
        self.config = config
        c, s = config.impedance, config.safety
        self._k_joint = np.asarray(c.joint_stiffness)
        self._d_joint = np.asarray(c.joint_damping)
        self._k_cart = np.asarray(c.cartesian_stiffness)
        self._d_cart = 2.0 * np.sqrt(self._k_cart)
        self._box_min, self._box_max = np.asarray(s.workspace_min), np.asarray(s.workspace_max)
        self._q_lo, self._q_hi = Q_MIN + s.joint_margin, Q_MAX - s.joint_margin
        self._tau_max = np.asarray(s.max_joint_torque)
        self._dtau_max = s.max_torque_rate * CONTROL_PERIOD_S  # per 1 ms command, whatever the loop's jitter
        self._robot: franka.Robot | None = None
        self._model: franka.Model | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._started = threading.Event()  # first cycle of the first motion ran
        self._lock = threading.Lock()  # guards the goal and the counters the API also writes
        self._goal: tuple[np.ndarray, ...] | None = None  # joint goal (q,) or EE goal (position, quat)
        self._goal_time = 0.0
        self._injected: np.ndarray | None = None
        self._latest: tuple[franka.RobotState, bool] | None = None
        self._last_error: str | None = None
        self._previous_switch_interval: float | None = None
        self._loop_priority = 0
        self._reset_stats()

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout_s: float = 10.0) -> FrankaDriver:
        """Connect, configure the robot and start the loop holding the current pose; returns self."""
        if self._thread is not None:
            raise FrankaError("the driver is already started")
        self._robot = connect(self.config.host, self.config.realtime)
        self._robot.set_collision_behavior(*_collision_args(self.config))
        self._model = self._robot.load_model()
        self._previous_switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(self.config.gil_switch_interval_s)
        self._stop.clear()
        self._started.clear()
        self._thread = threading.Thread(target=self._run, name="franka-1kHz", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            self.stop()
            raise FrankaError(f"the torque loop did not start within {timeout_s:g} s: {self._last_error}")
        return self

    def stop(self) -> None:
        """Finish the motion (the robot holds in its own idle mode) and disconnect. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        if self._previous_switch_interval is not None:
            sys.setswitchinterval(self._previous_switch_interval)
            self._previous_switch_interval = None
        self._model = None
        self._robot = None  # closes the connection

    def __enter__(self) -> FrankaDriver:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- targets (any thread, 10–100 Hz) -------------------------------------------------------

    def set_joint_target(self, q: np.ndarray) -> bool:
        """Joint-impedance target (rad). Clipped into the joint limits minus the margin; returns True if clipped."""
        self._require_mode("joint_impedance", "set_joint_target")
        q = _finite(q, (N_JOINTS,), "joint target")
        clipped = np.clip(q, self._q_lo, self._q_hi)
        hit = bool(np.any(clipped != q))
        self._set_goal((clipped,), joint_clips=int(hit))
        return hit

    def set_ee_target(self, position: np.ndarray, quaternion_wxyz: np.ndarray) -> bool:
        """Cartesian-impedance target: EE position (m, base frame) clipped into the workspace box; True if clipped."""
        self._require_mode("cartesian_impedance", "set_ee_target")
        p = _finite(position, (3,), "EE target position")
        quat = normalized(quaternion_wxyz)
        clipped = np.clip(p, self._box_min, self._box_max)
        hit = bool(np.any(clipped != p))
        self._set_goal((clipped, quat), workspace_clips=int(hit))
        return hit

    def _set_goal(self, goal: tuple[np.ndarray, ...], workspace_clips: int = 0, joint_clips: int = 0) -> None:
        with self._lock:
            self._goal = goal
            self._goal_time = time.monotonic()
            self._stats["targets"] += 1
            self._stats["workspace_clips"] += workspace_clips
            self._stats["joint_target_clips"] += joint_clips

    def _require_mode(self, mode: str, method: str) -> None:
        if self.config.mode != mode:
            raise ValueError(f"{method} needs mode {mode!r}; this driver runs {self.config.mode!r} (config key mode)")

    def _inject_discontinuity(self, torque_step: np.ndarray) -> None:
        """Test only: add ``torque_step`` (Nm) to the next command *after* interpolation and rate limiting.

        The one way to make this driver send what the robot must reject, so tests can provoke a
        real reflex and exercise the recovery path.
        """
        self._injected = np.asarray(torque_step, dtype=np.float64)

    # -- reading (any thread) ------------------------------------------------------------------

    def state(self) -> FrankaState:
        """The latest cycle's state. Raises FrankaError before the first state arrived."""
        latest = self._latest
        if latest is None:
            raise FrankaError("no robot state yet: call start() first")
        rs, holding = latest
        position, quat = _pose(rs)
        return FrankaState(
            q=np.array(rs.q),
            dq=np.array(rs.dq),
            tau_J=np.array(rs.tau_J),
            position=position,
            quaternion_wxyz=normalized(quat),
            time_s=rs.time.to_sec(),
            robot_mode=rs.robot_mode.name,
            control_command_success_rate=float(rs.control_command_success_rate),
            holding=holding,
            running=self.running,
            last_error=self._last_error,
        )

    def stats(self) -> dict[str, float | int | str | None]:
        """Loop health since `start()`: rate, cycle-time percentiles, success rate, events."""
        st = dict(self._stats)
        n = min(st["cycles"], _RING)
        periods = self._periods[:n] if n else np.zeros(1)
        p50, p99 = np.percentile(periods, [50, 99]) if n else (0.0, 0.0)
        return {
            "cycles": st["cycles"],
            "loop_rate_hz_mean": st["cycles"] / st["loop_time_s"] if st["loop_time_s"] > 0 else 0.0,
            "cycle_time_p50_us": float(p50) * 1e6,
            "cycle_time_p99_us": float(p99) * 1e6,
            "cycle_time_max_us": float(periods.max()) * 1e6,
            "compute_time_p99_us": float(np.percentile(self._compute[:n], 99)) * 1e6 if n else 0.0,
            "command_success_rate_min": st["success_min"],
            "command_success_rate_mean": st["success_sum"] / st["cycles"] if st["cycles"] else 0.0,
            "targets": st["targets"],
            "reflexes": st["reflexes"],
            "recoveries": st["recoveries"],
            "recovery_time_s_max": st["recovery_time_s_max"],
            "workspace_clips": st["workspace_clips"],
            "joint_target_clips": st["joint_target_clips"],
            "timeouts": st["timeouts"],
            "torque_saturations": st["torque_saturations"],
            "loop_priority": self._loop_priority,
            "reflex_kinds": ", ".join(sorted(self._reflex_kinds)),
            "last_error": self._last_error,
        }

    def _reset_stats(self) -> None:
        self._stats: dict = dict.fromkeys(
            (
                "cycles",
                "targets",
                "reflexes",
                "recoveries",
                "workspace_clips",
                "joint_target_clips",
                "timeouts",
                "torque_saturations",
            ),
            0,
        )
        self._stats.update(loop_time_s=0.0, success_min=1.0, success_sum=0.0, recovery_time_s_max=0.0)
        self._periods = np.zeros(_RING)
        self._compute = np.zeros(_RING)
        self._reflex_kinds: set[str] = set()  # libfranka's names, e.g. controller_torque_discontinuity

    # -- the 1 kHz loop (its own thread) -------------------------------------------------------

    def _run(self) -> None:
        self._loop_priority = _raise_priority(self.config.loop_priority)
        recovering_since: float | None = None
        while not self._stop.is_set():
            try:
                self._motion(recovering_since)
                return  # stopped on request
            except franka.ControlException as e:  # a reflex: the robot stopped the motion
                self._last_error = str(e)
                self._stats["reflexes"] += 1
                kinds = re.findall(r'"(\w+)"', str(e)) or [str(e)]
                self._reflex_kinds.update(kinds)
                if not self.config.safety.automatic_error_recovery or self._stop.is_set():
                    return
                recovering_since = time.monotonic()
                try:
                    self._robot.automatic_error_recovery()
                except franka.FrankaException as e2:
                    self._last_error = f"{e}; automatic error recovery failed: {e2}"
                    return
            except franka.FrankaException as e:  # network loss, protocol error: nothing to recover
                self._last_error = str(e)
                return
            except Exception as e:  # a bug here: report it through state() too, not only on stderr
                self._last_error = f"driver error: {e!r}"
                raise
            finally:
                self._started.set()  # never leave start() waiting on a loop that has ended

    def _motion(self, recovering_since: float | None) -> None:
        """One torque-control motion, from start (holding the current pose) until stop or exception."""
        control = self._robot.start_torque_control()
        rs, _ = control.readOnce()
        self._begin(rs)
        if recovering_since is not None:
            self._stats["recoveries"] += 1
            took = time.monotonic() - recovering_since
            self._stats["recovery_time_s_max"] = max(self._stats["recovery_time_s_max"], took)
        tau_prev = np.zeros(N_JOINTS)  # torque mode starts from zero added torque
        control.writeOnce(franka.Torques(tau_prev.tolist()))
        self._started.set()
        stats, periods, compute = self._stats, self._periods, self._compute
        last, cycle = time.perf_counter(), 0
        while not self._stop.is_set():
            rs, _ = control.readOnce()
            now = time.perf_counter()
            tau = self._torque(rs)
            injected, self._injected = self._injected, None
            command = tau if injected is None else tau + injected
            control.writeOnce(franka.Torques(command.tolist()))
            tau_prev = tau
            i = stats["cycles"] % _RING
            periods[i] = now - last
            compute[i] = time.perf_counter() - now
            stats["loop_time_s"] += now - last
            stats["cycles"] += 1
            success = rs.control_command_success_rate
            stats["success_sum"] += success
            if (cycle := cycle + 1) > _SUCCESS_WINDOW:  # the robot's rate covers the last 100 commands
                stats["success_min"] = min(stats["success_min"], success)
            last = now
        finish = franka.Torques(tau_prev.tolist())
        finish.motion_finished = True
        control.writeOnce(finish)

    def _begin(self, rs: franka.RobotState) -> None:
        """Start (or restart after a reflex) holding exactly where the arm is."""
        c = self.config.impedance
        q = np.array(rs.q)
        position, quat = _pose(rs)
        self._q_null = q
        self._q_ref = SmoothReference(q, c.interpolation_time_s, np.minimum(c.max_joint_velocity, DQ_MAX))
        self._p_ref = SmoothReference(position, c.interpolation_time_s, c.max_ee_speed)
        self._r_ref = SmoothOrientation(quat, c.interpolation_time_s, c.max_ee_angular_speed)
        with self._lock:  # hold here until the first target (not a lost stream: no timeout counted)
            self._goal = (q,) if self.config.mode == "joint_impedance" else (position, quat)
            self._goal_time = -np.inf
        self._holding = True
        self._latest = (rs, True)

    def _torque(self, rs: franka.RobotState) -> np.ndarray:
        """This cycle's torque command: impedance law + Coriolis, saturated and rate-limited.

        The rate limit is taken from the command the robot last applied (``tau_J_d``), as libfranka's
        own ``limitRate`` does, not from the one this loop last sent: when a command misses its cycle
        (2.7 % of cycles on an idle 2-vCPU host, measured), the robot differences the next one against
        the one before it, and limiting against our own last command let that step reach twice the
        limit (measured: 1,900 Nm/s, a ``controller_torque_discontinuity`` reflex, while holding at a
        workspace face).
        """
        with self._lock:
            goal, goal_time = self._goal, self._goal_time
        if time.monotonic() - goal_time > self.config.safety.command_timeout_s:
            if not self._holding:  # stream lost: hold, once, where the moving reference can stop smoothly
                self._holding = True
                self._stats["timeouts"] += 1
                with self._lock:
                    self._goal = goal = (
                        (np.clip(self._q_ref.stopping_point(), self._q_lo, self._q_hi),)
                        if self.config.mode == "joint_impedance"
                        else (self._p_ref.stopping_point(), self._r_ref.stopping_point())
                    )
        else:
            self._holding = False
        self._latest = (rs, self._holding)
        q, dq = np.array(rs.q), np.array(rs.dq)
        if self.config.mode == "joint_impedance":
            q_ref = self._q_ref.step(goal[0], CONTROL_PERIOD_S)
            tau = self._k_joint * (q_ref - q) + self._d_joint * (self._q_ref.v - dq)
        else:
            tau = self._cartesian(rs, q, dq, goal)
        # keep joints out of their last margin whatever the law wants (Cartesian targets can ask for it)
        tau += self._k_joint * (np.clip(q, self._q_lo, self._q_hi) - q)
        tau += np.array(self._model.coriolis(rs))
        saturated = np.clip(tau, -self._tau_max, self._tau_max)
        if np.any(saturated != tau):
            self._stats["torque_saturations"] += 1
        applied = np.array(rs.tau_J_d)
        return applied + np.clip(saturated - applied, -self._dtau_max, self._dtau_max)

    def _cartesian(self, rs: franka.RobotState, q: np.ndarray, dq: np.ndarray, goal: tuple) -> np.ndarray:
        """Cartesian impedance on the zero Jacobian, with a null-space pull towards the start posture."""
        p_ref = self._p_ref.step(goal[0], CONTROL_PERIOD_S)
        quat_ref = self._r_ref.step(goal[1], CONTROL_PERIOD_S)
        position, quat = _pose(rs)
        rot_error = np.zeros(3)
        mujoco.mju_subQuat(rot_error, quat_ref, quat)  # in the EE frame
        rot = np.zeros(9)
        mujoco.mju_quat2Mat(rot, quat)
        error = np.concatenate([p_ref - position, rot.reshape(3, 3) @ rot_error])
        jac = np.array(self._model.zero_jacobian(rs)).reshape(7, 6).T  # column-major 6×7
        velocity_error = np.concatenate([self._p_ref.v, self._r_ref.angular_velocity_world()]) - jac @ dq
        force = self._k_cart * error + self._d_cart * velocity_error
        f_norm = float(np.linalg.norm(force[:3]))
        if f_norm > self.config.safety.max_ee_force:
            force[:3] *= self.config.safety.max_ee_force / f_norm
        k_ns = self.config.impedance.nullspace_stiffness
        # J⁺ J with a little damping (near singularities): cheaper than an SVD pinv at 1 kHz
        null = np.eye(N_JOINTS) - jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), jac)
        return jac.T @ force + null @ (k_ns * (self._q_null - q) - 2.0 * np.sqrt(k_ns) * dq)


def connect(host: str, realtime: str = "ignore") -> franka.Robot:
    """Connect with pylibfranka, turning its errors into ones that say what to check."""
    config = franka.RealtimeConfig.kIgnore if realtime == "ignore" else franka.RealtimeConfig.kEnforce
    try:
        return franka.Robot(host, config)
    except franka.NetworkException as e:
        raise FrankaUnreachableError(
            f"cannot reach the Franka at {host}: {str(e).rstrip('.')}. Check that the robot is powered on and booted, "
            f"that this machine is on its network (ping {host}; wired, same subnet), and that FCI is "
            "enabled in Desk (brakes released, FCI mode active)."
        ) from e
    except Exception as e:  # libfranka's IncompatibleVersionException has no Python class of its own
        m = re.search(r"server version:?\s*(\d+).*?library version:?\s*(\d+)", str(e), re.IGNORECASE)
        if m is None:
            raise
        server, library = m.groups()
        raise FrankaVersionError(
            f"the Franka at {host} speaks FCI protocol version {server}, but the installed pylibfranka "
            f"{franka.__version__} (libfranka {franka.__version__}) speaks version {library}. Install the "
            f"libfranka/pylibfranka release that uses server version {server} (the robot's system image "
            "decides it; see https://frankarobotics.github.io/docs/libfranka/docs/compatibility_with_image), "
            "e.g. `pip install pylibfranka==<that release>`, or update the robot's system image."
        ) from e


def _raise_priority(priority: int) -> int:
    """Put the calling thread under SCHED_FIFO ``priority`` if allowed; returns the priority it got (0: normal).

    Without it a busy machine preempts the loop for milliseconds (measured: cycle p99 3 ms with
    two other test runs on two cores); the loop blocks in ``readOnce`` every cycle, so it cannot
    starve the machine. Not allowed (no CAP_SYS_NICE / rtprio limit): the loop runs at normal priority.
    """
    if priority <= 0:
        return 0
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))  # 0: this thread
    except OSError:
        return 0
    return priority


def _collision_args(config: FrankaConfig) -> tuple[list[float], ...]:
    c = config.safety.collision
    return list(c.lower_torque), list(c.upper_torque), list(c.lower_force), list(c.upper_force)


def _pose(rs: franka.RobotState) -> tuple[np.ndarray, np.ndarray]:
    """EE position and (w, x, y, z) quaternion from the column-major ``O_T_EE``."""
    m = np.array(rs.O_T_EE).reshape(4, 4).T  # libfranka stores matrices column-major
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, m[:3, :3].flatten())
    return m[:3, 3].copy(), quat


def _finite(x: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.shape != shape or not np.all(np.isfinite(a)):
        raise ValueError(f"{what} must be {shape[0]} finite numbers, got {x!r}")
    return a
