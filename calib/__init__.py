"""Calibration: intrinsics, hand-eye, timing and latency, actuator system identification."""
