"""Calibration (L2): intrinsics, hand-eye, timing and latency, actuator sysID.

Imports only reflexlab (L0, L1).
"""
