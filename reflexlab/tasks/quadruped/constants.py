"""Constants of the reflexlab quadruped: names, default pose, rates and limits.

Everything a backend or a deployed robot needs to know about the hardware lives here, not in the
task, so that the Isaac Lab and MuJoCo Warp definitions reuse the same numbers. A test checks that
these values agree with ``quadruped.xml``.
"""

from __future__ import annotations

ROBOT_NAME = "reflexlab-quadruped"

LEGS = ("FR", "FL", "RR", "RL")
JOINT_NAMES = tuple(f"{leg}_{part}_joint" for leg in LEGS for part in ("hip", "thigh", "calf"))
FOOT_SITES = tuple(f"{leg}_foot" for leg in LEGS)
FOOT_TOUCH_SENSORS = tuple(f"{leg}_touch" for leg in LEGS)
FOOT_VEL_SENSORS = tuple(f"{leg}_vel" for leg in LEGS)
FOOT_POS_SENSORS = tuple(f"{leg}_pos" for leg in LEGS)
FOOT_RADIUS = 0.022
# Trot: diagonal pairs (FR+RL, FL+RR) half a cycle apart; phase offset per foot in LEGS order.
TROT_OFFSETS = (0.0, 0.5, 0.5, 0.0)
BASE_BODY = "base"
# Touch sensors whose contact with the ground counts as a fall (the torso zone covers body and head).
FALL_TOUCH_SENSORS = ("torso_touch",)

# Standing pose, (hip, thigh, calf) per leg, rad. Also the action offset.
DEFAULT_JOINT_POS = (0.0, 0.8, -1.5) * 4
JOINT_LOWER = (-0.8, -0.7, -2.7) * 4
JOINT_UPPER = (0.8, 3.0, -0.8) * 4
# Torque limits per joint (N m), as the MJCF actuators' forcerange.
TORQUE_LIMIT = (23.7, 23.7, 35.5) * 4
KP = 30.0
KD = 0.8

PHYSICS_DT = 0.002  # 500 Hz
DECIMATION = 10  # 50 Hz control
CONTROL_DT = PHYSICS_DT * DECIMATION

# target = DEFAULT_JOINT_POS + ACTION_SCALE * action
ACTION_SCALE = 0.25
# A joint target may move at most this fast (rad/s); the deploy safety filter enforces it.
MAX_TARGET_RATE = 30.0

# Base height with the default pose under gravity (m), measured from the model.
NOMINAL_BASE_HEIGHT = 0.28
INITIAL_BASE_HEIGHT = 0.32
