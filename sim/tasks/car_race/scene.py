"""The `car-race` MJCF: a 1/10-scale car with tyre friction, and walls that every course reshapes.

Built in Python rather than written out because the walls are ``2 × WALL_SEGMENTS`` boxes: one model serves every
course, `place_walls` moving and turning its wall geoms (model fields, no recompiling) when an episode changes course.

The car: a box body on a free joint; front wheels on steering hinges driven by position servos (both at the same
angle: Ackermann geometry matters little at this scale), rear wheels driven by velocity servos whose torque limit
sets the acceleration (an ESC holding a wheel speed: throttle 0 brakes). Wheels are cylinders with rubber-on-floor
friction (μ 1.1, condim 3), so hard throttle spins them and fast bends slide. A first-person camera ``front`` sits
on the nose; ``top`` looks down on the whole course (for videos).
"""

from __future__ import annotations

import mujoco
import numpy as np

from reflexlab.tasks.car_race import constants as C

WALL_COLOURS = ((0.15, 0.35, 0.85, 1.0), (0.9, 0.9, 0.9, 1.0), (0.85, 0.2, 0.15, 1.0))  # left, stripe, right
CAR_GEOMS = ("chassis", "fl_tyre", "fr_tyre", "rl_tyre", "rr_tyre")


def scene_xml() -> str:
    """The scene's MJCF text: ground, walls (parked until `place_walls`), the car, cameras, actuators."""
    hx, hy, hz = C.CHASSIS_HALF
    x, y, r = C.WHEELBASE / 2, C.TRACK / 2, C.WHEEL_RADIUS
    body_z = r + 0.01  # the chassis's centre: wheels hang 1 cm below it
    h = C.WALL_HEIGHT / 2
    walls = "\n".join(
        f'    <geom name="wall_{side}{i}" class="wall" pos="0 0 {-10 - h}" size="0.1 {C.WALL_THICKNESS / 2} {h}"/>'
        for side in "lr"
        for i in range(C.WALL_SEGMENTS)
    )
    wheel = '<joint name="{0}_spin" axis="0 1 0" damping="0.0005"/><geom name="{0}_tyre" class="tyre"/>'
    front = "\n".join(
        f'      <body name="{n}" pos="{x} {sy * y} {-0.01}">'
        '<inertial pos="0 0 0" mass="0.03" diaginertia="2e-5 2e-5 2e-5"/>'  # the knuckle
        f'<joint name="{n}_steer" axis="0 0 1" range="-{C.MAX_STEER} {C.MAX_STEER}" damping="0.05" armature="0.001"/>'
        f'<body name="{n}_wheel">{wheel.format(n)}</body></body>'
        for n, sy in (("fl", 1), ("fr", -1))
    )
    rear = "\n".join(
        f'      <body name="{n}_wheel" pos="{-x} {sy * y} {-0.01}">{wheel.format(n)}</body>'
        for n, sy in (("rl", 1), ("rr", -1))
    )
    steer = "\n".join(
        f'    <position name="steer_{n}" joint="{n}_steer" kp="6" ctrlrange="-{C.MAX_STEER} {C.MAX_STEER}"/>'
        for n in ("fl", "fr")
    )
    omega = C.MAX_SPEED / r
    drive = "\n".join(
        f'    <velocity name="drive_{n}" joint="{n}_spin" kv="0.05" ctrlrange="{-omega} {omega}" '
        'forcerange="-0.3 0.3"/>'
        for n in ("rl", "rr")
    )
    wall_rgba = " ".join(map(str, WALL_COLOURS[0]))
    return f"""<mujoco model="car-race">
  <compiler angle="radian"/>
  <option timestep="{C.PHYSICS_DT}" integrator="implicitfast"><flag midphase="disable"/></option>
  <visual><headlight ambient="0.45 0.45 0.45" diffuse="0.5 0.5 0.5"/><global offwidth="640" offheight="480"/>
    <quality shadowsize="0" offsamples="0"/></visual>
  <asset>
    <texture name="floor" type="2d" builtin="checker" rgb1="0.42 0.42 0.40" rgb2="0.34 0.35 0.33" width="512"
      height="512"/>
    <material name="floor" texture="floor" texrepeat="120 120"/>
    <texture name="sky" type="skybox" builtin="gradient" rgb1="0.55 0.7 0.9" rgb2="0.95 0.95 0.95" width="64"
      height="64"/>
  </asset>
  <default>
    <default class="wall"><geom type="box" friction="0.5 0.005 0.0001" rgba="{wall_rgba}"/></default>
    <default class="tyre"><geom type="ellipsoid" size="{r} {r} 0.02" euler="{np.pi / 2} 0 0"
      friction="1.1 0.01 0.0001" condim="3" mass="0.12" rgba="0.1 0.1 0.1 1"/></default>
  </default>
  <worldbody>
    <light pos="0 0 20" dir="0 0 -1" directional="true" diffuse="0.5 0.5 0.5"/>
    <geom name="floor" type="plane" size="30 30 0.1" material="floor"/>
    <camera name="top" pos="0 0 30" xyaxes="1 0 0 0 1 0" fovy="40"/>
{walls}
    <body name="car" pos="0 0 {body_z}">
      <freejoint name="car"/>
      <geom name="chassis" type="box" size="{hx} {hy} {hz}" mass="2.2" rgba="0.95 0.6 0.1 1"/>
      <site name="imu"/>
      <camera name="{C.CAMERA}" pos="{hx - 0.02} 0 {hz + 0.05}" xyaxes="0 -1 0 0.25 0 1" fovy="{C.CAMERA_FOVY}"/>
{front}
{rear}
    </body>
  </worldbody>
  <actuator>
{steer}
{drive}
  </actuator>
</mujoco>
"""


def build_model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_string(scene_xml())


def wall_ids(model: mujoco.MjModel) -> np.ndarray:
    """(2, WALL_SEGMENTS) geom ids of the left and right walls."""
    return np.array(
        [[model.geom(f"wall_{side}{i}").id for i in range(C.WALL_SEGMENTS)] for side in "lr"], dtype=np.int64
    )


def place_walls(model: mujoco.MjModel, boxes: np.ndarray) -> None:
    """Move the wall geoms onto a course's walls (`Course.walls`: (2, n, 4) centre x, y, half length, yaw); every
    fourth box of each side is a white stripe, so the camera sees the walls go by."""
    ids = wall_ids(model)
    for side in range(2):
        for i, (x, y, half, yaw) in enumerate(boxes[side]):
            g = ids[side, i]
            model.geom_pos[g] = (x, y, C.WALL_HEIGHT / 2)
            model.geom_size[g, 0] = half
            # The broad phase culls by these bounds: they must follow the new size.
            model.geom_rbound[g] = float(np.linalg.norm(model.geom_size[g]))
            model.geom_aabb[g] = (0.0, 0.0, 0.0, *model.geom_size[g])
            model.geom_quat[g] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
            model.geom_sameframe[g] = mujoco.mjtSameFrame.mjSAMEFRAME_NONE  # compiled unrotated: kinematics skipped it
            model.geom_rgba[g] = WALL_COLOURS[1] if i % 4 == 0 else WALL_COLOURS[2 * side]
