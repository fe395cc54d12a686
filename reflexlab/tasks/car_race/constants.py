"""Constants of `car-race`: a 1/10-scale car (FastRLAP's class of robot) on a walled course, 10 Hz control.

The car is rear-wheel driven with front steering: ``throttle`` in [−1, 1] sets the rear wheels' speed target
(± ``MAX_SPEED``; negative reverses, which the stuck recovery uses), ``steering`` in [−1, 1] the front wheels'
angle (± ``MAX_STEER``). Both may change at most ``MAX_ACTION_RATE`` per second, as FastRLAP limits the change
per step: a servo and an ESC cannot jump. Lengths in metres, angles in radians, the course's frame is the world's.
"""

from __future__ import annotations

TASK_NAME = "car-race"
ROBOT_NAME = "reflexlab-car"

PHYSICS_DT = 0.002  # 500 Hz
DECIMATION = 50  # 10 Hz control
CONTROL_DT = PHYSICS_DT * DECIMATION

# The car: a 1/10-scale RC car.
WHEELBASE = 0.32
TRACK = 0.24  # between the left and right wheels' centres
WHEEL_RADIUS = 0.05
CHASSIS_HALF = (0.22, 0.09, 0.03)  # half length, width, height of the body box
MAX_SPEED = 4.0  # m/s at throttle 1 (the rear wheels' surface speed target)
MAX_STEER = 0.45  # rad at steering 1
MAX_ACTION_RATE = 5.0  # per second, per action dimension: 0.5 a step at 10 Hz

# The camera: first person, on the car's nose, looking ahead and slightly down.
CAMERA = "front"
CAMERA_FOVY = 90.0  # degrees

# Courses (see `course`): walled closed loops of constant width round a star-shaped centreline.
TRACK_WIDTH = 1.4
WALL_HEIGHT = 0.25
WALL_THICKNESS = 0.06
WALL_SEGMENTS = 128  # boxes per side: each course reshapes the same scene's walls
CHECKPOINT_SPACING = 3.0  # m of course between the checkpoints the scripted lap drops
CHECKPOINT_RADIUS = 1.0  # m: a checkpoint counts as reached within this distance (the course is 1.4 m wide)

# Episodes and the events the env reports (FastRLAP's: crashes and stuck states, recovered without a person).
EPISODE_STEPS = 600  # 60 s
STUCK_STEPS = 30  # 3 s ...
STUCK_RADIUS = 0.3  # ... within this radius: stuck (FastRLAP: 30 positions within 0.3 m)
