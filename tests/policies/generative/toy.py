"""A toy conditional bimodal task for generative policies, small enough to learn in seconds on one thread.

Observation: a scalar c ~ U(−0.5, 0.5), the same at both history steps. Action chunk: 4 steps of
one action, all c + 1 or all c − 1, each in half of the episodes. A regressor learns
the mean c, which is neither answer; a generative policy must produce both modes, each chunk
near one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from policies.generative.policy import GenerativePolicy, PolicyOptions
from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec

OBS_HORIZON, CHUNK = 2, 4
# One U-Net level keeps a training step at ~10 ms on one thread; the multi-level paths have their
# own (untrained) tests.
TINY = PolicyOptions(down_dims=(16,), time_embed_dim=32, encoder_hidden=64, encoder_dim=32)


def toy_spec(task: str = "bimodal") -> Spec:
    return Spec(
        robot="toy",
        task=task,
        observation_groups=(ObsGroup("policy", (ObsTerm("c", 1, "1"),)),),
        policy_group="policy",
        action=ActionSpec("joint_position", ("a",), 1.0, (0.0,), (-2.0,), (2.0,)),
        control_rate_hz=10.0,
        physics_rate_hz=10.0,
        action_chunk=CHUNK,
        execution_horizon=2,
        observation_horizon=OBS_HORIZON,
    )


def toy_episodes(n: int = 256, length: int = 4, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``n`` (even) episodes of ``length`` steps, each with one c and one mode."""
    g = torch.Generator().manual_seed(seed)
    c = torch.rand(n, generator=g) - 0.5
    # Exactly half the episodes per mode, in random order: a sampled split (54 % for seed 0) would
    # shift what a faithful policy's mode fractions should be.
    sign = torch.tensor([1.0, -1.0]).repeat(n // 2)[torch.randperm(n // 2 * 2, generator=g)]
    return [
        {"obs": torch.full((length, 1), float(ci)), "action": torch.full((length, 1), float(ci + si))}
        for ci, si in zip(c, sign, strict=True)
    ]


@dataclass(frozen=True)
class ModeStats:
    """How ``n`` sampled chunks relate to the two modes c ± 1."""

    plus_fraction: float  # chunks whose mean lies above c
    mean_error: float  # mean over chunks of the max |action − nearest mode| within the chunk
    near_fraction: float  # chunks whose every action is within 0.25 of the nearest mode
    mean_offset: float  # mean |chunk mean − c|: 1 when on a mode, 0 when between the modes

    def __str__(self) -> str:
        return (
            f"+mode {self.plus_fraction:.2f}, mean max-error {self.mean_error:.3f}, "
            f"near {self.near_fraction:.2f}, |mean − c| {self.mean_offset:.2f}"
        )


def mode_stats(policy: GenerativePolicy, steps: int, n: int = 200, seed: int = 1) -> ModeStats:
    g = torch.Generator().manual_seed(seed)
    c = torch.linspace(-0.5, 0.5, n)
    obs = c.view(n, 1, 1).expand(n, OBS_HORIZON, 1).contiguous()
    noise = torch.randn(n, CHUNK, 1, generator=g)
    with torch.no_grad():
        chunks = policy.sample(obs, noise, steps) - c.view(n, 1, 1)
    offset = chunks.mean(dim=(1, 2))
    error = (chunks - torch.sign(offset).view(n, 1, 1)).abs().amax(dim=(1, 2))
    return ModeStats(
        plus_fraction=float((offset > 0).float().mean()),
        mean_error=float(error.mean()),
        near_fraction=float((error < 0.25).float().mean()),
        mean_offset=float(offset.abs().mean()),
    )
