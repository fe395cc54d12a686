"""FR3 facts from Franka's datasheet and the FCI documentation, in one place.

Every limit the driver enforces is the tighter of these and the robot config, so a config typo
can make the arm gentler but never let a command through that the robot would reject with a
reflex.
"""

from __future__ import annotations

import numpy as np

JOINT_NAMES: tuple[str, ...] = tuple(f"fr3_joint{i}" for i in range(1, 8))
N_JOINTS = 7

# Joint position limits (rad), FR3 datasheet.
Q_MIN = np.array([-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159])
Q_MAX = np.array([2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159])
# Joint velocity (rad/s) and torque (Nm) limits, FR3 datasheet.
DQ_MAX = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])
TAU_MAX = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])
# Commanded torque rate limit (Nm/s): a larger step between two 1 ms commands is a
# controller_torque_discontinuity reflex.
DTAU_MAX = 1000.0
# The FCI's control period (s).
CONTROL_PERIOD_S = 0.001

# A comfortable, singularity-free pose in the middle of the workspace (franka-sim starts here).
HOME_Q = np.array([0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785])
