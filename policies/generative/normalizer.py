"""Per-dimension min-max normalisation to [-1, 1], held in buffers so exported models carry it.

Diffusion Policy normalises actions (and low-dimensional observations) to [-1, 1] because its
sampler clips the clean-sample estimate to that box: the box must be where the data lives. The
scale and offset are buffers, not parameters, so they travel in ``state_dict`` and are baked into
ONNX as constants, and an optimiser never touches them.
"""

from __future__ import annotations

import torch
from torch import nn

RANGE_EPS = 1e-4


class MinMaxNormalizer(nn.Module):
    """``normalize(x) = x * scale + offset`` maps the fitted [min, max] of each dimension to [-1, 1].

    A dimension whose range is below ``RANGE_EPS`` (a constant, e.g. a joint that never moved in
    the demonstrations) gets unit scale and is centred on 0 rather than blown up by 1/range;
    Diffusion Policy also uses unit scale but maps such a value to -1, the box's edge, where a
    clipped sampler would pin it. An unfitted normaliser is the identity.
    """

    scale: torch.Tensor
    offset: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(dim))
        self.register_buffer("offset", torch.zeros(dim))

    @classmethod
    def fit(cls, data: torch.Tensor) -> MinMaxNormalizer:
        """Fit on rows of ``data`` (..., dim): every leading axis is treated as samples."""
        flat = data.detach().reshape(-1, data.shape[-1]).to(torch.float64)
        if flat.shape[0] == 0 or not torch.isfinite(flat).all():
            raise ValueError("cannot fit a normaliser on empty or non-finite data")
        lo, hi = flat.min(0).values, flat.max(0).values
        span = hi - lo
        constant = span < RANGE_EPS
        scale = torch.where(constant, torch.ones_like(span), 2.0 / span.clamp_min(RANGE_EPS))
        offset = torch.where(constant, -lo, -1.0 - lo * scale)
        norm = cls(flat.shape[1])
        norm.scale.copy_(scale.float())
        norm.offset.copy_(offset.float())
        return norm

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.offset

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.offset) / self.scale
