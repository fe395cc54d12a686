"""The car as a robot: its ROS 2 client and the `SingleEnv` that FastRLAP drives (`car-race`'s robot side)."""
