"""The format-1 test dataset (tests/reflexlab/data/format1, made by the writer before issue 21), made whole.

Its Parquet and JSON files are committed as the old writer left them; its camera's MP4s are not (no binaries in
git): they are encoded here, at copy time, from the frames its README lists, with the encoder the old writer used
(`reflexlab.dataset.video.VideoEncoder`, unchanged since): episode e's frame t at t / fps, a dropped step
repeating the frame before it. File 002 is the crashed third save's video, debris the upgrade must leave behind.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from reflexlab.dataset.video import VideoEncoder

FIXTURE = Path(__file__).parent / "data" / "format1"
FPS = 10
CAMERA = "observation.images.front"
SHAPE = (16, 24, 3)
EPISODES = ((5, (2,)), (4, ()), (3, ()))  # (steps, dropped steps) of episodes 0, 1 and the crashed third save


def image(episode: int, t: int) -> np.ndarray:
    """The README's frame: a flat colour per (episode, step) plus a 0..50 horizontal ramp."""
    colour = np.array([(40 * episode + 37 * t) % 200, (90 + 23 * t) % 200, (150 + 29 * episode) % 200])
    ramp = np.linspace(0, 50, SHAPE[1])[None, :, None]
    return (colour[None, None, :] + ramp + np.zeros(SHAPE)).astype(np.uint8)


def copy_format1(root: Path) -> Path:
    """A complete copy of the format-1 dataset at ``root`` (tests change the copy, never the committed files)."""
    shutil.copytree(FIXTURE, root)
    for episode, (steps, dropped) in enumerate(EPISODES):
        path = root / f"videos/{CAMERA}/chunk-000/file-{episode:03d}.mp4"
        encoder = VideoEncoder(path, SHAPE, FPS)
        held = image(episode, 0)
        for t in range(steps):
            held = held if t in dropped else image(episode, t)
            encoder.write(held)
        encoder.finish()
    return root
