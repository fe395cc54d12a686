"""Teleop input devices behind one protocol (`TeleopDevice`); may import reflexlab but no teleop module above.

pygame and pyspacemouse load with a device's own module (``teleop.devices.gamepad``, …), not with this package.
"""

from teleop.devices.base import AXES, TeleopDevice, TeleopDeviceError, TeleopReading

__all__ = ["AXES", "TeleopDevice", "TeleopDeviceError", "TeleopReading"]
