"""The single-environment protocol: what a real robot (or sim-as-real) looks like to a learning loop.

Sim backends are batched torch `VecEnv`s for PPO; a real robot is one robot, in real time, with a
person who may take over. The real-world RL loops (RL-100, HABC, RLPD) depend on this protocol,
never on `real/`, so the CLI can hand them a Franka, a ROS 2 robot or the MuJoCo arm bridge.

The step API is gymnasium's (obs, reward, terminated, truncated, info), with the keys of
`StepInfo` always present in ``info``: who commanded the step and what was actually executed
matter as much as what the policy asked for (an intervention's action is the label HIL-SERL and
HABC learn from).
"""

from __future__ import annotations

from typing import Any, Protocol, TypedDict

import numpy as np

from reflexlab.spec import Spec


class StepInfo(TypedDict):
    """Keys every single env puts in a step's ``info``."""

    action: np.ndarray  # what the robot was commanded (the person's action during an intervention)
    is_intervention: bool  # a person commanded this step
    source: str  # "policy" | "teleop" | "handback" | "hold"
    reason: str  # why the step was held or the episode ended early ("" when nothing happened)
    success: bool  # the success detector fired at this step
    timestamp: float  # seconds since the episode's reset, on the env's monotonic clock


class SingleEnv(Protocol):
    """One robot, stepped in real time at ``spec.control_rate_hz``."""

    spec: Spec

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Bring the scene to a start state (scripted, by a person, or by the simulator) and observe."""
        ...

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Command ``action`` for one control period; ``info`` holds the `StepInfo` keys."""
        ...

    def close(self) -> None:
        """Hold the robot and release its connections."""
        ...
