"""The car driver's configuration: a typed dataclass tree loaded from ``config/robots/car.yaml``.

Strict, as every robot config (`reflexlab.config`): an unknown key, a wrong type or an impossible value is refused
with the dotted key and the file, because a misspelt ``comand_timeout_s`` falling back to its default would remove
the watchdog's setting unnoticed. The defaults are a MuSHR-class 1/10 car (Traxxas chassis, VESC 6, servo on the
VESC's servo port); calibrate ``vesc`` on each car (speed: drive a measured distance; steering: the turning circle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reflexlab.config import ConfigError, load_yaml
from reflexlab.robot import CameraConfig
from reflexlab.ros.topics import CarTopics
from reflexlab.tasks.car_race import constants as C

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "config" / "robots" / "car.yaml"


class CarConfigError(ConfigError):
    """A car config that is missing, unreadable or inconsistent; the message names the key."""


@dataclass(frozen=True)
class VescConfig:
    """The motor controller and how the car's units map onto it."""

    port: str = "/dev/ttyACM0"  # the VESC's USB serial device; "synthetic": a `real.car.vesc.SyntheticVesc`
    erpm_per_m_s: float = 4614.0  # electrical RPM per m/s of wheel speed (poles × gearing / wheel circumference)
    servo_centre: float = 0.5304  # servo output (0–1) that steers straight
    servo_per_rad: float = -1.0  # servo output per radian of steering angle (negative: the linkage reverses)
    brake_current_a: float = 10.0  # the watchdog's brake


@dataclass(frozen=True)
class CarSafety:
    """What the driver enforces whatever it is told."""

    command_timeout_s: float = 0.3  # no command for this long: brake
    max_state_age_s: float = 0.25  # a policy node brakes when odometry or the IMU is older than this
    max_frame_age_s: float = 0.25  # ... or a camera its policy reads (2.5 frames at 10 Hz)
    max_speed: float = C.MAX_SPEED  # m/s, both ways
    max_steer: float = C.MAX_STEER  # rad


@dataclass(frozen=True)
class CarFile:
    """``config/robots/car.yaml`` as written."""

    robot: str
    wheelbase: float
    rate_hz: float = 50.0  # commands to the VESC and odometry out
    vesc: VescConfig = field(default_factory=VescConfig)
    safety: CarSafety = field(default_factory=CarSafety)
    topics: CarTopics = field(default_factory=CarTopics)
    # The cameras a policy may read, by the name its Spec gives them (the policy node checks frames against them).
    cameras: dict[str, CameraConfig] = field(
        default_factory=lambda: {C.CAMERA: CameraConfig(CarTopics().image, width=64, height=64)}
    )

    def __post_init__(self) -> None:
        for key, value in (
            ("wheelbase", self.wheelbase),
            ("rate_hz", self.rate_hz),
            ("vesc.erpm_per_m_s", self.vesc.erpm_per_m_s),
            ("safety.command_timeout_s", self.safety.command_timeout_s),
            ("safety.max_speed", self.safety.max_speed),
            ("safety.max_steer", self.safety.max_steer),
            ("safety.max_state_age_s", self.safety.max_state_age_s),
            ("safety.max_frame_age_s", self.safety.max_frame_age_s),
        ):
            if not value > 0:
                raise ValueError(f"{key} must be positive, got {value}")
        servo = (self.vesc.servo_centre - abs(self.vesc.servo_per_rad) * self.safety.max_steer,
                 self.vesc.servo_centre + abs(self.vesc.servo_per_rad) * self.safety.max_steer)  # fmt: skip
        if servo[0] < 0 or servo[1] > 1:
            raise ValueError(
                f"vesc.servo_centre ± |servo_per_rad| × safety.max_steer spans {servo[0]:.3f}–{servo[1]:.3f}: the "
                "servo output is 0–1"
            )


def load_car_config(path: str | Path = DEFAULT_PATH) -> CarFile:
    """Load and check a car config; a bare name (``car``) is looked up in ``config/robots``."""
    p = Path(path)
    if p.suffix not in (".yaml", ".yml"):
        p = DEFAULT_PATH.with_name(f"{p.name}.yaml")
    if not p.is_file():
        raise CarConfigError(f"car config {p} does not exist")
    return load_yaml(CarFile, p, what="car config", error=CarConfigError)
