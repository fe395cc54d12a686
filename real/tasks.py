"""How a task's Spec maps onto an arm's state and targets on the real robot.

The sim task computes observations from MuJoCo's state; on the robot the same quantities come
from the arm driver (end-effector pose) and a tracker (object poses). One small adapter per task
says how, so `RealEnv` stays task-free (N tasks + M methods cost O(N + M) code).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from real.ros_arm import ArmState, yaw_of
from reflexlab.spec import Spec
from reflexlab.tasks.panda_peg_insert import constants as PC
from reflexlab.tasks.panda_peg_insert import expert as peg_expert
from reflexlab.tasks.panda_peg_insert import spec as peg
from reflexlab.tasks.panda_push_t import constants as C
from reflexlab.tasks.panda_push_t import geometry as G
from reflexlab.tasks.panda_push_t.expert import expert_policy
from reflexlab.tasks.panda_push_t.spec import make_spec, observation

DOWN = np.array([0.0, 1.0, 0.0, 0.0])  # w, x, y, z: the tool pointing down at its home yaw (both arm tasks)


class ArmTask(Protocol):
    spec: Spec
    tracked_objects: tuple[str, ...]  # the objects whose poses a tracker must publish (`ArmTopics.tracking`)

    def observation(self, state: ArmState) -> np.ndarray:
        """The policy observation in the Spec's order."""
        ...

    def ee_target(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """End-effector (position, quaternion w-x-y-z) in the base frame for a raw action."""
        ...

    def hold_action(self, state: ArmState) -> np.ndarray:
        """The action that keeps the arm where it is (what a hold commands)."""
        ...

    def home_action(self) -> np.ndarray:
        """The scripted reset pose, as an action."""
        ...

    def reset_path(self, state: ArmState) -> list[np.ndarray]:
        """End-effector waypoints (base frame) from ``state`` to the home pose that disturb nothing on the way."""
        ...

    def ee_action(self, position: np.ndarray) -> np.ndarray:
        """The action that sends the end effector to ``position`` (base frame; what teleop integrates)."""
        ...

    def clip_ee(self, position: np.ndarray) -> np.ndarray:
        """``position`` moved into the region the action space can command (teleop's anti-windup)."""
        ...

    def reward(self, state: ArmState) -> tuple[float, bool]:
        """Dense reward and whether the task is solved in this state."""
        ...

    def expert(self, seed: int) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[], None]]:
        """The task's scripted expert as (act on a policy observation, reset); for sim-as-real sessions."""
        ...

    def failure_boxes(self) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """Tracked object → (low, high) box in the base frame; leaving it fails the episode."""
        ...


@dataclass
class PushTTask:
    """`panda-push-t`: the pusher tip's x, y is the action; the block's pose comes from the tracker."""

    spec: Spec
    tip_height: float
    tip_quat: np.ndarray  # (4,) pusher pointing down
    reset_lift: float = 0.06  # m: the block is 30 mm tall
    tracked_objects: ClassVar[tuple[str, ...]] = ("block",)

    @classmethod
    def create(cls) -> PushTTask:
        return cls(make_spec(), C.PUSHER_HEIGHT, DOWN)

    def observation(self, state: ArmState) -> np.ndarray:
        return observation(state.ee_pos[:2], self._block_pose(state))

    def ee_target(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.array([action[0], action[1], self.tip_height]), self.tip_quat

    def hold_action(self, state: ArmState) -> np.ndarray:
        return self.ee_action(state.ee_pos)

    def ee_action(self, position: np.ndarray) -> np.ndarray:
        return np.asarray(position, dtype=np.float64)[:2].copy()  # the tip stays at its pushing height

    def reset_path(self, state: ArmState) -> list[np.ndarray]:
        """Up clear of the block, over to home, down: a straight line at pushing height would push the block."""
        home = self.home_action()
        up = self.tip_height + self.reset_lift
        return [
            np.array([state.ee_pos[0], state.ee_pos[1], up]),
            np.array([home[0], home[1], up]),
            np.array([home[0], home[1], self.tip_height]),
        ]

    def clip_ee(self, position: np.ndarray) -> np.ndarray:
        low, high = self.spec.action.lower, self.spec.action.upper
        return np.array([*np.clip(position[:2], low, high), self.tip_height])

    def home_action(self) -> np.ndarray:
        low, high = np.array(self.spec.action.lower), np.array(self.spec.action.upper)
        return np.array([low[0] + 0.05, 0.5 * (low[1] + high[1])])  # near the robot, clear of the goal

    def reward(self, state: ArmState) -> tuple[float, bool]:
        coverage = float(G.coverage(self._block_pose(state)[None])[0])
        return coverage, coverage >= C.SUCCESS_COVERAGE

    def expert(self, seed: int) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[], None]]:
        return expert_policy(seed)

    def failure_boxes(self) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        low, high = self.spec.action.lower, self.spec.action.upper
        margin = 0.05  # the block may overhang the pusher's workspace a little; further is off the table
        return {"block": ((low[0] - margin, low[1] - margin, -0.05), (high[0] + margin, high[1] + margin, 0.10))}

    @staticmethod
    def _block_pose(state: ArmState) -> np.ndarray:
        block = state.objects["block"]
        return np.array([block[0], block[1], yaw_of(block[3:])])


