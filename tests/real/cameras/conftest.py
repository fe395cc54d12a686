"""Synthetic RealSense recordings, written once per test session by librealsense's own recorder."""

from __future__ import annotations

from pathlib import Path

import pytest

from real.cameras.realsense import RealSenseConfig
from real.cameras.synthetic import SyntheticScene, write_recording

SCENE = SyntheticScene(frames=20)
# Frames 5, 9 and 10 never sent (frame-number gaps); frame 14's timestamp 50 ms in the past.
FAULTY = SyntheticScene(frames=20, drop=(5, 9, 10), backwards_at=14)
# Written at the frame rate, for real-time playback.
PACED = SyntheticScene(frames=24)


@pytest.fixture(scope="session")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_recording(tmp_path_factory.mktemp("rs") / "clean.db3", SCENE)


@pytest.fixture(scope="session")
def faulty_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_recording(tmp_path_factory.mktemp("rs") / "faulty.db3", FAULTY)


@pytest.fixture(scope="session")
def paced_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_recording(tmp_path_factory.mktemp("rs") / "paced.db3", PACED, paced=True)


def playback(path: Path, scene: SyntheticScene, real_time: bool = False, **kwargs: object) -> RealSenseConfig:
    """Every frame of the recording (ring holds them all), read as fast as the camera thread takes them."""
    return RealSenseConfig(
        playback_file=path,
        width=scene.width,
        height=scene.height,
        fps=scene.fps,
        playback_real_time=real_time,
        **{"ring_size": 64, **kwargs},
    )
