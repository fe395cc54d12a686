"""Training windows for action-chunk policies, cut from episodes of any task.

A window is what the policy sees at one control step c and what it must predict there: the
observations c−To+1 … c (oldest first) and the actions c−To+1 … c−To+H, so action index To−1 is
the current step's, as the Spec's generator contract (and `deploy.chunking`) reads a chunk.
Indices outside the episode repeat its first or last element, as Diffusion Policy pads: before
the start the robot "was already there", after the end it "stays". Every step of every episode is
one window's current step. Diffusion Policy drops the last H − To − Ta + 1 steps as current steps
(it pads at most Ta − 1 actions after the end); we keep them, so a policy also learns to hold
still at the end of a task rather than never seeing that state as its present.
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
    costs more than the network on a CPU).
    """

    def __init__(self, episodes: Sequence[Mapping[str, Any]], obs_horizon: int, horizon: int) -> None:
        if not episodes:
            raise ValueError("no episodes to cut windows from")
        if obs_horizon < 1 or horizon < obs_horizon:
            raise ValueError(f"need 1 <= obs_horizon ({obs_horizon}) <= horizon ({horizon})")
        obs, act, obs_idx, act_idx = [], [], [], []
        offset = 0
        for i, ep in enumerate(episodes):
            o = torch.as_tensor(ep["obs"], dtype=torch.float32)
            a = torch.as_tensor(ep["action"], dtype=torch.float32)
            if o.ndim != 2 or a.ndim != 2 or len(o) != len(a) or len(o) == 0:
                raise ValueError(
                    f"episode {i}: need obs (T, n) and action (T, A) with the same T >= 1, "
                    f"got {tuple(o.shape)} and {tuple(a.shape)}"
                )
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

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"obs": self.obs[self.obs_index[i]], "action": self.action[self.action_index[i]]}

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``idx`` as (obs (B, To, n), action (B, H, A))."""
        return self.obs[self.obs_index[idx]], self.action[self.action_index[idx]]
