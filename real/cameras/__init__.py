"""Cameras: Intel RealSense depth+colour (live or a recording), its ROS 2 node and benchmark."""
