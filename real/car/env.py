"""`CarEnv`: the car on its course in real time, driven through checkpoints, recovering from crashes by itself.

The `reflexlab.env.SingleEnv` FastRLAP drives, on the real car or sim-as-real (the car bridge behind the same topics).
It owns the control period: ``step`` rate-limits and sends (throttle, steering), sleeps to the next tick of a fixed
10 Hz schedule, then reads the newest odometry and IMU. The observation is `car-race`'s (`reflexlab.tasks.car_race
.spec`): speed, yaw rate, the next checkpoint in the car's frame, the previous action; the camera is read beside it
(`real.ros_camera.RosImageCamera` and `real.record`, as for any camera policy).

Checkpoints come from one recorded lap (`reflexlab.tasks.car_race.course.lap_checkpoints`); reaching one (within
``checkpoint_radius``) moves the goal to the next, and the last one, where the lap began, completes a lap: the
episode's success. The reward is FastRLAP's: the speed towards the next checkpoint (m/s).

Nobody minds the car, so it watches itself, as FastRLAP's car does:

* **collision**: the IMU's horizontal specific force beyond ``collision_accel`` (an impact), reported per step;
* **stuck**: its last ``STUCK_STEPS`` positions within ``STUCK_RADIUS``, which ends the episode (truncated);
* **recovery**: the next `reset` then backs the car away (reverse at ``recovery_throttle`` with a random steering
  angle for ``recovery_s``, then brakes) instead of waiting for a person. sim-as-real can put the car back on the
  course instead (``reset="sim"``), for benchmarks that start every episode alike. Any other reset lets the car
  drive on: a lap's end is the next lap's start, and the rate limit carries over from the last command.

Bad input is held, never sent: a non-finite or wrong-shaped action brakes the car for that step (reason named);
odometry or IMU older than ``max_state_age_s``, or odometry that jumps farther than the car can drive in a step
(a driver restart, a glitch), brakes it and ends the episode, naming the topic or the jump; the next episode
starts from the new reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from real.car.ros_car import CarState, RosCar
from real.env import NON_FINITE_ACTION
from real.ros_client import StaleStateError
from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.course import CheckpointTracker
from reflexlab.tasks.car_race.spec import goal_in_car_frame, make_spec, observation


@dataclass(frozen=True)
class CarEnvConfig:
    """Episode structure of the car's runs (lengths in m, times in s)."""

    episode_time_s: float = 60.0
    reset: Literal["recover", "sim"] = "recover"
    max_state_age_s: float = 0.25
    checkpoint_radius: float = C.CHECKPOINT_RADIUS
    collision_accel: float = 15.0  # m/s² of horizontal specific force: more than braking or cornering gives
    recovery_s: float = 1.0
    recovery_throttle: float = -0.3


