"""Simulation (L2): MuJoCo backends, scenes and task envs, the rsl-rl VecEnv adapter, ROS 2 sim bridges.

Imports only reflexlab (L0, L1).
"""
