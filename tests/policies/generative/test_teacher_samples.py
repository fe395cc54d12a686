"""`TeacherSamples`: the pairs students learn from are the teacher's own deterministic samples."""

from __future__ import annotations

from pathlib import Path

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


def test_samples_at_any_states_join_the_windows_samples() -> None:
    """DAgger's labels: the teacher's samples at states no window holds, added to the dataset's samples."""
    teacher, windows = _teacher()
    base = TeacherSamples.draw(teacher, windows, 2, 3, progress=False)
    states = torch.linspace(-0.5, 0.5, 5).view(5, 1, 1)
    visited = TeacherSamples.draw_at(teacher, states, per_state=3, steps=3, seed=1, progress=False)
    assert len(visited) == 15 and torch.equal(visited.obs[5:10], states)
    with torch.no_grad():
        assert torch.allclose(teacher.sample(visited.obs, visited.noise, 3), visited.chunk, atol=1e-6)
    both = base + visited
    assert len(both) == len(base) + 15
    assert torch.equal(both.chunk[len(base) :], visited.chunk) and torch.equal(both.obs[: len(base)], base.obs)
    with pytest.raises(ValueError, match="per_state"):
        TeacherSamples.draw_at(teacher, states, 0, 3, progress=False)


def test_a_broken_teacher_is_refused() -> None:
    teacher, windows = _teacher()
    with torch.no_grad():
        next(teacher.denoiser.parameters()).fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="non-finite"):
        TeacherSamples.draw(teacher, windows, 1, 2, progress=False)


def test_samples_are_kept_and_reused_per_key(tmp_path: Path) -> None:
    teacher, windows = _teacher()
    first, cached = TeacherSamples.load_or_draw(teacher, "sha-a", windows, 2, 3, tmp_path, seed=1, progress=False)
    assert not cached and len(list(tmp_path.glob("*.pt"))) == 1
    again, cached = TeacherSamples.load_or_draw(teacher, "sha-a", windows, 2, 3, tmp_path, seed=1, progress=False)
    assert cached
    for name in ("obs", "noise", "chunk"):
        assert torch.equal(getattr(again, name), getattr(first, name))
    # Anything the samples depend on gives a new draw in a file of its own.
    for change in ({"teacher_sha256": "sha-b"}, {"seed": 2}, {"steps": 4}, {"per_window": 3}):
        kw = {"teacher_sha256": "sha-a", "per_window": 2, "steps": 3, "seed": 1} | change
        _, cached = TeacherSamples.load_or_draw(teacher, windows=windows, cache_dir=tmp_path, progress=False, **kw)
        assert not cached, change
    other = ChunkWindows(toy_episodes(8, seed=1), obs_horizon=1, horizon=4)
    _, cached = TeacherSamples.load_or_draw(teacher, "sha-a", other, 2, 3, tmp_path, seed=1, progress=False)
    assert not cached, "other observations are another key"
    assert len(list(tmp_path.glob("*.pt"))) == 6


def test_an_unreadable_cache_is_named_and_drawn_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    teacher, windows = _teacher()
    first, _ = TeacherSamples.load_or_draw(teacher, "sha", windows, 2, 3, tmp_path, progress=False)
    (path,) = tmp_path.glob("*.pt")
    path.write_bytes(path.read_bytes()[:100])  # truncated, as a full disk outside our atomic rename could leave it
    again, cached = TeacherSamples.load_or_draw(teacher, "sha", windows, 2, 3, tmp_path, progress=False)
    assert not cached and torch.equal(again.chunk, first.chunk)
    assert f"teacher samples cache {path} is unusable" in capsys.readouterr().err
    _, cached = TeacherSamples.load_or_draw(teacher, "sha", windows, 2, 3, tmp_path, progress=False)
    assert cached, "the redrawn samples replace the broken file"
