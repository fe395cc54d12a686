"""L2: simulated robots behind the ROS 2 topics of the real ones (MuJoCo sim bridge, sim-as-real arm bridge)."""

import os

# The arm bridge renders its scene camera headless on robots and CI: EGL, never a window. Set before its
# modules load MuJoCo (`reflexlab` commands set it too, before any verb runs).
os.environ.setdefault("MUJOCO_GL", "egl")
