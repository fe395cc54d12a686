"""Which way round the block a pusher trajectory goes: the expert's two modes, measured.

At a *two-sided* state the scripted expert drew the side of its detour at random, so the
demonstrations hold both answers for the same state. A policy that kept the data's
multimodality answers such a state either way depending on its noise; one that collapsed (or
averaged) does not. A predicted chunk's mode is the sign of the angle its pusher positions sweep
around the block's centre of mass (+1 counter-clockwise, −1 clockwise, 0 when it barely moves).
"""

from __future__ import annotations

import numpy as np

from reflexlab.dataset import Dataset


def two_sided_states(dataset: Dataset, obs_horizon: int, max_states: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Observation histories (M, To, n) at the first step of each two-sided detour, and the expert's sides (M,)."""
    hists, sides = [], []
    for ep in dataset.episodes():
        obs = ep["observation.state"]
        two = ep["expert.two_sided"][:, 0] > 0.5
        detour = ep["expert.detour"][:, 0]
        starts = np.flatnonzero(two & np.concatenate([[True], ~two[:-1]]))
        for t in starts:
            idx = np.clip(np.arange(t - obs_horizon + 1, t + 1), 0, None)  # pad at the episode start
            hists.append(obs[idx])
            sides.append(int(np.sign(detour[t])))
            if len(hists) >= max_states:
                return np.stack(hists), np.asarray(sides)
    if not hists:
        raise ValueError(f"{dataset.root}: no two-sided expert states (expert.two_sided) in this dataset")
    return np.stack(hists), np.asarray(sides)


def chunk_mode(
    chunks: np.ndarray, obs_hist: np.ndarray, start: int, horizon: int, min_angle: float = 0.1
) -> np.ndarray:
    """Mode (+1/−1/0) of each predicted chunk (S, H, 2) at one state: its swept angle round the block.

    ``obs_hist`` is the state's history (To, n) with the block position at indices 2:4 of the
    newest observation; ``start``/``horizon`` select the executed actions, prefixed by the pusher's
    current position.
    """
    centre = obs_hist[-1, 2:4]
    pusher = obs_hist[-1, 0:2]
    path = np.concatenate([np.broadcast_to(pusher, (len(chunks), 1, 2)), chunks[:, start : start + horizon]], 1)
    rel = path - centre
    ang = np.unwrap(np.arctan2(rel[..., 1], rel[..., 0]), axis=1)
    swept = ang[:, -1] - ang[:, 0]
    return np.where(np.abs(swept) < min_angle, 0, np.sign(swept)).astype(int)
