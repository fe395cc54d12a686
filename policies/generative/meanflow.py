"""MeanFlow (Geng et al. 2025): learn the *average* velocity over [r, t] so that one step samples.

Same path as flow matching: z_t = (1 − t)·x + t·ε, instantaneous velocity v = ε − x. The network
u(z, r, t) (conditioned on t and t − r) predicts the average velocity, z_r = z_t − (t − r)·u, which
obeys u = v − (t − r)·du/dt along the path, du/dt = v·∂_z u + ∂_t u. That total derivative is one
forward-mode product: ``torch.func.jvp(u_fn, (z, t, r), (v, 1, 0))`` — tangents in argument
order — which also returns u itself from the same evaluation (so any randomness inside the
network would agree between the two). The whole regression target is detached.

Two variants (``variant``):

* ``"mf"``: the paper's loss, ‖u − sg(v − (t − r)·du/dt)‖² with tangent v = ε − x.
* ``"imf"`` (default): improved MeanFlow, as DMPO uses it: the tangent is the model's own
  instantaneous velocity sg(u(z, t, t)) instead of the noisy conditional v, and the loss regresses
  the compound V = u + (t − r)·sg(du/dt) onto v. One extra no-grad evaluation per step.

iMF is the default because its lower-variance target measured as good or better on our bimodal
toy task: one-step mean max error 0.118 vs 0.146 after 300 steps from a flow teacher, 0.113 vs
0.122 after 400, for ~15 % more time per step.

Distilling from a teacher, each chunk comes with the noise the teacher sampled it from, so the one
jump a policy takes has a known target: u(ε, r = 0, t = 1) = ε − chunk. Two options train that jump
harder than the logit-normal times do (about 1 pair in 200 lands near it):

* ``endpoint_weight`` > 0 adds that regression, adaptively weighted like the rest, to the MeanFlow
  loss (one more forward and backward pass: ~30 % more time per step).
* ``jump_fraction`` sets (r, t) = (0, 1) for that fraction of the batch inside the MeanFlow loss.

Both are off here; `reflexlab distill` turns the endpoint term on (see `policies.imitation.distill_run`
for what each measured on panda-push-t).

Every term is weighted per sample by 1/(sg(ℓ) + 1e-3)^p (p = 1, the paper's best), and all run in
float32 outside autocast: forward-mode AD and the small adaptive-weight constant do not mix with
reduced precision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

AverageVelocityFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
MeanFlowVariant = Literal["mf", "imf"]


def jvp_along_path(
    u_fn: AverageVelocityFn, z: torch.Tensor, t: torch.Tensor, r: torch.Tensor, dz_dt: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(u(z, t, r), du/dt) where z moves with velocity ``dz_dt``, t with rate 1 and r stays fixed."""
    return torch.func.jvp(u_fn, (z, t, r), (dz_dt, torch.ones_like(t), torch.zeros_like(r)))


