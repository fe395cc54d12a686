"""A demonstration task's simulated scene as one robot: the `SingleEnv` protocol, stepped as fast as the CPU goes.

Real-world RL runs one actor/learner code on three robots: a real one, sim-as-real (the MuJoCo arm bridge over ROS 2
in real time, `real.env.RealEnv`) and this one, which skips ROS and the clock so that benchmarks over seeds finish.
Robot time is counted as steps × control period, and ``info["timestamp"]`` is that simulated clock. The step API and
the `StepInfo` keys are the real env's: a policy action that is not finite or has the wrong shape is held (the
previous target kept) and named in ``info["reason"]``, as `RealEnv` holds the arm.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.registry import get_task, require_kind


class SimSingleEnv:
    """Scene 0 of the task's batched scene env (``num_envs=1``), behind `reflexlab.env.SingleEnv`.

    Args:
        task: a demonstration task (``panda-push-t``).
        episode_steps: control steps before an episode is truncated (default: the task's).
    """

    def __init__(self, task: str = "panda-push-t", episode_steps: int | None = None) -> None:
        entry = get_task(task)
        require_kind(entry, "demo", "a simulated single robot")
        self.spec = entry.spec()
        steps = entry.config().episode_steps if episode_steps is None else episode_steps
        self._env = entry.task_class(1, steps)
        self.period = 1.0 / self.spec.control_rate_hz
        self.steps = 0
        self._held: np.ndarray | None = None
        self._open = False

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        seed = int(np.random.SeedSequence().entropy % 2**31) if seed is None else int(seed)
        obs = self._env.reset([seed])[0]
        self.steps = 0
        self._held = np.asarray(self._env.pusher_xy()[0], dtype=np.float64)
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
        sent = self._held if bad else np.clip(action, self.spec.action.lower, self.spec.action.upper)
        obs, reward, done, info = self._env.step(sent[None])
        self.steps += 1
        self._held = sent
        success = bool(info["success"][0])
        truncated = bool(done[0]) and not success
        reason = bad or (f"time limit ({self.steps} steps)" if truncated else "")
        self._open = not done[0]
        step_info = {
            "action": sent.copy(),
            "is_intervention": False,
            "source": "hold" if bad else "policy",
            "reason": reason,
            "success": success,
            "timestamp": self.steps * self.period,
        }
        return obs[0], float(reward[0]), success, truncated, step_info

    def close(self) -> None:
        self._open = False
