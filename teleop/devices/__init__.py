"""Teleop input devices behind one protocol (`TeleopDevice`); pygame/pyspacemouse load on first use."""

from teleop.devices.base import AXES, TeleopDevice, TeleopDeviceError, TeleopReading

__all__ = ["AXES", "TeleopDevice", "TeleopDeviceError", "TeleopReading"]
