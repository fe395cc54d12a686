"""The robot configuration a policy is served on: joints, limits, topics, QoS, safety settings.

A robot config (``config/robots/<robot>.yaml``) is what the policy node knows about the hardware
independently of any model, so that a model trained for another robot, another joint order or
wider limits is refused *before* it can command anything. `RobotConfig.check_model` compares a
model's Spec with the config and raises `SpecMismatchError` naming the differing field.

It is core (L0), not part of ``deploy``, because drivers (``real``) describe their robots with it
too; `SafetyLimits` lives here for the same reason (the safety filter in ``deploy`` takes them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from reflexlab.config import ConfigError, load_yaml
from reflexlab.spec import Spec, SpecMismatchError

CommandType = Literal["float64_multi_array", "joint_trajectory"]
COMMAND_TYPES = ("float64_multi_array", "joint_trajectory")

# Observation terms the policy node can produce from the robot's state topics, and their sizes
# (None: one per joint). A model asking for anything else cannot be served on a ROS robot.
NODE_TERMS: dict[str, int | None] = {
    "base_ang_vel": 3,
    "projected_gravity": 3,
    "velocity_command": 3,
    "gait_phase": 2,
    "joint_pos": None,
    "joint_vel": None,
    "last_action": None,
}

_CONFIG_DIR = Path(__file__).resolve().parents[1] / "config" / "robots"


class RobotConfigError(ConfigError):
    """A robot config file that is missing, unreadable or inconsistent; the message names the key."""


@dataclass(frozen=True)
class SafetyLimits:
    """Joint-position target limits (rad) and the largest allowed target speed (rad/s)."""

    names: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    max_rate: float

    def __post_init__(self) -> None:
        n = len(self.names)
        if len(self.lower) != n or len(self.upper) != n:
            raise ValueError(f"safety limits: {n} joint names but {len(self.lower)}/{len(self.upper)} limits")
        if any(lo > hi for lo, hi in zip(self.lower, self.upper, strict=True)):
            raise ValueError("safety limits: a lower limit exceeds its upper limit")
        if not self.max_rate > 0:
            raise ValueError(f"safety limits: max_rate must be positive, got {self.max_rate}")

    @classmethod
    def from_spec(cls, spec: Spec) -> SafetyLimits:
        if spec.action.kind != "joint_position":
            raise ValueError(f"the safety filter guards joint-position targets, not {spec.action.kind!r}")
        a = spec.action
        return cls(a.names, a.lower, a.upper, a.max_rate)


@dataclass(frozen=True)
class Topics:
    joint_states: str = "/joint_states"
    imu: str = "/imu"
    velocity_command: str = "/cmd_vel"
    joint_command: str = "/joint_commands"


@dataclass(frozen=True)
class CameraConfig:
    """``cameras.<name>:`` of a robot file: a camera a policy may read (the Spec's `ImageInput` of that name).

    Frames (``sensor_msgs/Image``, rgb8 or bgr8) must come at ``width`` × ``height``: a driver at another
    resolution frames another picture (field of view, aspect) than the policy was trained on, so such frames are
    rejected, not resized; the node resizes frames of this size to the policy's own.
    """

    topic: str
    width: int
    height: int

    def __post_init__(self) -> None:
        if min(self.width, self.height) < 1:
            raise ValueError(f"camera size must be positive, got {self.width}x{self.height}")


@dataclass(frozen=True)
class SafetyConfig:
    """What the always-on safety filter does; see `deploy.safety`."""

    stale_after_periods: float = 3.0
    stale_mode: Literal["hold", "damp"] = "hold"
    # States with a joint further than this outside its limits, or faster than
    # ``velocity_margin`` × its velocity limit, are rejected as implausible (sensor glitch).
    position_margin: float = 0.5
    velocity_margin: float = 2.0
    # Commands beyond these are clipped (a policy was trained inside its command ranges).
    max_command: tuple[float, float, float] = (1.0, 0.5, 1.0)
    command_timeout_s: float = 1.0
    # A policy reading cameras holds (stale_mode) while any camera's newest frame is older than this (receipt time).
    max_frame_age_s: float = 0.2


@dataclass(frozen=True)
class Joints:
    """``joints:`` of a robot file; the order of ``names`` is the order of the command vector."""

    names: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    max_velocity: tuple[float, ...]


@dataclass(frozen=True)
class Command:
    """``command:`` of a robot file: the message type joint targets are sent as."""

    type: CommandType = "float64_multi_array"


@dataclass(frozen=True)
class RobotFile:
    """A robot file as written (``config/robots/<robot>.yaml``); `RobotConfig.load` flattens it."""

    robot: str
    joints: Joints
    max_target_rate: float
    command: Command = field(default_factory=Command)
    best_effort: bool = True  # sensor-data QoS (best effort, keep last 1) on state and command topics
    topics: Topics = field(default_factory=Topics)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    cameras: dict[str, CameraConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class RobotConfig:
    """A robot as the policy node sees it. Joint order defines the command vector's order."""

    robot: str
    joint_names: tuple[str, ...]
    joint_lower: tuple[float, ...]
    joint_upper: tuple[float, ...]
    joint_max_velocity: tuple[float, ...]
    max_target_rate: float
    command_type: CommandType = "float64_multi_array"
    best_effort: bool = True
    topics: Topics = field(default_factory=Topics)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    cameras: dict[str, CameraConfig] = field(default_factory=dict)
    path: Path | None = None

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        for key in ("joint_lower", "joint_upper", "joint_max_velocity"):
            if len(getattr(self, key)) != n:
                raise RobotConfigError(
                    f"{self._where}: joints.{key[6:]}: {len(getattr(self, key))} entries for {n} joints"
                )
        if self.command_type not in COMMAND_TYPES:
            raise RobotConfigError(f"{self._where}: command.type: {self.command_type!r} is not one of {COMMAND_TYPES}")
        if self.safety.stale_mode not in ("hold", "damp"):
            raise RobotConfigError(
                f"{self._where}: safety.stale_mode: must be hold or damp, not {self.safety.stale_mode!r}"
            )
        if not self.max_target_rate > 0 or not all(v > 0 for v in self.joint_max_velocity):
            raise RobotConfigError(f"{self._where}: max_target_rate and joints.max_velocity must be positive")
        if not self.safety.max_frame_age_s > 0:
            raise RobotConfigError(f"{self._where}: safety.max_frame_age_s must be positive")

    @property
    def _where(self) -> str:
        return f"robot config {self.path}" if self.path else "robot config"

    @classmethod
    def load(cls, path: str | Path) -> RobotConfig:
        """Load a YAML robot config; a bare name (``quadruped``) is looked up in ``config/robots``."""
        p = resolve_robot_config(path)
        f = load_yaml(RobotFile, p, what="robot config", error=RobotConfigError)
        return cls(
            robot=f.robot,
            joint_names=f.joints.names,
            joint_lower=f.joints.lower,
            joint_upper=f.joints.upper,
            joint_max_velocity=f.joints.max_velocity,
            max_target_rate=f.max_target_rate,
            command_type=f.command.type,
            best_effort=f.best_effort,
            topics=f.topics,
            safety=f.safety,
            cameras=f.cameras,
            path=p,
        )

    def check_model(self, spec: Spec) -> None:
        """Refuse a model this robot cannot run; `SpecMismatchError.field` names the Spec field."""
        ctx = f"model vs {self._where}"
        a = spec.action
        if spec.robot != self.robot:
            raise SpecMismatchError("robot", self.robot, spec.robot, ctx)
        if a.kind != "joint_position":
            raise SpecMismatchError("action.kind", "joint_position", a.kind, ctx)
        if tuple(a.names) != self.joint_names:
            raise SpecMismatchError("action.names", list(self.joint_names), list(a.names), ctx)
        for i, name in enumerate(self.joint_names):
            if a.lower[i] < self.joint_lower[i] - 1e-9:
                raise SpecMismatchError(f"action.lower[{i}] ({name})", self.joint_lower[i], a.lower[i], ctx)
            if a.upper[i] > self.joint_upper[i] + 1e-9:
                raise SpecMismatchError(f"action.upper[{i}] ({name})", self.joint_upper[i], a.upper[i], ctx)
        for i, term in enumerate(spec.policy_obs.terms):
            where = f"observation_groups.{spec.policy_group}.terms[{i}]"
            if term.name not in NODE_TERMS:
                raise SpecMismatchError(f"{where}.name", sorted(NODE_TERMS), term.name, ctx + " (no ROS source)")
            size = NODE_TERMS[term.name] or len(self.joint_names)
            if term.size != size:
                raise SpecMismatchError(f"{where}.size ({term.name})", size, term.size, ctx)
        if any(t.name == "gait_phase" for t in spec.policy_obs.terms):
            gait_hz(spec)  # raises when the clock's rate cannot be read
        for i, image in enumerate(spec.images):
            if image.name not in self.cameras:
                have = sorted(self.cameras) or "none"
                raise SpecMismatchError(f"images[{i}].name", have, image.name, ctx + ": the robot lists no such camera")

    def safety_limits(self, spec: Spec) -> SafetyLimits:
        """The tightest of the model's and the robot's limits: both must hold for every command."""
        a = spec.action
        return SafetyLimits(
            names=self.joint_names,
            lower=tuple(max(x, y) for x, y in zip(a.lower, self.joint_lower, strict=True)),
            upper=tuple(min(x, y) for x, y in zip(a.upper, self.joint_upper, strict=True)),
            max_rate=min(self.max_target_rate, a.max_rate, *self.joint_max_velocity),
        )


def gait_hz(spec: Spec) -> float:
    """The rate of the gait clock a policy observes, read from its ``gait_phase`` term's units."""
    for term in spec.policy_obs.terms:
        if term.name == "gait_phase":
            m = re.search(r"([0-9]*\.?[0-9]+)\s*Hz", term.units)
            if m is None or not math.isfinite(float(m.group(1))):
                raise SpecMismatchError("observation_groups.policy.gait_phase.units", "'<rate> Hz'", term.units)
            return float(m.group(1))
    raise KeyError("the Spec has no gait_phase term")


def resolve_robot_config(path: str | Path) -> Path:
    """A path as given, or a bare robot name looked up in the repository's/installed ``config/robots``."""
    p = Path(path)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise RobotConfigError(f"robot config {p} does not exist")
        return p
    for folder in _config_dirs():
        candidate = folder / f"{p.name}.yaml"
        if candidate.is_file():
            return candidate
    raise RobotConfigError(f"no robot config named {str(path)!r} (looked in {', '.join(map(str, _config_dirs()))})")


def _config_dirs() -> list[Path]:
    dirs = [_CONFIG_DIR]
    try:  # installed by colcon into a ROS workspace
        from ament_index_python.packages import get_package_share_directory

        dirs.append(Path(get_package_share_directory("reflexlab")) / "config" / "robots")
    except (ImportError, LookupError, OSError):  # no ament index, or reflexlab not in it
        pass
    return dirs