@dataclass
class PegInsertTask:
    """`panda-peg-insert`: the peg tip's x, y, z is the action; the hole's position comes from the tracker.

    Success is judged on the tracked hole: a tip 2 cm below the rim within the base's footprint can only be
    in the hole, so the tracker's few millimetres of error do not matter (`spec.inserted_depth`).
    """

    spec: Spec
    tracked_objects: ClassVar[tuple[str, ...]] = ("hole",)

    @classmethod
    def create(cls) -> PegInsertTask:
        return cls(peg.make_spec())

    def observation(self, state: ArmState) -> np.ndarray:
        return peg.observation(state.ee_pos, self._hole(state))

    def ee_target(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(action, dtype=np.float64)[:3].copy(), DOWN

    def hold_action(self, state: ArmState) -> np.ndarray:
        return self.ee_action(state.ee_pos)

    def ee_action(self, position: np.ndarray) -> np.ndarray:
        return np.asarray(position, dtype=np.float64)[:3].copy()

    def reset_path(self, state: ArmState) -> list[np.ndarray]:
        """Straight up out of the hole first (sideways, the peg would drag the walls), then over to home."""
        home = self.home_action()
        up = max(float(state.ee_pos[2]), home[2])
        return [np.array([state.ee_pos[0], state.ee_pos[1], up]), home]

    def clip_ee(self, position: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(position, dtype=np.float64)[:3], self.spec.action.lower, self.spec.action.upper)

    def home_action(self) -> np.ndarray:
        low, high = np.array(self.spec.action.lower), np.array(self.spec.action.upper)
        return np.array([low[0] + 0.05, 0.5 * (low[1] + high[1]), PC.INIT_TIP_Z[1]])  # near the robot, above all

    def reward(self, state: ArmState) -> tuple[float, bool]:
        hole = self._hole(state)
        return float(peg.progress(state.ee_pos, hole)), bool(peg.seated(state.ee_pos, hole))

    def expert(self, seed: int) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[], None]]:
        return peg_expert.expert_policy(seed)

    def failure_boxes(self) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
        """The hole base is fixed to the table: a tracked hole outside the region holes are placed in is lost."""
        margin = 0.03
        low, high = PC.INIT_HOLE_LOW, PC.INIT_HOLE_HIGH
        return {"hole": ((low[0] - margin, low[1] - margin, -0.05), (high[0] + margin, high[1] + margin, 0.10))}

    @staticmethod
    def _hole(state: ArmState) -> np.ndarray:
        return np.asarray(state.objects["hole"][:2], dtype=np.float64)


ARM_TASKS = {"panda-push-t": PushTTask.create, "panda-peg-insert": PegInsertTask.create}


def arm_task(name: str) -> ArmTask:
    """The adapter of a task that can run on an arm; the error lists the ones that can."""
    if name not in ARM_TASKS:
        raise ValueError(f"task {name!r} has no real-robot adapter; available: {', '.join(sorted(ARM_TASKS))}")
    return ARM_TASKS[name]()
