"""Cameras: Intel RealSense depth+colour (live or a recording), its ROS 2 node and benchmark.

ROS 2 is loaded here, before any module of this package loads pyrealsense2, and that order matters.
pyrealsense2 links its own Fast-DDS 2 in statically and exports Fast-DDS's singletons
(``eprosima::SystemInfo::instance()::singleton``, ``GuidUtils``, ``SharedMemWatchdog``, …) as GNU
unique symbols, which the dynamic linker shares across the process whatever ``RTLD_LOCAL`` says.
ROS 2's Fast-DDS 3 (``libfastdds``, loaded by ``import rclpy``) has the same names, so whichever
library loads first owns them. With pyrealsense2 first, Fast-DDS 3 ran on objects of the other
version: a segfault at exit in every run of a test that made a node after importing pyrealsense2.
With libfastdds first nothing breaks, because librealsense's own DDS (network cameras) never starts
here: a context opens no DDS participant (measured: no sockets, no threads beyond its device watcher).
"""

import contextlib

with contextlib.suppress(ImportError):  # a camera-only install has no ROS, and then no conflict
    import rclpy  # noqa: F401  (loads libfastdds before pyrealsense2)

    import reflexlab.ros  # noqa: F401  (the environment rclpy needs before it loads a message type)
