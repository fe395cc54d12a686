"""The Franka driver's configuration: a typed dataclass tree loaded from ``config/robots/franka.yaml``.

Why a strict loader (`reflexlab.config`): a robot config is edited by hand next to a moving arm,
and a misspelt key silently falling back to a default (say ``comand_timeout_s``) would remove a
safety net without anyone noticing. Every unknown key, wrong type or wrong length is refused and
the message names the dotted key (``safety.workspace_min``) and the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from real.franka.constants import DTAU_MAX, N_JOINTS, TAU_MAX
from reflexlab.config import ConfigError, load_yaml

ControlMode = Literal["joint_impedance", "cartesian_impedance"]
Realtime = Literal["ignore", "enforce"]

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "config" / "robots" / "franka.yaml"


class FrankaConfigError(ConfigError):
    """A Franka config that is missing, unreadable or inconsistent; the message names the key."""


def _joints(*v: float) -> tuple[float, ...]:
    return tuple(float(x) for x in v)


@dataclass(frozen=True)
class ImpedanceConfig:
    """Gains of the two impedance laws and how the low-rate targets are smoothed."""

    # Joint impedance (Nm/rad, Nm·s/rad): libfranka's joint_impedance_control example gains.
    joint_stiffness: tuple[float, ...] = _joints(600, 600, 600, 600, 250, 150, 50)
    joint_damping: tuple[float, ...] = _joints(50, 50, 50, 20, 20, 20, 10)
    # Cartesian impedance: translation (N/m) then rotation (Nm/rad); damping is critical (2·sqrt(K)).
    cartesian_stiffness: tuple[float, ...] = (600.0, 600.0, 600.0, 30.0, 30.0, 30.0)
    # Pulls the redundant elbow towards the pose the arm started in (Nm/rad).
    nullspace_stiffness: float = 10.0
    # Time constant of the critically damped filter that turns a 10–100 Hz target stream into a
    # smooth 1 kHz reference (s): larger is smoother and lags more.
    interpolation_time_s: float = 0.05
    # Speed limits of that reference: joints (rad/s, ≤ datasheet), EE (m/s, rad/s).
    max_joint_velocity: tuple[float, ...] = _joints(1.0, 1.0, 1.0, 1.0, 1.5, 1.5, 1.5)
    max_ee_speed: float = 0.3
    max_ee_angular_speed: float = 1.0


@dataclass(frozen=True)
class CollisionConfig:
    """``Robot.set_collision_behavior`` thresholds: above ``upper`` the robot stops with a reflex."""

    lower_torque: tuple[float, ...] = _joints(20, 20, 18, 18, 16, 14, 12)
    upper_torque: tuple[float, ...] = _joints(20, 20, 18, 18, 16, 14, 12)
    lower_force: tuple[float, ...] = (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)
    upper_force: tuple[float, ...] = (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)


@dataclass(frozen=True)
class SafetyConfig:
    """What the driver enforces on top of the robot's own reflexes."""

    # EE targets are clipped into this box (m, base frame) and every clip is counted.
    workspace_min: tuple[float, ...] = (0.25, -0.4, 0.1)
    workspace_max: tuple[float, ...] = (0.75, 0.4, 0.8)
    # Joint targets stay this far (rad) inside the datasheet limits.
    joint_margin: float = 0.1
    # Commanded torque saturation (Nm, per joint, ≤ datasheet) and torque rate (Nm/s, ≤ 1000).
    max_joint_torque: tuple[float, ...] = _joints(78, 78, 78, 78, 10.8, 10.8, 10.8)  # 90 % of the datasheet
    max_torque_rate: float = DTAU_MAX * 0.95
    # Largest Cartesian task force (N) the Cartesian impedance may command.
    max_ee_force: float = 40.0
    # No target for this long ⇒ the policy stream is considered lost and the arm holds position.
    command_timeout_s: float = 0.5
    # After a reflex: recover and hold (True), or stop and report the error (False).
    automatic_error_recovery: bool = True
    collision: CollisionConfig = field(default_factory=CollisionConfig)


