"""Training windows for action-chunk policies, cut from episodes of any task.

A window is what the policy sees at one control step c and what it must predict there: the
observations c−To+1 … c (oldest first) and the actions c−To+1 … c−To+H, so action index To−1 is
the current step's, as the Spec's generator contract (and `reflexlab.chunking`) reads a chunk.
Indices outside the episode repeat its first or last element, as Diffusion Policy pads: before
the start the robot "was already there", after the end it "stays". Every step of every episode is
one window's current step. Diffusion Policy drops the last H − To − Ta + 1 steps as current steps
(it pads at most Ta − 1 actions after the end); we keep them, so a policy also learns to hold
still at the end of a task rather than never seeing that state as its present.

Camera frames, when the episodes carry them (``"images"``: (T, K, 3, H, W) uint8, K cameras), are
kept once per step and gathered through the observation indices, so an image window pads exactly as
its state window does and nothing is copied per window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset


class ChunkWindows(Dataset):
    """Windows over ``episodes`` (each {"obs": (T, n), "action": (T, A)}, float32 arrays or tensors).

    Items are {"obs": (To, n), "action": (H, A)}; `gather` returns a whole batch at once from
    precomputed indices, which is what the training loops use (a DataLoader over single items
    costs more than the network on a CPU). Episodes may also carry ``"images"`` (T, K, 3, H, W)
    uint8 (all of them or none); items then have ``"images"`` (To, K, 3, H, W) and `gather` a third
    element.
    """

    def __init__(self, episodes: Sequence[Mapping[str, Any]], obs_horizon: int, horizon: int) -> None:
        if not episodes:
            raise ValueError("no episodes to cut windows from")
        if obs_horizon < 1 or horizon < obs_horizon:
            raise ValueError(f"need 1 <= obs_horizon ({obs_horizon}) <= horizon ({horizon})")
        obs, act, obs_idx, act_idx, images = [], [], [], [], []
        with_images = "images" in episodes[0]
        offset = 0
        for i, ep in enumerate(episodes):
            if ("images" in ep) != with_images:
                raise ValueError(f"episode {i}: either every episode carries camera images or none does")
            o = torch.as_tensor(ep["obs"], dtype=torch.float32)
            a = torch.as_tensor(ep["action"], dtype=torch.float32)
            if o.ndim != 2 or a.ndim != 2 or len(o) != len(a) or len(o) == 0:
                raise ValueError(
                    f"episode {i}: need obs (T, n) and action (T, A) with the same T >= 1, "
                    f"got {tuple(o.shape)} and {tuple(a.shape)}"
                )
            if with_images:
                im = torch.as_tensor(ep["images"])
                if im.dtype != torch.uint8 or im.ndim != 5 or len(im) != len(o) or im.shape[2] != 3:
                    raise ValueError(
                        f"episode {i}: images must be uint8 (T, K, 3, H, W) with T = {len(o)}, "
                        f"got {im.dtype} {tuple(im.shape)}"
                    )
                images.append(im)
            steps = torch.arange(len(o))
            first = steps[:, None] - (obs_horizon - 1)
            obs_idx.append(offset + (first + torch.arange(obs_horizon)).clamp(0, len(o) - 1))
            act_idx.append(offset + (first + torch.arange(horizon)).clamp(0, len(o) - 1))
            obs.append(o)
            act.append(a)
            offset += len(o)
        dims = {(o.shape[1], a.shape[1]) for o, a in zip(obs, act, strict=True)}
        if len(dims) > 1:
            raise ValueError(f"episodes disagree on (obs size, action size): {sorted(dims)}")
        if with_images and len({tuple(im.shape[1:]) for im in images}) > 1:
            raise ValueError(
                f"episodes disagree on image shape (K, 3, H, W): {sorted({tuple(im.shape[1:]) for im in images})}"
            )
        self.images: torch.Tensor | None = torch.cat(images) if with_images else None
        self.obs, self.action = torch.cat(obs), torch.cat(act)
        self.obs_index, self.action_index = torch.cat(obs_idx), torch.cat(act_idx)
        self.obs_horizon, self.horizon = obs_horizon, horizon

    @property
    def obs_dim(self) -> int:
        return self.obs.shape[1]

    @property
    def action_dim(self) -> int:
        return self.action.shape[1]

    def __len__(self) -> int:
        return len(self.obs_index)

    @property
    def image_shape(self) -> tuple[int, ...] | None:
        """(K, 3, H, W) of the camera frames, or None without cameras."""
        return None if self.images is None else tuple(self.images.shape[1:])

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        item = {"obs": self.obs[self.obs_index[i]], "action": self.action[self.action_index[i]]}
        if self.images is not None:
            item["images"] = self.images[self.obs_index[i]]
        return item

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Windows ``idx`` as (obs (B, To, n), action (B, H, A)[, images (B, To, K, 3, H, W) uint8])."""
        out = self.obs[self.obs_index[idx]], self.action[self.action_index[idx]]
        return out if self.images is None else (*out, self.gather_images(idx))

    def gather_images(self, idx: torch.Tensor) -> torch.Tensor:
        """The camera frames of windows ``idx``, (B, To, K, 3, H, W) uint8, padded as the observations are."""
        if self.images is None:
            raise ValueError("these episodes carry no camera images")
        return self.images[self.obs_index[idx]]