class CarEnv:
    """The car in real time; gymnasium-style, with the `reflexlab.env.StepInfo` keys in ``info`` and the car's own
    (``collision``, ``stuck``, ``checkpoint``, ``lap_time_s``).

    Args:
        car: the car's topics.
        checkpoints: (K, 2) in the odometry frame, in driving order, the last where a lap begins and ends.
        config: episode structure and self-monitoring.
    """

    def __init__(self, car: RosCar, checkpoints: np.ndarray, config: CarEnvConfig | None = None) -> None:
        self.car = car
        self.config = config or CarEnvConfig()
        self.tracker = CheckpointTracker(checkpoints, self.config.checkpoint_radius)
        self.spec = make_spec()
        self.period = 1.0 / self.spec.control_rate_hz
        self.max_steps = max(1, round(self.config.episode_time_s * self.spec.control_rate_hz))
        self._max_move = C.MAX_ACTION_RATE * self.period
        # Twice what full speed covers in a step (a late step covers more), plus odometry's noise.
        self._max_jump = 2 * C.MAX_SPEED * self.period + 0.1
        self._recover_next = False
        self._open = False
        self._applied = np.zeros(2)  # the last command sent (throttle, steering), rate-limited
        self.laps: list[float] = []  # lap times (s) over the env's life

    # --- episodes ------------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        seed = 0 if seed is None else int(seed)
        rng = np.random.default_rng(seed)
        if self.config.reset == "sim":
            self.car.request_sim_reset(seed)
        elif self._recover_next:
            self._recover(rng)
        if self.config.reset == "sim" or self._recover_next:
            self._applied = np.zeros(2)  # the car is at rest; otherwise it drives on under the last command
        self._recover_next = False
        state = self.car.wait_for_state()
        self.tracker.start(state.pose)
        self._positions = [state.position]
        self._state = state
        self.steps = 0
        self._open = True
        self._t0 = time.monotonic()
        self._next_tick = self._t0 + self.period
        self._lap_start = self._t0
        return self._observe(state), {"seed": seed, "timestamp": 0.0}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._open:
            raise RuntimeError("step() before reset() or after the episode ended; call reset()")
        action = np.asarray(action, dtype=np.float64)
        reason, source = "", "policy"
        if action.shape != (2,):
            reason, source = f"policy action has shape {action.shape}, expected (2,)", "hold"
        elif not np.isfinite(action).all():
            reason, source = f"{NON_FINITE_ACTION}: {action.tolist()}", "hold"
        wanted = np.array([0.0, self._applied[1]]) if source == "hold" else np.clip(action, -1.0, 1.0)
        self._applied = self._applied + np.clip(wanted - self._applied, -self._max_move, self._max_move)
        self.car.send(*self._applied)
        self._sleep_until_tick()
        self.steps += 1
        info: dict[str, Any] = {
            "action": self._applied.copy(),
            "is_intervention": False,
            "source": source,
            "reason": reason,
            "success": False,
            "timestamp": time.monotonic() - self._t0,
            "collision": False,
            "stuck": False,
            "checkpoint": -1,
            "lap_time_s": 0.0,
        }
        try:
            state = self.car.state(max_age_s=self.config.max_state_age_s)
        except StaleStateError as e:
            return self._end_braking(f"stale state: {e}", info)
        jump = float(np.linalg.norm(state.position - self._state.position))
        if jump > self._max_jump:  # farther than the car can go in a step: the odometry reset or glitched
            return self._end_braking(
                f"odometry jump: {jump:.2f} m in one step (the car covers at most {self._max_jump:.2f} m)", info
            )
        self._state = state
        info["collision"] = bool(np.linalg.norm(state.acceleration) > self.config.collision_accel)
        self._positions = [*self._positions[-(C.STUCK_STEPS - 1) :], state.position]
        info["stuck"] = stuck = self._stuck()
        info["checkpoint"], lap = self.tracker.update(state.position)
        if lap:
            now = time.monotonic()
            info["lap_time_s"] = now - self._lap_start
            self.laps.append(info["lap_time_s"])
            self._lap_start = now
            info["success"] = True
        direction, _ = goal_in_car_frame(state.pose, self.tracker.goal)
        reward = float(state.speed * direction[0])  # speed towards the next checkpoint
        terminated = bool(info["success"])
        truncated = not terminated and (stuck or self.steps >= self.max_steps)
        if stuck and not terminated:
            info["reason"] = info["reason"] or f"stuck: {C.STUCK_STEPS} positions within {C.STUCK_RADIUS:g} m"
            self._recover_next = True
        elif truncated:
            info["reason"] = info["reason"] or f"time limit ({self.config.episode_time_s:g} s)"
        self._open = not (terminated or truncated)
        return self._observe(state), reward, terminated, truncated, info

    def close(self) -> None:
        self.car.send(0.0, 0.0)
        self._open = False

    # --- internals -----------------------------------------------------------------------------------------------
    def _end_braking(self, reason: str, info: dict[str, Any]) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Brake, end the episode (truncated) naming ``reason``; the last good observation is returned again."""
        self.car.send(0.0, float(self._applied[1]))  # the driver's watchdog brakes too if we go silent
        self._open = False
        info.update(reason=reason, source="hold")
        return self._observe(self._state), 0.0, False, True, info

    def _observe(self, state: CarState) -> np.ndarray:
        return observation(state.speed, state.yaw_rate, state.pose, self.tracker.goal, self._applied)

    def _stuck(self) -> bool:
        if len(self._positions) < C.STUCK_STEPS:
            return False
        p = np.array(self._positions)
        return bool(np.linalg.norm(p - p.mean(axis=0), axis=1).max() <= C.STUCK_RADIUS)

    def _recover(self, rng: np.random.Generator) -> None:
        """Back away from whatever stopped the car: reverse with a random steering angle, then brake."""
        steering = float(rng.uniform(-1.0, 1.0))
        end = time.monotonic() + self.config.recovery_s
        while time.monotonic() < end:
            self.car.send(self.config.recovery_throttle, steering)
            time.sleep(self.period)
        for _ in range(3):
            self.car.send(0.0, steering)
            time.sleep(self.period)

    def _sleep_until_tick(self) -> None:
        """A fixed schedule: a late step does not shift every later one."""
        now = time.monotonic()
        late = now - self._next_tick
        if late > 0:
            self._next_tick = now + self.period if late > self.period else self._next_tick + self.period
            return
        time.sleep(self._next_tick - now)
        self._next_tick += self.period
