"""Teleop (layer L2): input devices and intervention arbitration; may import only reflexlab (L0, L1).

``devices/`` (SpaceMouse, gamepad, keyboard behind `TeleopDevice`, their configs beside them) → ``frames``
(device twist → base-frame command) → ``arbiter`` (policy, person, handback or hold; ``is_intervention``
per step), composed for a real env by ``intervention``; ``config`` loads ``config/teleop/*.yaml`` and
opens the device it names, ``calibrate`` measures a device. Rewards are not decided here.
"""
