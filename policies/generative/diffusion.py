"""DDPM/DDIM with Diffusion Policy's cosine schedule and ε-prediction.

Everything works in normalised action space ([-1, 1]) on a callable ``eps_fn(x, t) → ε̂`` with
t = k / num_train_steps ∈ [0, 1), so the same U-Net (continuous time input) serves diffusion and
flow matching. Samplers are plain Python loops over precomputed float coefficients: traced for
ONNX they unroll into a fixed-K graph with the coefficients as constants.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

EpsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def squaredcos_cap_v2(num_steps: int, max_beta: float = 0.999) -> torch.Tensor:
    """ᾱ_k for k = 0..num_steps−1 (float64): Nichol & Dhariwal's cosine schedule, β capped at 0.999."""

    def alpha_bar(s: float) -> float:
        return math.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2

    betas = [min(1 - alpha_bar((i + 1) / num_steps) / alpha_bar(i / num_steps), max_beta) for i in range(num_steps)]
    return torch.cumprod(1.0 - torch.tensor(betas, dtype=torch.float64), dim=0)


class Diffusion:
    """The forward process, its ε-prediction loss and two samplers; final samples are clipped to [-1, 1]."""

    def __init__(self, num_train_steps: int = 100) -> None:
        self.num_train_steps = num_train_steps
        self.alphas_cumprod = squaredcos_cap_v2(num_train_steps)
        self._ab = self.alphas_cumprod.tolist()

    def time_input(self, k: torch.Tensor | int) -> torch.Tensor | float:
        """The network's time input for step k: k / num_train_steps."""
        return k / self.num_train_steps

    def loss(self, eps_fn: EpsFn, x0: torch.Tensor) -> torch.Tensor:
        """Per-sample ‖ε − ε̂(x_k, k)‖² (mean over the chunk), k uniform in 0..num_train_steps−1."""
        k = torch.randint(0, self.num_train_steps, (x0.shape[0],), device=x0.device)
        noise = torch.randn_like(x0)
        ab = self.alphas_cumprod.to(x0.device)[k].float().view(-1, 1, 1)
        xk = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        return F.mse_loss(eps_fn(xk, self.time_input(k).float()), noise, reduction="none").mean(dim=(1, 2))

    def ddim_timesteps(self, steps: int) -> list[int]:
        """K timesteps, "trailing" spacing (Lin et al. 2024): the first is always num_train_steps − 1.

        Diffusion Policy used diffusers' "leading" spacing, whose K = 1 evaluates the network at
        k = 0 on pure noise (and K = 3 starts at k = 66): the model is asked a question it was
        never trained on. Trailing spacing starts every K at the last training step, where x is
        in fact (almost) pure noise; for K = 10 it gives 99, 89, …, 9.
        """
        n = self.num_train_steps
        if not 1 <= steps <= n:
            raise ValueError(f"DDIM steps must be in 1..{n}, got {steps}")
        return [round(n - i * n / steps) - 1 for i in range(steps)]

    def _x0(self, x: torch.Tensor, eps: torch.Tensor, k: int) -> torch.Tensor:
        ab = self._ab[k]
        return ((x - math.sqrt(1 - ab) * eps) / math.sqrt(ab)).clamp(-1.0, 1.0)

    def _eval(self, eps_fn: EpsFn, x: torch.Tensor, k: int) -> torch.Tensor:
        # A (B,) time tensor derived from x, so a traced graph keeps the batch dimension dynamic.
        t = torch.ones_like(x[:, 0, 0]) * self.time_input(k)
        return eps_fn(x, t)

    def ddim_sample(self, eps_fn: EpsFn, noise: torch.Tensor, steps: int) -> torch.Tensor:
        """Deterministic DDIM (η = 0) in ``steps`` evaluations; the clean estimate is clipped each step."""
        ks = self.ddim_timesteps(steps)
        x = noise
        for i, k in enumerate(ks):
            eps = self._eval(eps_fn, x, k)
            x0 = self._x0(x, eps, k)
            ab_prev = self._ab[ks[i + 1]] if i + 1 < len(ks) else 1.0
            x = math.sqrt(ab_prev) * x0 + math.sqrt(1 - ab_prev) * eps
        return x

    # Every objective's deterministic sampler is `sample` (`methods.Objective`); diffusion's is DDIM.
    sample = ddim_sample

    def ddpm_sample(self, eps_fn: EpsFn, noise: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Ancestral DDPM over all training steps ("fixed_small" variance); per-step noise from ``generator``."""
        x = noise
        for k in reversed(range(self.num_train_steps)):
            ab, ab_prev = self._ab[k], (self._ab[k - 1] if k > 0 else 1.0)
            alpha, beta = ab / ab_prev, 1 - ab / ab_prev
            x0 = self._x0(x, self._eval(eps_fn, x, k), k)
            x = (math.sqrt(ab_prev) * beta * x0 + math.sqrt(alpha) * (1 - ab_prev) * x) / (1 - ab)
            if k > 0:
                var = max((1 - ab_prev) / (1 - ab) * beta, 1e-20)
                z = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
                x = x + math.sqrt(var) * z
        return x