@dataclass(frozen=True)
class FrankaConfig:
    """One FR3 as the driver sees it. ``FrankaConfig.load()`` reads ``config/robots/franka.yaml``."""

    host: str = "172.16.0.2"
    mode: ControlMode = "joint_impedance"
    # ``ignore`` unless the client machine runs a PREEMPT_RT kernel (libfranka refuses otherwise).
    realtime: Realtime = "ignore"
    # Python switches threads every 5 ms by default, which lets any busy thread in the process
    # starve the 1 kHz loop (measured: 550 Hz); 0.2 ms keeps it responsive. Process-wide.
    gil_switch_interval_s: float = 0.0002
    # SCHED_FIFO priority of the 1 kHz thread when the OS allows it (0: normal scheduling). Worth it
    # even without a PREEMPT_RT kernel: it keeps other processes from preempting the loop.
    loop_priority: int = 20
    impedance: ImpedanceConfig = field(default_factory=ImpedanceConfig)
    safety: SafetyConfig = field(default_factory=SafetyConfig)
    path: Path | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        lengths = {
            "impedance.joint_stiffness": (self.impedance.joint_stiffness, N_JOINTS),
            "impedance.joint_damping": (self.impedance.joint_damping, N_JOINTS),
            "impedance.cartesian_stiffness": (self.impedance.cartesian_stiffness, 6),
            "impedance.max_joint_velocity": (self.impedance.max_joint_velocity, N_JOINTS),
            "safety.workspace_min": (self.safety.workspace_min, 3),
            "safety.workspace_max": (self.safety.workspace_max, 3),
            "safety.max_joint_torque": (self.safety.max_joint_torque, N_JOINTS),
            "safety.collision.lower_torque": (self.safety.collision.lower_torque, N_JOINTS),
            "safety.collision.upper_torque": (self.safety.collision.upper_torque, N_JOINTS),
            "safety.collision.lower_force": (self.safety.collision.lower_force, 6),
            "safety.collision.upper_force": (self.safety.collision.upper_force, 6),
        }
        for key, (value, n) in lengths.items():
            if len(value) != n:
                raise FrankaConfigError(f"{key}: must have {n} values, got {len(value)}")
        if self.mode not in get_args(ControlMode):
            raise FrankaConfigError(f"mode: must be one of {get_args(ControlMode)}, not {self.mode!r}")
        if self.realtime not in get_args(Realtime):
            raise FrankaConfigError(f"realtime: must be one of {get_args(Realtime)}, not {self.realtime!r}")
        s = self.safety
        if not np.all(np.asarray(s.workspace_min) < np.asarray(s.workspace_max)):
            raise FrankaConfigError("safety.workspace_min: must be below safety.workspace_max on every axis")
        if np.any(np.asarray(s.max_joint_torque) > TAU_MAX) or np.any(np.asarray(s.max_joint_torque) <= 0):
            raise FrankaConfigError(f"safety.max_joint_torque: must be in (0, {TAU_MAX.tolist()}] Nm")
        if not 0 < s.max_torque_rate <= DTAU_MAX:
            raise FrankaConfigError(f"safety.max_torque_rate: must be in (0, {DTAU_MAX:g}] Nm/s")
        positive = {
            "safety.command_timeout_s": s.command_timeout_s,
            "safety.max_ee_force": s.max_ee_force,
            "impedance.interpolation_time_s": self.impedance.interpolation_time_s,
            "impedance.max_ee_speed": self.impedance.max_ee_speed,
            "impedance.max_ee_angular_speed": self.impedance.max_ee_angular_speed,
            "gil_switch_interval_s": self.gil_switch_interval_s,
        }
        for key, value in positive.items():
            if not value > 0:
                raise FrankaConfigError(f"{key}: must be positive, got {value}")
        if not 0 <= self.loop_priority <= 99:
            raise FrankaConfigError(f"loop_priority: must be in [0, 99], got {self.loop_priority}")
        if not 0 <= s.joint_margin < 0.5:
            raise FrankaConfigError(f"safety.joint_margin: must be in [0, 0.5) rad, got {s.joint_margin}")

    @classmethod
    def load(cls, path: str | Path = DEFAULT_PATH, **overrides: Any) -> FrankaConfig:
        """Read a YAML config; ``overrides`` replace top-level keys (e.g. ``host`` for a sim)."""
        return load_yaml(
            cls,
            path,
            what="franka config",
            error=FrankaConfigError,
            ignore=("robot",),  # the file names its robot for humans; the class is the robot
            overrides=overrides,
            extra={"path": Path(path)},
        )
