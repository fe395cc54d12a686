"""`RealEnv`: one arm, in real time, with resets, success signals, time limits and interventions.

This is the `reflexlab.env.SingleEnv` the real-world RL loops and `reflexlab record` drive. It
owns the control period: ``step`` commands an action, sleeps until the next tick of a fixed
schedule (``spec.control_rate_hz``), then observes the newest state — so the observation a step
returns is the one the next action will be computed from, as on a robot. Underneath is a
`real.ros_arm.RosArm`, the same topics whether `franka_node` drives a Franka or the MuJoCo arm
bridge plays the robot (sim-as-real), and a task adapter (`real.tasks`).

Safety, in the order it can bite:

* A person can take over at any step (`Intervention`); the step records who commanded it and the
  action actually executed.
* A non-finite or wrong-shaped action is never sent: the arm holds and the episode is truncated
  with the reason.
* State older than ``max_state_age_s`` (driver or tracker died): nothing is sent (the driver's own
  watchdog holds the arm), the episode is truncated and the reason names the topic.
* Actions are clipped to the Spec's limits and rate-limited to its ``max_rate`` before they
  leave; the driver enforces its own workspace box and limits again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from real.ros_arm import ArmState, RosArm, StaleStateError
from real.tasks import ArmTask

ResetStep = Literal["scripted", "human", "sim"]
NON_FINITE_ACTION = "policy action is not finite"  # the reason of a step held because the policy asked for NaN


@dataclass(frozen=True)
class Decision:
    """Who commands this step, and with what."""

    action: np.ndarray
    is_intervention: bool = False
    source: str = "policy"  # "policy" | "teleop" | "handback" | "hold"
    reason: str = ""


class Intervention(Protocol):
    """A person's say in each step (the teleop arbiter); see `teleop.arbiter`."""

    def decide(self, policy_action: np.ndarray, hold_action: np.ndarray, state: ArmState) -> Decision: ...

    def reset(self, seed: int | None = None) -> None:
        """A new episode; ``seed`` is the episode's (None when the caller gave none), for a scripted stand-in."""


class Detector(Protocol):
    """A success/failure signal beside the task's own (a person's key press, a classifier, a force limit)."""

    def __call__(self, state: ArmState, obs: np.ndarray) -> tuple[bool, bool, str]:
        """(success, failure, reason) for this state."""
        ...


@dataclass(frozen=True)
class RealEnvConfig:
    """Episode structure of a real-robot session.

    Args:
        episode_time_s: time limit; the step that reaches it is truncated.
        reset: what happens at reset, in order: ``scripted`` drives the arm to the task's home pose,
            ``human`` holds the arm and waits for a person (``prompt``), ``sim`` asks the simulator to
            reset its scene (sim-as-real's stand-in for the person).
        max_state_age_s: older arm/tracker state ends the episode (the driver holds the arm).
        home_tolerance_m: a scripted reset waypoint is reached when the end effector is this close to it.
        reset_speed_m_s: end-effector speed along the scripted reset path.
        reset_timeout_s: a scripted reset that has not arrived by then fails, naming the distance left.
    """

    episode_time_s: float = 30.0
    reset: tuple[ResetStep, ...] = ("scripted", "human")
    max_state_age_s: float = 0.25
    home_tolerance_m: float = 0.01
    reset_speed_m_s: float = 0.15
    reset_timeout_s: float = 10.0
    prompt: str = "Reset the scene, then press Enter to start the episode."


@dataclass
class EnvStats:
    steps: int = 0
    late_steps: int = 0  # the step's work overran the control period
    worst_lateness_ms: float = 0.0
    clipped_actions: int = 0
    held_steps: int = 0
    truncations: dict[str, int] = field(default_factory=dict)


