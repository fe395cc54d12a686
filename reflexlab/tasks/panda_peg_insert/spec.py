"""`panda-peg-insert`'s interface and scores, shared by the sim, sim-as-real and the robot.

The policy sees the peg tip (the arm's forward kinematics: exact) and the hole's centre as a tracker
reports it (biased and noisy, see `config`); it commands where the peg tip should be. Scores are functions
of a tip position and a hole position so that the simulator can evaluate them on the true hole pose while
the robot and the scripted person evaluate them on the tracked one.
"""

from __future__ import annotations

import numpy as np

from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec
from reflexlab.tasks.panda_peg_insert import constants as C

_REACH = 0.05  # m: lateral distance from the hole at which the progress's alignment term starts to count
_SLACK = (C.HOLE_SIZE - C.PEG_SIZE) / 2 * np.sqrt(2)  # the farthest the peg's axis can be off the hole's, inside it


def make_spec() -> Spec:
    """The task's interface: what the policy observes and commands (a plain, one-step Spec)."""
    policy = ObsGroup(
        "policy",
        (
            ObsTerm("peg_tip_pos", 3, "m, base frame"),
            ObsTerm("hole_pos", 2, "m, base frame, hole centre as tracked (biased, noisy)"),
        ),
    )
    action = ActionSpec(
        kind="ee_position",
        names=("peg_x", "peg_y", "peg_z"),
        scale=1.0,
        offset=(0.0, 0.0, 0.0),
        lower=C.WORKSPACE_LOW,
        upper=C.WORKSPACE_HIGH,
        max_rate=C.MAX_TIP_SPEED,
    )
    return Spec(
        robot=C.ROBOT_NAME,
        task=C.TASK_NAME,
        observation_groups=(policy,),
        policy_group="policy",
        action=action,
        control_rate_hz=1.0 / C.CONTROL_DT,
        physics_rate_hz=1.0 / C.PHYSICS_DT,
        extra={
            "peg_size": C.PEG_SIZE,
            "hole_size": C.HOLE_SIZE,
            "hole_top": C.HOLE_TOP,
            "success_depth": C.SUCCESS_DEPTH,
        },
    )


def observation(tip_xyz: np.ndarray, hole_xy: np.ndarray) -> np.ndarray:
    """Policy observation(s) in the Spec's order from peg tip (…, 3) and tracked hole (…, 2) positions."""
    return np.concatenate([tip_xyz, hole_xy], -1).astype(np.float32)


def inserted_depth(tip_xyz: np.ndarray, hole_xy: np.ndarray) -> np.ndarray:
    """How far the peg tip is below the rim, inside the hole (m; 0 when it is not in the hole).

    A tip below the rim within the base's footprint can only be in the hole (the walls are solid), so the
    footprint, not the 0.5 mm clearance, is the lateral test: it holds with a tracked hole pose a few
    millimetres off as well as with the true one.
    """
    tip_xyz, hole_xy = np.asarray(tip_xyz, np.float64), np.asarray(hole_xy, np.float64)
    inside = np.abs(tip_xyz[..., :2] - hole_xy).max(axis=-1) < C.BASE_HALF
    return np.where(inside, np.maximum(C.HOLE_TOP - tip_xyz[..., 2], 0.0), 0.0)


def progress(tip_xyz: np.ndarray, hole_xy: np.ndarray) -> np.ndarray:
    """Dense progress in [0, 1] (the reward, as coverage is push-T's); 1 when the peg is seated in the true hole.

    A quarter for lining up over the hole (full within the clearance), a quarter for coming down to the rim
    while lined up, half for depth up to ``SUCCESS_DEPTH``; each term grows along the way an insertion goes.
    """
    tip_xyz = np.asarray(tip_xyz, np.float64)
    lateral = np.linalg.norm(tip_xyz[..., :2] - np.asarray(hole_xy, np.float64), axis=-1)
    align = np.clip(1.0 - np.maximum(lateral - _SLACK, 0.0) / _REACH, 0.0, 1.0)
    lowered = np.clip(1.0 - (tip_xyz[..., 2] - C.HOLE_TOP) / (C.INIT_TIP_Z[1] - C.HOLE_TOP), 0.0, 1.0)
    depth = np.clip(inserted_depth(tip_xyz, hole_xy) / C.SUCCESS_DEPTH, 0.0, 1.0)
    return 0.25 * align + 0.25 * align * lowered + 0.5 * depth


def seated(tip_xyz: np.ndarray, hole_xy: np.ndarray) -> np.ndarray:
    """Success: the peg tip at least ``SUCCESS_DEPTH`` (2 cm) deep in the hole."""
    return inserted_depth(tip_xyz, hole_xy) >= C.SUCCESS_DEPTH


def progress_of(obs: np.ndarray) -> float:
    """Progress judged from one observation (the tracked hole): what the scripted person watches."""
    obs = np.asarray(obs, np.float64)
    return float(progress(obs[:3], obs[3:5]))


def in_safety_region(obs: np.ndarray) -> bool:
    """Whether the peg is where it may be: above the rim, or down inside the hole.

    A tip below the rim outside the base's footprint is beside the hole base, heading for the table or the
    base's side: a policy there is about to crash the peg, and the person should take over.
    """
    obs = np.asarray(obs, np.float64)
    return bool(obs[2] >= C.HOLE_TOP - 0.002 or np.abs(obs[:2] - obs[3:5]).max() < C.BASE_HALF)
