"""Topic sets: the names a robot's driver node and its users (env, recorder, sim bridges) must agree on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


def tracker_topic(name: str) -> str:
    """Where a tracker publishes object ``name``'s pose (geometry_msgs/PoseStamped, base frame)."""
    return f"/tracker/{name}_pose"


@dataclass(frozen=True)
class ArmTopics:
    """Topic names shared by the arm drivers (real and simulated) and the env."""

    joint_states: str = "/joint_states"  # sensor_msgs/JointState
    ee_pose: str = "/franka/ee_pose"  # geometry_msgs/PoseStamped, base frame
    ee_target: str = "/franka/ee_command"  # geometry_msgs/PoseStamped, base frame
    # Tracked objects (name -> geometry_msgs/PoseStamped topic): a motion-capture or camera tracker on the
    # robot, the simulator's ground truth in sim-as-real.
    objects: Mapping[str, str] = field(default_factory=lambda: {"block": tracker_topic("block")})
    sim_reset: str = "/sim/reset"  # std_msgs/Int64 seed: the simulator's "person" resets the scene
    sim_reset_done: str = "/sim/reset_done"  # std_msgs/Int64 echo of the seed once the scene is reset

    @classmethod
    def tracking(cls, names: Iterable[str]) -> ArmTopics:
        """The standard topics, with a tracker topic for each of a task's tracked objects ``names``."""
        return cls(objects={name: tracker_topic(name) for name in names})


@dataclass(frozen=True)
class CarTopics:
    """Topic names shared by the car's driver node (real: `real.car`; simulated: `sim.ros.car_bridge`) and its users.

    Commands are a ``geometry_msgs/Twist`` as ROS mobile bases take them: ``linear.x`` the speed (m/s), ``angular.z``
    the yaw rate (rad/s), which an Ackermann car turns into a steering angle atan(wheelbase · ω / v) (held while
    v is ~0, where steering changes nothing). Odometry (``nav_msgs/Odometry``: pose in ``odom``, twist in the
    car's frame) comes from the wheels, the IMU (``sensor_msgs/Imu``) from the car's board, frames
    (``sensor_msgs/Image`` rgb8) from its first-person camera.
    """

    command: str = "/cmd_vel"
    odometry: str = "/odom"
    imu: str = "/imu"
    image: str = "/camera/image_raw"
    sim_reset: str = "/sim/reset"  # std_msgs/Int64 seed: sim-as-real's stand-in for carrying the car back
    sim_reset_done: str = "/sim/reset_done"
