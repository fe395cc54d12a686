"""A demonstration task's simulated scene as one robot: the `SingleEnv` protocol, stepped as fast as the CPU goes.

Real-world RL runs one actor/learner code on three robots: a real one, sim-as-real (the MuJoCo arm bridge over ROS 2
in real time, `real.env.RealEnv`) and this one, which skips ROS and the clock so that benchmarks over seeds finish.
Robot time is counted as steps × control period, and ``info["timestamp"]`` is that simulated clock. The step API and
the `StepInfo` keys are the real env's: a policy action that is not finite or has the wrong shape is held (the
previous target kept) and named in ``info["reason"]``, as `RealEnv` holds the arm. An ``intervention`` (the hook
`RealEnv` takes: a teleop device behind the arbiter, or `teleop.scripted.ScriptedIntervention` standing in for the
person) is asked every step, with the current observation as its state.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from sim.registry import get_task, require_kind


class Decision(Protocol):
    action: np.ndarray
    is_intervention: bool
    source: str
    reason: str


class Intervention(Protocol):
    """A person's say in each step (see `real.env.Intervention`); ``state`` is the observation here."""

    def decide(self, policy_action: np.ndarray, hold_action: np.ndarray, state: np.ndarray) -> Decision: ...

    def reset(self, seed: int | None = None) -> None: ...


class SimSingleEnv:
    """Scene 0 of the task's batched scene env (``num_envs=1``), behind `reflexlab.env.SingleEnv`.

    Args:
        task: a demonstration task (``panda-push-t``, ``panda-peg-insert``).
        episode_steps: control steps before an episode is truncated (default: the task's).
        intervention: who may take over (None: the policy commands every step).
    """

    def __init__(
        self, task: str = "panda-push-t", episode_steps: int | None = None, intervention: Intervention | None = None
    ) -> None:
        entry = get_task(task)
        require_kind(entry, "demo", "a simulated single robot")
        self.spec = entry.spec()
        steps = entry.config().episode_steps if episode_steps is None else episode_steps
        self._env = entry.task_class(1, steps)
        self.period = 1.0 / self.spec.control_rate_hz
        self.steps = 0
        self._held: np.ndarray | None = None
        self._obs: np.ndarray | None = None
        self._open = False
        self.intervention = intervention

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else int(seed)
        obs = self._env.reset([seed])[0]
        self._obs = obs
        if self.intervention is not None:
            self.intervention.reset(seed)
        self.steps = 0
        self._held = np.asarray(self._env.hold_action()[0], dtype=np.float64)
        self._open = True
        return obs, {"seed": seed, "timestamp": 0.0}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self._open or self._held is None:
            raise RuntimeError("step() before reset() or after the episode ended; call reset()")
        action = np.asarray(action, dtype=np.float64)
        bad = ""
        if action.shape != (self.spec.action.size,):
            bad = f"policy action has shape {action.shape}, expected ({self.spec.action.size},)"
        elif not np.isfinite(action).all():
            bad = f"policy action is not finite: {action.tolist()}"
        command, person, source = (self._held if bad else action), False, "hold" if bad else "policy"
        if self.intervention is not None:
            decision = self.intervention.decide(command, self._held, self._obs)
            if decision.source != "policy":
                command, person, source = (
                    np.asarray(decision.action, np.float64),
                    decision.is_intervention,
                    decision.source,
                )
                bad = bad or decision.reason
        sent = np.clip(command, self.spec.action.lower, self.spec.action.upper)
        obs, reward, done, info = self._env.step(sent[None])
        self.steps += 1
        self._held, self._obs = sent, obs[0]
        success = bool(info["success"][0])
        truncated = bool(done[0]) and not success
        reason = bad or (f"time limit ({self.steps} steps)" if truncated else "")
        self._open = not done[0]
        step_info = {
            "action": sent.copy(),
            "is_intervention": person,
            "source": source,
            "reason": reason,
            "success": success,
            "timestamp": self.steps * self.period,
        }
        return obs[0], float(reward[0]), success, truncated, step_info

    def close(self) -> None:
        self._open = False