class MeanFlow:
    """Training times, the average-velocity loss and the few-step sampler, in normalised action space.

    Times: t and r are the max and min of two logit-normal draws σ(N(``logit_mean``,
    ``logit_std``)), and for a fraction ``r_equals_t`` of samples r = t, which trains the
    instantaneous velocity (the flow-matching special case) that the average velocity is anchored
    to. We take r = t for 0.5, the upper end of the range in METHODS.md (the paper's best on images
    is 0.75): one-step sampling only ever asks for the full (r = 0, t = 1) jump.

    The logit-normal is ours to choose (METHODS.md gives no parameters). The paper's image setting
    N(−0.4, 1) almost never draws t > 0.95 together with r < 0.05, the very jump a one-step policy
    makes; on the bimodal toy problem of our tests it left one-step chunks with a mean max error
    of 0.26 after 400 steps, where N(0, 2) gave 0.10. With r = t for half the batch, N(0, 2) puts about
    1 pair in 200 in that corner, N(−0.4, 1) about 1 in 400,000. Hence N(0, 2).
    """

    def __init__(
        self,
        variant: MeanFlowVariant = "imf",
        r_equals_t: float = 0.5,
        logit_mean: float = 0.0,
        logit_std: float = 2.0,
        weight_power: float = 1.0,
        weight_eps: float = 1e-3,
        jump_fraction: float = 0.0,
        endpoint_weight: float = 0.0,
    ) -> None:
        if variant not in ("mf", "imf"):
            raise ValueError(f"MeanFlow variant must be 'mf' or 'imf', got {variant!r}")
        for name, value in (("r_equals_t", r_equals_t), ("jump_fraction", jump_fraction)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"MeanFlow {name} is a fraction of the batch in [0, 1], got {value}")
        if endpoint_weight < 0:
            raise ValueError(f"MeanFlow endpoint_weight must be >= 0, got {endpoint_weight}")
        self.variant, self.r_equals_t = variant, r_equals_t
        self.jump_fraction, self.endpoint_weight = jump_fraction, endpoint_weight
        self.logit_mean, self.logit_std = logit_mean, logit_std
        self.weight_power, self.weight_eps = weight_power, weight_eps

    def sample_times(self, n: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        draws = torch.sigmoid(self.logit_mean + self.logit_std * torch.randn(2, n, device=device))
        t, r = draws.max(dim=0).values, draws.min(dim=0).values
        r = torch.where(torch.rand(n, device=device) < self.r_equals_t, t, r)
        if self.jump_fraction > 0:
            jump = torch.rand(n, device=device) < self.jump_fraction
            t, r = torch.where(jump, torch.ones_like(t), t), torch.where(jump, torch.zeros_like(r), r)
        return t, r

    def loss(
        self,
        u_fn: AverageVelocityFn,
        x0: torch.Tensor,
        noise: torch.Tensor | None = None,
        step_weights: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-sample adaptively weighted loss; ``u_fn(z, t, r)`` is the network's average velocity.

        ``noise`` couples each chunk with its own noise (a teacher's sample from that noise, see
        `teacher_samples`); by default it is drawn independently, as when learning from data.
        ``step_weights`` (H,), mean 1, weighs each chunk step's squared error (see
        `consistency.chunk_step_weights`).
        """
        if self.endpoint_weight > 0 and noise is None:
            raise ValueError(
                "the MeanFlow endpoint term needs coupled (noise, chunk) pairs from a teacher: with independent "
                "noise its target is the mean of the data, not a sample"
            )
        t, r = self.sample_times(x0.shape[0], x0.device)
        noise = torch.randn_like(x0) if noise is None else noise
        tb, gap = t.view(-1, 1, 1), (t - r).view(-1, 1, 1)
        z = (1 - tb) * x0 + tb * noise
        v = noise - x0
        with torch.autocast(device_type=x0.device.type, enabled=False):
            if self.variant == "mf":
                u, dudt = jvp_along_path(u_fn, z, t, r, v)
                err = u - (v - gap * dudt).detach()
            else:
                with torch.no_grad():
                    v_model = u_fn(z, t, t)
                u, dudt = jvp_along_path(u_fn, z, t, r, v_model)
                err = u + gap * dudt.detach() - v
            loss = self._weighted(err, step_weights)
            if self.endpoint_weight > 0:
                ones = torch.ones_like(t)
                loss = loss + self.endpoint_weight * self._weighted(u_fn(noise, ones, 0 * ones) - v, step_weights)
        return loss

    def _weighted(self, err: torch.Tensor, step_weights: torch.Tensor | None) -> torch.Tensor:
        """Per-sample squared error (B,), adaptively weighted by 1/(sg(ℓ) + eps)^p."""
        sq = err.pow(2) if step_weights is None else err.pow(2) * step_weights.view(1, -1, 1)
        per_sample = sq.sum(dim=(1, 2))
        return (per_sample.detach() + self.weight_eps).pow(-self.weight_power) * per_sample

    @staticmethod
    def sample(u_fn: AverageVelocityFn, noise: torch.Tensor, steps: int) -> torch.Tensor:
        """``steps`` equal jumps z_r = z_t − (t − r)·u(z_t, t, r) from t = 1 to 0 (one step: z₁ − u(z₁, 1, 0))."""
        if steps < 1:
            raise ValueError(f"MeanFlow steps must be >= 1, got {steps}")
        z = noise
        for i in range(steps):
            ones = torch.ones_like(z[:, 0, 0])
            t, r = ones * (1.0 - i / steps), ones * (1.0 - (i + 1) / steps)
            z = z - (t - r).view(-1, 1, 1) * u_fn(z, t, r)
        return z.clamp(-1.0, 1.0)
