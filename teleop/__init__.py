"""Input devices and intervention arbitration (who commands the robot at each step)."""
