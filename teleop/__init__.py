"""Input devices and intervention arbitration (who commands the robot at each step).

``devices/`` (SpaceMouse, gamepad, keyboard behind `TeleopDevice`) → ``frames`` (device twist →
base-frame command) → ``arbiter`` (policy, person, handback or hold; ``is_intervention`` per step),
composed for a real env by ``intervention``; ``config`` loads ``config/teleop/*.yaml``, ``calibrate``
measures a device. Rewards are not decided here.
"""
