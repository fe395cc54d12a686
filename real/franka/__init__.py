"""Franka Research 3: the 1 kHz torque-loop driver (pylibfranka), its config, a ROS 2 node, the
franka-sim harness used by tests and `reflexlab bench franka`, and the FR3 model franka-sim loads.

Import the submodules (``real.franka.driver``…): pylibfranka and rclpy load only where used.
"""
