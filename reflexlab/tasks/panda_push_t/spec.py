"""`panda-push-t`'s interface: what the policy observes and commands, shared by the sim, sim-as-real and the robot."""

from __future__ import annotations

import numpy as np

from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec
from reflexlab.tasks.panda_push_t import constants as C
from reflexlab.tasks.panda_push_t import geometry as G


def make_spec() -> Spec:
    """The task's interface: what the policy observes and commands (a plain, one-step Spec)."""
    policy = ObsGroup(
        "policy",
        (
            ObsTerm("pusher_pos", 2, "m, base frame"),
            ObsTerm("block_pos", 2, "m, base frame, block centre of mass"),
            ObsTerm("block_yaw", 2, "cos, sin of yaw"),
        ),
    )
    action = ActionSpec(
        kind="ee_position",
        names=("pusher_x", "pusher_y"),
        scale=1.0,
        offset=(0.0, 0.0),
        lower=C.WORKSPACE_LOW,
        upper=C.WORKSPACE_HIGH,
        max_rate=C.MAX_PUSHER_SPEED,
    )
    return Spec(
        robot=C.ROBOT_NAME,
        task=C.TASK_NAME,
        observation_groups=(policy,),
        policy_group="policy",
        action=action,
        control_rate_hz=1.0 / C.CONTROL_DT,
        physics_rate_hz=1.0 / C.PHYSICS_DT,
        extra={"goal_pose": list(C.GOAL_POSE), "success_coverage": C.SUCCESS_COVERAGE},
    )


def observation(pusher_xy: np.ndarray, block_pose: np.ndarray) -> np.ndarray:
    """Policy observation(s) in the Spec's order from pusher (…, 2) and block (…, 3) poses."""
    yaw = block_pose[..., 2]
    return np.concatenate([pusher_xy, block_pose[..., :2], np.stack([np.cos(yaw), np.sin(yaw)], -1)], -1).astype(
        np.float32
    )


def block_pose_of(obs: np.ndarray) -> np.ndarray:
    """The block's (x, y, yaw) back from policy observation(s) (…, 6)."""
    return np.stack([obs[..., 2], obs[..., 3], np.arctan2(obs[..., 5], obs[..., 4])], -1)


def coverage_of(obs: np.ndarray) -> float:
    """The task's progress in one observation: the share of the goal the block covers (success at 0.95)."""
    return float(G.coverage(block_pose_of(np.asarray(obs, dtype=np.float64))))


def block_in_workspace(obs: np.ndarray) -> bool:
    """Whether the block is still where the pusher can reach round it (else a push-T episode cannot recover)."""
    return bool(np.all(np.asarray(obs[2:4]) >= C.WORKSPACE_LOW) and np.all(np.asarray(obs[2:4]) <= C.WORKSPACE_HIGH))
