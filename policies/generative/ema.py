"""Exponential moving average of a model's weights: what generative policies sample and export with.

Diffusion Policy's schedule, decay = 1 − (1 + step)^−0.75 capped at 0.9999, starts near 0 (the
average follows the fresh model) and approaches the cap only after thousands of steps, so short
runs still get a useful average. Students use a fixed decay (RL-100: ≈ 0.95). Buffers (the
normalisers) are copied, not averaged. Models with BatchNorm are refused: the average of weights
trained against different batch statistics does not match any running statistics.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class EMA:
    """An averaged copy of ``model`` (``ema.model``), updated after each optimiser step.

    ``fixed_decay`` replaces the warm-up schedule by a constant; otherwise the decay at update
    number k (from 0) is min(``max_decay``, 1 − (1 + k)^−``power``), which is 0 at k = 0.
    """

    def __init__(
        self, model: nn.Module, max_decay: float = 0.9999, power: float = 0.75, fixed_decay: float | None = None
    ) -> None:
        if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
            raise ValueError("EMA of a model with BatchNorm is unsound; use GroupNorm")
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.max_decay, self.power, self.fixed_decay = max_decay, power, fixed_decay
        self.updates = 0

    def decay(self) -> float:
        if self.fixed_decay is not None:
            return self.fixed_decay
        return min(self.max_decay, 1.0 - (1.0 + self.updates) ** -self.power)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        d = self.decay()
        for avg, p in zip(self.model.parameters(), model.parameters(), strict=True):
            avg.lerp_(p.detach(), 1.0 - d)
        for avg, b in zip(self.model.buffers(), model.buffers(), strict=True):
            avg.copy_(b)
        self.updates += 1
