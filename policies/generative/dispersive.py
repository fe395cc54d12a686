"""DMPO's dispersive regulariser: push the observation embeddings of a batch apart.

L_disp = log mean_{i≠j} exp(−‖z_i − z_j‖² / τ), an InfoNCE loss with no positive pairs
(Wang & He 2025). Minimising it spreads the embeddings, which keeps a one-step generator's
condition from collapsing distinct observations together. Computed with logsumexp, so distant
embeddings (exp underflowing to 0) still give a finite loss and gradient.
"""

from __future__ import annotations

import math

import torch


def dispersive_loss(z: torch.Tensor, tau: float = 0.4) -> torch.Tensor:
    """z (B, D) with B >= 2 → scalar; τ ≈ 0.3–0.5 (METHODS.md), weight it ≈ 0.5 in the total loss."""
    b = z.shape[0]
    if b < 2:
        raise ValueError("the dispersive loss needs at least two embeddings")
    d2 = (z[:, None, :] - z[None, :, :]).pow(2).sum(dim=-1)  # not cdist: its sqrt has no gradient at 0
    off_diag = ~torch.eye(b, dtype=torch.bool, device=z.device)
    return torch.logsumexp(-d2[off_diag] / tau, dim=0) - math.log(b * (b - 1))
