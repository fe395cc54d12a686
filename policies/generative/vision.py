"""Camera observations → features for the FiLM condition: Diffusion Policy's image encoder, sized for CPUs.

Diffusion Policy encodes each camera with its own ResNet-18 (BatchNorm replaced by GroupNorm, global
average pooling replaced by spatial-softmax keypoints, then a linear layer), shared over the To
observation frames, with a random crop of ≈ 90 % of the image in training and the centre crop at
inference. `ImageEncoder` keeps that recipe and shrinks the trunk: a stride-2 stem and one residual
block per stage (each halving the resolution), GroupNorm throughout (BatchNorm's running statistics
break EMA and make train and eval differ), ~0.1 M parameters at the default widths against
ResNet-18's 11 M, so a batch of 64 × 2 frames of 96×96 trains on one CPU thread.

Input contract (also that of exported ONNX files): raw RGB frames as uint8 (B, To, 3, H, W), oldest
first, exactly what a camera driver delivers (no scaling, no normalisation by the caller): the /255
scaling lives inside the module. Random cropping happens only in training mode; in eval mode (and
therefore in every export) the crop is the fixed centre crop, so the module is deterministic.
"""

from __future__ import annotations

import torch
from torch import nn


def crop_size(image_size: tuple[int, int], fraction: float) -> tuple[int, int]:
    """The (h, w) a ``fraction`` crop keeps of an (H, W) image: Diffusion Policy's 84 of 96 is 0.875."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"crop fraction must be in (0, 1], got {fraction}")
    return tuple(max(1, round(fraction * s)) for s in image_size)  # type: ignore[return-value]


class ResidualBlock2d(nn.Module):
    """conv3×3 (stride s) → GN → Mish → conv3×3 → GN, plus a 1×1 (stride s) projection; then Mish."""

    def __init__(self, c_in: int, c_out: int, stride: int, n_groups: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False),
            nn.GroupNorm(n_groups, c_out),
            nn.Mish(),
            nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False),
            nn.GroupNorm(n_groups, c_out),
        )
        self.skip = (
            nn.Identity()
            if stride == 1 and c_in == c_out
            else nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.GroupNorm(n_groups, c_out))
        )
        self.act = nn.Mish()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + self.skip(x))


class SpatialSoftmax(nn.Module):
    """Feature map (N, C, h, w) → ``keypoints`` expected image positions (N, 2·keypoints) in [-1, 1].

    A 1×1 convolution proposes the keypoint heat maps; each is a softmax over the pixels, and the
    output is its expected (x, y). Positions, not pooled intensities, are what a manipulation policy
    needs from a camera (Levine et al.; Diffusion Policy uses 32 keypoints).
    """

    pos: torch.Tensor

    def __init__(self, channels: int, keypoints: int, height: int, width: int) -> None:
        super().__init__()
        self.keypoints = nn.Conv2d(channels, keypoints, 1)
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij")
        self.register_buffer("pos", torch.stack([xs.reshape(-1), ys.reshape(-1)], dim=1))  # (h·w, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heat = self.keypoints(x).flatten(2).softmax(dim=-1)  # (N, K, h·w)
        return (heat @ self.pos).flatten(1)  # (N, 2K)


class ImageEncoder(nn.Module):
    """One camera: uint8 frames (B, To, 3, H, W) → features (B, To, out_dim), the same network for every frame.

    Args:
        image_size: (H, W) of the frames it takes.
        crop_fraction: side fraction of the crop (random in training, centred in eval).
        channels: widths of the stages; the stem and each stage halve the resolution.
        keypoints: spatial-softmax keypoints.
        out_dim: feature size per frame.
        n_groups: GroupNorm groups (each width must divide by it).
    """

    def __init__(
        self,
        image_size: tuple[int, int],
        crop_fraction: float = 0.9,
        channels: tuple[int, ...] = (16, 32, 64),
        keypoints: int = 32,
        out_dim: int = 64,
        n_groups: int = 8,
    ) -> None:
        super().__init__()
        if not channels or any(c % n_groups for c in channels):
            raise ValueError(f"image encoder widths {channels} must be non-empty multiples of n_groups={n_groups}")
        self.image_size = (int(image_size[0]), int(image_size[1]))
        self.crop = crop_size(self.image_size, crop_fraction)
        self.out_dim = out_dim
        stem = [nn.Conv2d(3, channels[0], 3, 2, 1, bias=False), nn.GroupNorm(n_groups, channels[0]), nn.Mish()]
        stages = [
            ResidualBlock2d(c_in, c_out, 2, n_groups)
            for c_in, c_out in zip((channels[0], *channels[:-1]), channels, strict=True)
        ]
        self.trunk = nn.Sequential(*stem, *stages)
        h, w = self.crop
        for _ in range(len(channels) + 1):
            h, w = (h + 1) // 2, (w + 1) // 2
        self.pool = SpatialSoftmax(channels[-1], keypoints, h, w)
        self.out = nn.Linear(2 * keypoints, out_dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b, to = images.shape[:2]
        x = images.reshape(b * to, *images.shape[2:])
        x = self._crop(x).float() * (2.0 / 255.0) - 1.0  # uint8 [0, 255] → [-1, 1]
        return self.out(self.pool(self.trunk(x))).reshape(b, to, self.out_dim)

    def _crop(self, x: torch.Tensor) -> torch.Tensor:
        """Random crop per frame in training mode, the centre crop otherwise (fixed slices: ONNX-friendly)."""
        (H, W), (h, w) = self.image_size, self.crop
        if not self.training:
            top, left = (H - h) // 2, (W - w) // 2
            return x[:, :, top : top + h, left : left + w]
        n = x.shape[0]
        top = torch.randint(0, H - h + 1, (n, 1, 1), device=x.device)
        left = torch.randint(0, W - w + 1, (n, 1, 1), device=x.device)
        rows = (top + torch.arange(h, device=x.device).view(1, h, 1)).expand(n, h, w)
        cols = (left + torch.arange(w, device=x.device).view(1, 1, w)).expand(n, h, w)
        frame = torch.arange(n, device=x.device).view(n, 1, 1).expand(n, h, w)
        return x.permute(0, 2, 3, 1)[frame, rows, cols].permute(0, 3, 1, 2)  # (n, 3, h, w)
