"""Constants of `panda-push-t`: the Franka Panda arm, the T block, the goal, rates and limits.

Dimensions follow Franka's published kinematics (modified DH: d1 0.333, d3 0.316, a4 0.0825,
a5 −0.0825, d5 0.384, a7 0.088, flange 0.107 m; joint limits from the datasheet) and the
classic Push-T benchmark scaled to 1 px = 1 mm (bar 120 × 30 mm, stem 30 × 90 mm, pusher
radius 15 mm, goal at the workspace centre rotated 45°). A test checks that the MJCF agrees.
"""

from __future__ import annotations

import math

ROBOT_NAME = "franka-panda"
TASK_NAME = "panda-push-t"

JOINT_NAMES = tuple(f"joint{i}" for i in range(1, 8))
JOINT_LOWER = (-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973)
JOINT_UPPER = (2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973)
# A posture with the pusher pointing down over the workspace; IK's null space pulls towards it.
HOME_QPOS = (0.0, 0.35, 0.0, -2.2, 0.0, 2.55, 0.785)
PUSHER_SITE = "pusher_tip"
PUSHER_RADIUS = 0.015
PUSHER_HEIGHT = 0.015  # tip centre above the table (m): mid-height of the 30 mm block

# Block: T made of a bar and a stem; the body frame sits at the T's centre of mass.
BAR_SIZE = (0.120, 0.030)  # (along x, along y) in the block frame
STEM_SIZE = (0.030, 0.090)
BLOCK_HEIGHT = 0.030
_bar_area = BAR_SIZE[0] * BAR_SIZE[1]
_stem_area = STEM_SIZE[0] * STEM_SIZE[1]
# Bar centre at y = 15 mm, stem centre at y = 75 mm from the top edge; COM between them.
COM_FROM_TOP = (_bar_area * BAR_SIZE[1] / 2 + _stem_area * (BAR_SIZE[1] + STEM_SIZE[1] / 2)) / (_bar_area + _stem_area)
BAR_CENTER = (0.0, BAR_SIZE[1] / 2 - COM_FROM_TOP)
STEM_CENTER = (0.0, BAR_SIZE[1] + STEM_SIZE[1] / 2 - COM_FROM_TOP)

# Workspace on the table, in the robot base frame (m). The goal sits at its centre.
WORKSPACE_LOW = (0.30, -0.20)
WORKSPACE_HIGH = (0.70, 0.20)
GOAL_POSE = (0.50, 0.0, math.pi / 4)  # x, y, yaw of the block's COM frame
# Initial block poses are drawn from this box (COM) and any yaw; the pusher starts clear of the block.
INIT_BLOCK_LOW = (0.40, -0.10)
INIT_BLOCK_HIGH = (0.60, 0.10)

PHYSICS_DT = 0.002  # 500 Hz
DECIMATION = 50  # 10 Hz control, as Push-T
CONTROL_DT = PHYSICS_DT * DECIMATION
IK_WAYPOINTS = 5  # IK solves per control step; joint targets are interpolated between them
MAX_PUSHER_SPEED = 0.4  # m/s: the target may move at most this far per second
SUCCESS_COVERAGE = 0.95
EPISODE_STEPS = 300  # 30 s
