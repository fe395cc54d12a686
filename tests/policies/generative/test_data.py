"""ChunkWindows: every step is a window's current step, aligned and padded as the generator contract reads it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from policies.generative.data import ChunkWindows


def _episode(length: int, base: float) -> dict[str, np.ndarray]:
    """obs[t] = (base + t, −(base + t)), action[t] = base + 100 + t: every value names its step."""
    t = base + np.arange(length, dtype=np.float32)
    return {"obs": np.stack([t, -t], axis=1), "action": (t + 100)[:, None]}


def test_windows_align_the_current_step_and_repeat_edges() -> None:
    w = ChunkWindows([_episode(5, 0.0)], obs_horizon=2, horizon=4)
    assert len(w) == 5
    first, last = w[0], w[4]
    # Step 0: the missing older observation and action repeat step 0.
    assert first["obs"][:, 0].tolist() == [0.0, 0.0]
    assert first["action"][:, 0].tolist() == [100.0, 100.0, 101.0, 102.0]
    # Step 4 (the last): actions past the end repeat the last one.
    assert last["obs"][:, 0].tolist() == [3.0, 4.0]
    assert last["action"][:, 0].tolist() == [103.0, 104.0, 104.0, 104.0]
    for c in range(5):
        item = w[c]
        assert item["obs"].shape == (2, 2) and item["action"].shape == (4, 1)
        assert item["obs"][-1, 0] == c, "the newest observation is the current step's"
        assert item["action"][1, 0] == 100 + c, "action index To−1 is the current step's"


def test_windows_never_cross_episodes_and_gather_matches_items() -> None:
    w = ChunkWindows([_episode(3, 0.0), _episode(4, 1000.0)], obs_horizon=3, horizon=6)
    assert len(w) == 7
    obs, act = w.gather(torch.arange(len(w)))
    assert obs.shape == (7, 3, 2) and act.shape == (7, 6, 1)
    assert (obs[:3] < 1000).all() and (obs[3:, :, 0] >= 1000).all()
    assert (act[:3] < 1000).all() and (act[3:] >= 1100).all()
    for i in range(len(w)):
        assert torch.equal(w[i]["obs"], obs[i]) and torch.equal(w[i]["action"], act[i])
    assert w[3]["action"][:, 0].tolist() == [1100.0, 1100.0, 1100.0, 1101.0, 1102.0, 1103.0]


def test_windows_refuse_inconsistent_episodes() -> None:
    with pytest.raises(ValueError, match="same T"):
        ChunkWindows([{"obs": np.zeros((4, 2)), "action": np.zeros((3, 1))}], 2, 4)
    with pytest.raises(ValueError, match="disagree"):
        ChunkWindows([_episode(3, 0.0), {"obs": np.zeros((3, 5)), "action": np.zeros((3, 1))}], 2, 4)
    with pytest.raises(ValueError, match="no episodes"):
        ChunkWindows([], 2, 4)
    with pytest.raises(ValueError, match="obs_horizon"):
        ChunkWindows([_episode(3, 0.0)], 5, 4)