class RealEnv:
    """An arm task in real time; gymnasium-style, with the `reflexlab.env.StepInfo` keys in ``info``.

    Args:
        arm: the arm's topics.
        task: maps the Spec onto arm state and targets.
        config: episode structure.
        intervention: a person's say in each step (None: the policy alone).
        detectors: extra success/failure signals.
        wait_for_person: how a ``human`` reset waits (default: the terminal's Enter key).
    """

    def __init__(
        self,
        arm: RosArm,
        task: ArmTask,
        config: RealEnvConfig | None = None,
        intervention: Intervention | None = None,
        detectors: tuple[Detector, ...] = (),
        wait_for_person: Callable[[str], None] | None = None,
    ) -> None:
        self.arm, self.task, self.spec = arm, task, task.spec
        self.config = config or RealEnvConfig()
        self.intervention = intervention
        self.detectors = detectors
        self.wait_for_person = wait_for_person or (lambda prompt: input(prompt))
        self.period = 1.0 / self.spec.control_rate_hz
        self.max_steps = max(1, round(self.config.episode_time_s * self.spec.control_rate_hz))
        self._low, self._high = np.array(self.spec.action.lower), np.array(self.spec.action.upper)
        self._max_move = self.spec.action.max_rate * self.period if self.spec.action.max_rate else np.inf
        self.stats = EnvStats()
        self._state: ArmState | None = None
        self._last_sent: np.ndarray | None = None
        self._episode_open = False

    # --- episodes -----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        episode_seed = seed
        seed = 0 if seed is None else int(seed)
        self._hold()
        for what in self.config.reset:
            if what == "sim":
                self.arm.request_sim_reset(seed)
            elif what == "human":
                self.wait_for_person(self.config.prompt)
            elif what == "scripted":
                self._go_home()
            else:
                raise ValueError(f"unknown reset step {what!r}; use scripted, human or sim")
        self._state = self.arm.wait_for_state()
        self._last_sent = self.task.hold_action(self._state)
        if self.intervention is not None:
            self.intervention.reset(episode_seed)
        self.steps = 0
        self._episode_open = True
        self._t0 = time.monotonic()
        self._next_tick = self._t0 + self.period
        obs = self._checked_obs(self._state)
        if obs is None:
            raise ValueError(f"{self.spec.task}: the first observation after reset is not finite: {self._reason}")
        return obs, {"seed": seed, "timestamp": 0.0}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._episode_open or self._state is None:
            raise RuntimeError("step() before reset() or after the episode ended; call reset()")
        hold = self.task.hold_action(self._state)
        decision = self._decide(action, hold)
        sent = self._send(decision.action)
        self._sleep_until_tick()
        self.steps += 1
        self.stats.steps += 1
        info: dict[str, Any] = {
            "action": sent,
            "is_intervention": decision.is_intervention,
            "source": decision.source,
            "reason": decision.reason,
            "success": False,
            "timestamp": time.monotonic() - self._t0,
        }
        try:
            state = self.arm.state(max_age_s=self.config.max_state_age_s)
        except StaleStateError as e:
            return self._end_early(f"stale state: {e}", info)
        obs = self._checked_obs(state)
        if obs is None:
            return self._end_early(self._reason, info)
        self._state = state
        reward, solved = self.task.reward(state)
        success, failure, why = solved, False, ""
        for detect in self.detectors:
            s, f, r = detect(state, obs)
            success, failure, why = success or s, failure or f, why or r
        info["success"] = bool(success)
        info["reason"] = info["reason"] or why
        terminated = bool(success or failure)
        truncated = not terminated and self.steps >= self.max_steps
        if truncated:
            info["reason"] = info["reason"] or f"time limit ({self.config.episode_time_s:g} s)"
        self._episode_open = not (terminated or truncated)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self._hold()
        self.arm.close()

    # --- internals ----------------------------------------------------------------------------
    def _decide(self, action: np.ndarray, hold: np.ndarray) -> Decision:
        action = np.asarray(action, dtype=np.float64)
        bad = None
        if action.shape != (self.spec.action.size,):
            bad = f"policy action has shape {action.shape}, expected ({self.spec.action.size},)"
        elif not np.isfinite(action).all():
            bad = f"{NON_FINITE_ACTION}: {action.tolist()}"
        if self.intervention is not None:
            decision = self.intervention.decide(hold if bad else action, hold, self._state)
            if not (bad and decision.source == "policy"):
                return decision
        if bad:
            return Decision(hold, False, "hold", bad)
        return Decision(action)

    def _send(self, action: np.ndarray) -> np.ndarray:
        """Clip to the Spec's limits and rate, then command; returns what was sent."""
        a = np.clip(action, self._low, self._high)
        if self._last_sent is not None:
            delta = a - self._last_sent
            dist = float(np.linalg.norm(delta))
            if dist > self._max_move:
                a = self._last_sent + delta * (self._max_move / dist)
        if not np.allclose(a, action):
            self.stats.clipped_actions += 1
        self.arm.send_ee_target(*self.task.ee_target(a))
        self._last_sent = a
        return a

    def _sleep_until_tick(self) -> None:
        """A fixed schedule: a late step does not shift every later one (the policy stays at its rate)."""
        now = time.monotonic()
        late = now - self._next_tick
        if late > 0:
            self.stats.late_steps += 1
            self.stats.worst_lateness_ms = max(self.stats.worst_lateness_ms, late * 1e3)
            self._next_tick = now + self.period if late > self.period else self._next_tick + self.period
            return
        time.sleep(self._next_tick - now)
        self._next_tick += self.period

    def _checked_obs(self, state: ArmState) -> np.ndarray | None:
        obs = self.task.observation(state)
        if obs.shape != (self.spec.policy_obs.size,):
            self._reason = f"observation has shape {obs.shape}, expected ({self.spec.policy_obs.size},)"
            return None
        if not np.isfinite(obs).all():
            names = [t.name for t in self.spec.policy_obs.terms]
            bad = sorted({names[i] for i in self._term_of(np.flatnonzero(~np.isfinite(obs)))})
            self._reason = f"non-finite observation in {', '.join(bad)}"
            return None
        return obs

    def _term_of(self, indices: np.ndarray) -> list[int]:
        ends = np.cumsum([t.size for t in self.spec.policy_obs.terms])
        return [int(np.searchsorted(ends, i, side="right")) for i in indices]

    def _end_early(self, reason: str, info: dict[str, Any]) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """The robot is held, the episode truncated; the last good observation is returned again."""
        self._hold()
        self.stats.held_steps += 1
        kind = reason.split(":")[0]
        self.stats.truncations[kind] = self.stats.truncations.get(kind, 0) + 1
        info.update(reason=reason, source="hold")
        self._episode_open = False
        assert self._state is not None
        return self.task.observation(self._state), 0.0, False, True, info

    def _hold(self) -> None:
        """Command the arm to stay where it last was (the driver's watchdog holds it if we go silent)."""
        if self._state is not None and self._episode_open:
            self.arm.send_ee_target(*self.task.ee_target(self.task.hold_action(self._state)))
        self._episode_open = False

    def _go_home(self) -> None:
        """Drive the end effector along the task's reset path (e.g. up, over, down), waypoint by waypoint."""
        state = self.arm.wait_for_state()
        _, quat = self.task.ee_target(self.task.home_action())
        target = state.ee_pos.copy()
        step = self.config.reset_speed_m_s * self.period
        deadline = time.monotonic() + self.config.reset_timeout_s
        for waypoint in self.task.reset_path(state):
            while True:
                delta = waypoint - target
                dist = float(np.linalg.norm(delta))
                target = waypoint.copy() if dist <= step else target + delta * (step / dist)
                self.arm.send_ee_target(target, quat)
                time.sleep(self.period)
                left = float(np.linalg.norm(self.arm.state().ee_pos - waypoint))
                if dist <= step and left <= self.config.home_tolerance_m:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"scripted reset: the end effector is still {left * 1e3:.0f} mm from waypoint "
                        f"{waypoint.round(3).tolist()} after {self.config.reset_timeout_s:g} s "
                        "(blocked, or the driver is holding?)"
                    )
