"""How hard `panda-peg-insert` is: the tracker's error on the hole pose and the demonstrator's imprecision.

The hole's true pose decides success; the policy (and the scripted expert) only sees it through a tracker,
as on a robot where a camera tracker or a calibrated fixture reports it. The tracker's error is a bias drawn
once per episode (calibration: the same wrong answer every frame, which averaging cannot remove) plus fresh
noise at every observation (jitter). With 0.5 mm clearance a side, a bias of ~1.5 mm puts the peg on the rim
most of the time, so the peg has to be searched in by feel (`expert`). The expert's action noise makes its
demonstrations imperfect and varied. These are the knobs for tuning how well an imitation policy can do.

The default bias of 3 mm puts a 25-demonstration diffusion policy (executing 2 actions per chunk) at 0.602 ± 0.040
success over 3 training seeds (200 episodes each): at the edge of the 20–60 % band the real-world RL bars ask of
the imitation policy (seed 2's 0.645 puts the mean 0.002 above it); the expert inserts 200/216 (at 2 mm: the
policy 0.76, the expert 400/404; at 1.5 mm the policy executing 8 actions per chunk 0.72).
"""

from __future__ import annotations

from dataclasses import dataclass

from reflexlab.tasks.panda_peg_insert.constants import EPISODE_STEPS


@dataclass(frozen=True)
class PegInsertConfig:
    """The task's profile (``default``); all noise is Gaussian, per axis, in metres."""

    episode_steps: int = EPISODE_STEPS
    hole_bias_std: float = 0.0030  # tracker bias of the hole's x, y: drawn once per episode
    hole_noise_std: float = 0.0005  # tracker jitter of the hole's x, y: drawn at every observation
    expert_noise_std: float = 0.0003  # added to each of the scripted expert's tip targets (x, y, z)
