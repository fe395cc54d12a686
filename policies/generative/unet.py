"""Diffusion Policy's 1-D temporal convolution U-Net and the observation encoder that conditions it.

The network maps a noisy action chunk x (B, H, A), a continuous time t (B,) and a condition
(B, C) to a tensor shaped like x; what that output *means* (noise, velocity, average velocity) is
the method's business, so every generative method here shares this one network.

Built from operations that both forward-mode AD (``torch.func.jvp``, which MeanFlow needs) and
the ONNX exporter (opset 18) handle: convolutions, GroupNorm (never BatchNorm: its running
statistics break EMA and make train/eval differ), Mish, linear layers; no attention.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

TIME_SCALE = 100.0  # t = k/100 embeds as the integer step k, exactly as Diffusion Policy embeds it


class SinusoidalEmbedding(nn.Module):
    """Transformer-style sin/cos features of a continuous scalar (B,) → (B, dim)."""

    freqs: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        if dim % 2 or dim < 4:
            raise ValueError(f"time embedding size must be even and >= 4, got {dim}")
        half = dim // 2
        self.register_buffer("freqs", torch.exp(-math.log(10000.0) * torch.arange(half) / (half - 1)))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        arg = (t * TIME_SCALE)[:, None] * self.freqs[None, :]
        return torch.cat([arg.sin(), arg.cos()], dim=-1)


def _time_mlp(dim: int) -> nn.Sequential:
    return nn.Sequential(SinusoidalEmbedding(dim), nn.Linear(dim, 4 * dim), nn.Mish(), nn.Linear(4 * dim, dim))


class Conv1dBlock(nn.Sequential):
    """Conv1d → GroupNorm → Mish, length-preserving."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, n_groups: int) -> None:
        super().__init__(
            nn.Conv1d(c_in, c_out, kernel_size, padding=kernel_size // 2), nn.GroupNorm(n_groups, c_out), nn.Mish()
        )


class ConditionalResidualBlock1D(nn.Module):
    """Two conv blocks with FiLM in between: the condition gives a per-channel scale and bias."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, kernel_size: int, n_groups: int) -> None:
        super().__init__()
        self.block1 = Conv1dBlock(c_in, c_out, kernel_size, n_groups)
        self.block2 = Conv1dBlock(c_out, c_out, kernel_size, n_groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.residual = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, bias = self.film(cond).unsqueeze(-1).chunk(2, dim=1)
        out = self.block2(scale * self.block1(x) + bias)
        return out + self.residual(x)


class ConditionalUnet1D(nn.Module):
    """Chi et al.'s U-Net over the chunk's time axis, conditioned by FiLM on [time embedding, cond].

    ``down_dims`` sets the channel width per resolution; the chunk length is halved between
    levels, so it must be a multiple of `horizon_multiple`. The paper's state-input widths are
    (256, 512, 1024), 62 M parameters; the default (64, 128, 256) has 4 M, sized for CPU training.

    With ``two_times`` the network takes a second scalar ``h`` (MeanFlow: h = t − r), embedded by
    its own MLP and added to t's embedding. That MLP's last layer starts at zero, so a fresh
    two-time network, or one whose other weights come from a flow-matching teacher, initially
    ignores h: u(z, r, t) = v(z, t), exactly the r = t special case.
    """

    def __init__(
        self,
        action_dim: int,
        cond_dim: int,
        down_dims: tuple[int, ...] = (64, 128, 256),
        kernel_size: int = 5,
        n_groups: int = 8,
        time_embed_dim: int = 64,
        two_times: bool = False,
    ) -> None:
        super().__init__()
        if not down_dims or any(d % n_groups for d in down_dims):
            raise ValueError(f"down_dims {down_dims} must be non-empty multiples of n_groups={n_groups}")
        self.two_times = two_times
        self.horizon_multiple = 2 ** (len(down_dims) - 1)
        self.time_embed = _time_mlp(time_embed_dim)
        self.h_embed = _time_mlp(time_embed_dim) if two_times else None
        if self.h_embed is not None:
            nn.init.zeros_(self.h_embed[-1].weight)
            nn.init.zeros_(self.h_embed[-1].bias)
        film_dim = time_embed_dim + cond_dim

        def block(c_in: int, c_out: int) -> ConditionalResidualBlock1D:
            return ConditionalResidualBlock1D(c_in, c_out, film_dim, kernel_size, n_groups)

        dims = (action_dim, *down_dims)
        levels = list(itertools.pairwise(dims))
        self.down = nn.ModuleList(nn.ModuleList([block(c_in, c_out), block(c_out, c_out)]) for c_in, c_out in levels)
        self.downsample = nn.ModuleList(nn.Conv1d(c, c, 3, stride=2, padding=1) for _, c in levels[:-1])
        self.mid = nn.ModuleList([block(down_dims[-1], down_dims[-1]), block(down_dims[-1], down_dims[-1])])
        # Up path: the skips are every level's output but the finest, coarsest first, as in Diffusion
        # Policy (whose code also stores the finest level's output but never reads it).
        self.up = nn.ModuleList(
            nn.ModuleList([block(2 * c_out, c_in), block(c_in, c_in)]) for c_in, c_out in reversed(levels[1:])
        )
        self.upsample = nn.ModuleList(
            nn.ConvTranspose1d(c_in, c_in, 4, stride=2, padding=1) for c_in, _ in reversed(levels[1:])
        )
        self.final = nn.Sequential(
            Conv1dBlock(down_dims[0], down_dims[0], kernel_size, n_groups), nn.Conv1d(down_dims[0], action_dim, 1)
        )

    def forward(
        self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, h: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x (B, H, A), t (B,) in [0, 1], cond (B, C), h (B,) iff ``two_times`` → (B, H, A)."""
        if (h is None) == (self.h_embed is not None):
            raise ValueError("pass h exactly when the network was built with two_times=True")
        emb = self.time_embed(t)
        if self.h_embed is not None:
            emb = emb + self.h_embed(h)
        film = torch.cat([emb, cond], dim=-1)
        y = x.transpose(1, 2)
        skips = []
        for i, (b1, b2) in enumerate(self.down):
            y = b2(b1(y, film), film)
            if i > 0:
                skips.append(y)
            if i < len(self.downsample):
                y = self.downsample[i](y)
        for b in self.mid:
            y = b(y, film)
        for (b1, b2), upsample in zip(self.up, self.upsample, strict=True):
            y = torch.cat([y, skips.pop()], dim=1)
            y = upsample(b2(b1(y, film), film))
        return self.final(y).transpose(1, 2)


class ObsEncoder(nn.Module):
    """MLP over the flattened, normalised observation history (B, To, n) → embedding (B, out_dim).

    The embedding is the FiLM condition of every U-Net block, and the representation that DMPO's
    dispersive loss spreads apart. An MLP (rather than Diffusion Policy's raw concatenation)
    gives that loss a learned representation to act on at negligible cost.
    """

    def __init__(self, obs_dim: int, obs_horizon: int, hidden: int = 256, out_dim: int = 64) -> None:
        super().__init__()
        self.out_dim = out_dim
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(obs_horizon * obs_dim, hidden), nn.Mish(), nn.Linear(hidden, out_dim)
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)
