"""`TeacherSamples`: the pairs students learn from are the teacher's own deterministic samples."""

from __future__ import annotations

import pytest
import torch

from policies.generative.data import ChunkWindows
from policies.generative.policy import GenerativePolicy, PolicyConfig
from policies.generative.teacher_samples import TeacherSamples
from tests.policies.generative.toy import TINY, toy_episodes


def _teacher(method: str = "diffusion") -> tuple[GenerativePolicy, ChunkWindows]:
    torch.manual_seed(0)
    windows = ChunkWindows(toy_episodes(8), obs_horizon=1, horizon=4)
    return GenerativePolicy(PolicyConfig(method, 1, 1, 1, 4, TINY)).eval(), windows


@pytest.mark.parametrize("method", ["diffusion", "flow"])
def test_pairs_are_the_teachers_samples_from_their_noise(method: str) -> None:
    teacher, windows = _teacher(method)
    samples = TeacherSamples.draw(teacher, windows, per_window=3, steps=4, batch_size=5, progress=False)
    assert len(samples) == 3 * len(windows)
    obs, _ = windows.gather(torch.arange(len(windows)))
    for k in range(3):  # each window appears once per draw, with its own noise
        assert torch.equal(samples.obs[k * len(windows) : (k + 1) * len(windows)], obs)
    idx = torch.tensor([0, 7, len(samples) - 1])
    o, n, c = samples.gather(idx)
    with torch.no_grad():
        assert torch.allclose(teacher.sample(o, n, 4), c, atol=1e-6)
    assert samples.noise.std().item() == pytest.approx(1.0, abs=0.3)


def test_draws_are_seeded_and_refuse_nonsense() -> None:
    teacher, windows = _teacher()
    a = TeacherSamples.draw(teacher, windows, 2, 2, seed=5, progress=False)
    b = TeacherSamples.draw(teacher, windows, 2, 2, seed=5, progress=False)
    assert torch.equal(a.noise, b.noise) and torch.equal(a.chunk, b.chunk)
    with pytest.raises(ValueError, match="per_window"):
        TeacherSamples.draw(teacher, windows, 0, 2, progress=False)


def test_a_broken_teacher_is_refused() -> None:
    teacher, windows = _teacher()
    with torch.no_grad():
        next(teacher.denoiser.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite"):
        TeacherSamples.draw(teacher, windows, 1, 2, progress=False)
