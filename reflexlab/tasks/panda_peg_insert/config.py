"""How hard `panda-peg-insert` is: the tracker's error on the hole pose and the demonstrator's imprecision.

The hole's true pose decides success; the policy (and the scripted expert) only sees it through a tracker,
as on a robot where a camera tracker or a calibrated fixture reports it. The tracker's error is a bias drawn
once per episode (calibration: the same wrong answer every frame, which averaging cannot remove) plus fresh
noise at every observation (jitter). With 0.5 mm clearance a side, a bias of ~1.5 mm puts the peg on the rim
most of the time, so the peg has to be searched in by feel (`expert`). The expert's action noise makes its
demonstrations imperfect and varied. These are the knobs for tuning how well an imitation policy can do.
"""

from __future__ import annotations

from dataclasses import dataclass

from reflexlab.tasks.panda_peg_insert.constants import EPISODE_STEPS


@dataclass(frozen=True)
class PegInsertConfig:
    """The task's profile (``default``); all noise is Gaussian, per axis, in metres."""

    episode_steps: int = EPISODE_STEPS
    hole_bias_std: float = 0.0015  # tracker bias of the hole's x, y: drawn once per episode
    hole_noise_std: float = 0.0005  # tracker jitter of the hole's x, y: drawn at every observation
    expert_noise_std: float = 0.0003  # added to each of the scripted expert's tip targets (x, y, z)
