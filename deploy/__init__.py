"""Deployment (L4): ONNX export and verification, inference runner, safety filter, controller, policy node.

May import policies, real, sim, teleop and reflexlab (L0-L3), never the CLI. Never trains.
"""
