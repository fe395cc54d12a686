"""ROS 2 nodes: the policy node, the MuJoCo sim bridge, and what they share.

rclpy from the PyPI wheels finds its message type support through the ament index, which for a
pip-installed ROS is the virtual environment itself: ``AMENT_PREFIX_PATH`` must name it before
``rclpy`` is imported (a sourced ROS workspace sets it already, and is left alone).
"""

from __future__ import annotations

import os
import sys

if not os.environ.get("AMENT_PREFIX_PATH"):
    os.environ["AMENT_PREFIX_PATH"] = sys.prefix
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
# Nodes that render (the arm bridge's scene camera) run headless on robots and CI: EGL, never a window.
os.environ.setdefault("MUJOCO_GL", "egl")
