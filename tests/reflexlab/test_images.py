"""reflexlab.images: the one frame resize of training and serving, checked against torch's antialiased bilinear
(what PIL computes too), and the frame history a camera policy reads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reflexlab.chunking import ObservationHistory
from reflexlab.images import FrameResizer, resize_weights


def torch_resize(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    x = torch.from_numpy(frame).permute(2, 0, 1)[None].float()
    y = torch.nn.functional.interpolate(x, size=size, mode="bilinear", antialias=True)
    return y.round().clamp(0, 255).to(torch.uint8)[0].numpy()


@pytest.mark.parametrize(
    ("recorded", "size"),
    [
        ((120, 160), (96, 96)),
        ((480, 640), (84, 84)),
        ((40, 40), (32, 32)),
        ((121, 163), (37, 61)),
        ((32, 32), (64, 48)),
    ],
    ids=["bridge", "realsense", "square", "odd", "enlarge"],
)
def test_the_resize_is_torchs_antialiased_bilinear_within_one_grey_level(recorded, size) -> None:
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (*recorded, 3), dtype=np.uint8)
    ramp = np.broadcast_to(np.linspace(0, 255, recorded[1])[None, :, None], (*recorded, 3)).astype(np.uint8)
    resize = FrameResizer(*size)
    for frame in (noise, ramp):
        got, want = resize(frame), torch_resize(frame, size)
        assert got.shape == (3, *size) and got.dtype == np.uint8
        diff = np.abs(got.astype(int) - want.astype(int))
        assert diff.max() <= 1 and diff.mean() < 0.1, (diff.max(), diff.mean())  # float rounding at exact halves
    # The weights are torch's: resizing impulses (an identity image) gives its rows to 1e-6.
    eye = torch.eye(recorded[1])[None, None]
    rows = torch.nn.functional.interpolate(eye, size=(recorded[1], size[1]), mode="bilinear", antialias=True)[0, 0].T
    np.testing.assert_allclose(resize_weights(recorded[1], size[1]), rows.numpy(), atol=1e-5)


def test_frames_of_the_policys_size_pass_unchanged_and_bad_ones_are_named() -> None:
    frame = np.random.default_rng(1).integers(0, 256, (12, 16, 3), dtype=np.uint8)
    resize = FrameResizer(12, 16)
    np.testing.assert_array_equal(resize(frame), frame.transpose(2, 0, 1))
    for bad, words in (
        (frame.astype(np.float32), "float32"),
        (frame[..., :1], r"\(12, 16, 1\)"),
        (frame.transpose(2, 0, 1), r"\(3, 12, 16\)"),  # channels first
    ):
        with pytest.raises(ValueError, match=words + r".*expected uint8 RGB \(height, width, 3\)"):
            resize(bad)
    with pytest.raises(ValueError, match="height and width must be >= 1"):
        FrameResizer(0, 16)


def test_a_frame_history_pads_with_the_first_frame_and_keeps_the_newest_last() -> None:
    history = ObservationHistory(3, (3, 2, 2), np.uint8)
    first = history.push(np.full((3, 2, 2), 1, np.uint8))
    assert first.dtype == np.uint8 and first.shape == (3, 3, 2, 2) and (first == 1).all()
    later = history.push(np.full((3, 2, 2), 9, np.uint8))
    assert later[:, 0, 0, 0].tolist() == [1, 1, 9]
    history.reset()
    assert (history.push(np.zeros((3, 2, 2), np.uint8)) == 0).all()
