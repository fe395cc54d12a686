"""Flow matching on the straight path between an action chunk and noise, sampled with Euler steps.

Convention (shared with MeanFlow): x_t = t·ε + (1 − t)·A, so t = 1 is pure noise, t = 0 the data,
and the velocity dx_t/dt = ε − A is what the network regresses. Training times follow
t ~ Beta(1.5, 1), whose density ∝ √t puts more weight near t = 1: the noisy end, where the field
is hardest to learn. That is π0's choice restated in this direction (π0 writes τ = 1 − t and
samples 1 − τ from the same Beta); a Beta(1.5, 1) in π0's own variable would instead favour the
nearly clean end.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class FlowMatching:
    """Loss and Euler sampler in normalised action space; final samples are clipped to [-1, 1]."""

    def __init__(self, beta_a: float = 1.5, beta_b: float = 1.0) -> None:
        self.time_dist = torch.distributions.Beta(torch.tensor(beta_a), torch.tensor(beta_b))

    def loss(self, v_fn: VelocityFn, x0: torch.Tensor) -> torch.Tensor:
        """Per-sample ‖v̂(x_t, t) − (ε − A)‖² (mean over the chunk)."""
        t = self.time_dist.sample((x0.shape[0],)).to(x0.device)
        noise = torch.randn_like(x0)
        tb = t.view(-1, 1, 1)
        xt = tb * noise + (1 - tb) * x0
        return (v_fn(xt, t) - (noise - x0)).pow(2).mean(dim=(1, 2))

    @staticmethod
    def sample(v_fn: VelocityFn, noise: torch.Tensor, steps: int) -> torch.Tensor:
        """Euler from t = 1 to t = 0 in ``steps`` equal steps."""
        if steps < 1:
            raise ValueError(f"Euler steps must be >= 1, got {steps}")
        x, dt = noise, 1.0 / steps
        for i in range(steps):
            t = torch.ones_like(x[:, 0, 0]) * (1.0 - i * dt)
            x = x - dt * v_fn(x, t)
        return x.clamp(-1.0, 1.0)
