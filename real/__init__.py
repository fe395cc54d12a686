"""Robots (L2): hardware drivers, the real-robot Env, task adapters. No learning code here.

May import teleop (the env integrates the intervention arbiter) and reflexlab (L0, L1); never sim, policies, deploy.
"""
