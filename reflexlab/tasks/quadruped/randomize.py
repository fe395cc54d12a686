"""Domain randomisation of the quadruped: what is randomised, over which ranges, switchable.

Sampling lives here (backend-free, torch); applying the samples to a simulator is the backend's
job, so every backend randomises the same physical quantities over the same ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RandomizationConfig:
    """Each effect can be switched off on its own; ranges are uniform."""

    friction: bool = True
    friction_range: tuple[float, float] = (0.4, 1.25)
    added_mass: bool = True
    added_mass_range: tuple[float, float] = (-1.0, 2.0)  # kg on the base
    motor_strength: bool = True
    motor_strength_range: tuple[float, float] = (0.9, 1.1)  # scales PD gains
    obs_noise: bool = True
    noise_ang_vel: float = 0.2  # rad/s
    noise_gravity: float = 0.05
    noise_joint_pos: float = 0.01  # rad
    noise_joint_vel: float = 1.5  # rad/s
    pushes: bool = True
    push_interval_s: float = 8.0
    push_max_vel: float = 0.8  # m/s added to the base's horizontal velocity

    @classmethod
    def off(cls) -> RandomizationConfig:
        return cls(friction=False, added_mass=False, motor_strength=False, obs_noise=False, pushes=False)


@dataclass
class PhysicsSample:
    """Per-environment physical parameters, shape (num_envs,)."""

    friction: torch.Tensor
    added_mass: torch.Tensor
    motor_strength: torch.Tensor


def _uniform(n: int, lo_hi: tuple[float, float], gen: torch.Generator) -> torch.Tensor:
    lo, hi = lo_hi
    return lo + (hi - lo) * torch.rand(n, generator=gen)


def sample_physics(cfg: RandomizationConfig, n: int, gen: torch.Generator, nominal_friction: float) -> PhysicsSample:
    """Draw the physics parameters of ``n`` environments (nominal values where switched off)."""
    return PhysicsSample(
        friction=_uniform(n, cfg.friction_range, gen) if cfg.friction else torch.full((n,), nominal_friction),
        added_mass=_uniform(n, cfg.added_mass_range, gen) if cfg.added_mass else torch.zeros(n),
        motor_strength=_uniform(n, cfg.motor_strength_range, gen) if cfg.motor_strength else torch.ones(n),
    )


def push_velocities(cfg: RandomizationConfig, n: int, gen: torch.Generator) -> torch.Tensor:
    """Horizontal base-velocity kicks (n, 2), m/s."""
    return (torch.rand(n, 2, generator=gen) * 2 - 1) * cfg.push_max_vel
