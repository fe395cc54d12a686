"""Constants of `panda-peg-insert`: a square peg in the Panda's hand, a square hole with 1 mm clearance.

The arm is push-T's Franka Panda (same kinematics, limits and home posture; its constants are reused, so
the two tasks cannot drift apart). The peg replaces the pusher rod: a 20 × 20 mm square bar whose tip is
where the pusher's tip was (120 mm below the hand's frame). The hole is 21 × 21 mm (1 mm total clearance,
0.5 mm a side) and 40 mm deep, made of four 20 mm thick walls standing on the table, axis-aligned with the
peg when the hand points down at its home yaw (so the action needs no yaw). A test checks the MJCF agrees.
"""

from __future__ import annotations

from reflexlab.tasks.panda_push_t.constants import (  # noqa: F401  (the same arm; re-exported for this task)
    HOME_QPOS,
    JOINT_LOWER,
    JOINT_NAMES,
    JOINT_UPPER,
    ROBOT_NAME,
)

TASK_NAME = "panda-peg-insert"

PEG_SITE = "peg_tip"
PEG_SIZE = 0.020  # side of the square peg (m)
PEG_LENGTH = 0.080
HOLE_SIZE = 0.021  # side of the square hole: 1 mm total clearance
WALL = 0.020  # wall thickness around the hole
HOLE_DEPTH = 0.040  # the walls' height; the table is the hole's bottom
HOLE_TOP = HOLE_DEPTH  # z of the rim (the base stands on the table, z = 0)
BASE_HALF = HOLE_SIZE / 2 + WALL  # half the base's outer side
SUCCESS_DEPTH = 0.020  # the peg tip this far below the rim, inside the hole: seated
HOVER = 0.020  # how far above the rim the expert lines the peg up before it descends

# Workspace in the robot base frame (m): where the peg tip may be commanded.
WORKSPACE_LOW = (0.35, -0.15, 0.005)
WORKSPACE_HIGH = (0.65, 0.15, 0.15)
# The hole's true centre is drawn from this box; the peg tip starts anywhere in the workspace above the rim.
INIT_HOLE_LOW = (0.42, -0.08)
INIT_HOLE_HIGH = (0.58, 0.08)
INIT_TIP_Z = (0.08, 0.12)

PHYSICS_DT = 0.002  # 500 Hz
DECIMATION = 50  # 10 Hz control
CONTROL_DT = PHYSICS_DT * DECIMATION
IK_WAYPOINTS = 5  # IK solves per control step; joint targets are interpolated between them
MAX_TIP_SPEED = 0.1  # m/s: the commanded tip may move at most this far per second
EPISODE_STEPS = 150  # 15 s
