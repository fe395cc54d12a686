"""L1: rclpy plumbing shared by every ROS 2 node (environment, QoS, spinning, node main, topic sets); no robot logic.

Imports only the core (L0) and ROS 2. Importing this package prepares the environment rclpy needs:

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
