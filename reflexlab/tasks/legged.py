"""Backend-neutral state of a floating-base legged robot, as torch tensors.

A backend (MuJoCo CPU, MuJoCo Warp, Isaac Lab) fills a `LeggedState` each control step; a task
reads only this, so task definitions never touch a simulator API.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LeggedState:
    """One control step of N robots; frames are noted per field."""

    base_pos: torch.Tensor  # (N, 3) world
    base_quat: torch.Tensor  # (N, 4) w, x, y, z
    base_lin_vel: torch.Tensor  # (N, 3) base frame
    base_ang_vel: torch.Tensor  # (N, 3) base frame
    projected_gravity: torch.Tensor  # (N, 3) unit gravity direction in the base frame
    joint_pos: torch.Tensor  # (N, J) rad
    joint_vel: torch.Tensor  # (N, J) rad/s
    joint_torque: torch.Tensor  # (N, J) N m, applied by the actuators
    foot_force: torch.Tensor  # (N, F) normal contact force, N
    foot_vel: torch.Tensor  # (N, F, 3) world
    foot_height: torch.Tensor  # (N, F) height of the foot sole above the ground, m
    fall_contact: torch.Tensor  # (N,) bool: a body part that must not touch the ground does
    friction: torch.Tensor  # (N,) ground friction coefficient
    added_mass: torch.Tensor  # (N,) kg


def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate world vectors ``v`` (N, 3) into the frames of unit quaternions ``q`` (N, 4, wxyz)."""
    w, xyz = q[:, :1], q[:, 1:]
    a = v * (2.0 * w * w - 1.0)
    b = torch.cross(xyz, v, dim=-1) * w * 2.0
    c = xyz * (xyz * v).sum(-1, keepdim=True) * 2.0
    return a - b + c
