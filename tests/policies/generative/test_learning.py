"""Real (tiny) training runs on the toy bimodal task: teachers cover both modes, students do it in one step.

One thread, a 2-core machine shared with other jobs: teachers 400 steps (~7–9 s each), the consistency
student 250 steps at batch 128 (~11 s), each MeanFlow student 300 steps (~12–14 s; the original
variant's run is marked slow, its loss has exact-solution checks in `test_samplers`). See `toy`
for the task and each test's docstring for what we observed. Runs share module-scoped teachers.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from policies.generative.policy import GenerativePolicy
from policies.generative.train import TrainConfig, distill_student, train_teacher
from tests.policies.generative.toy import TINY, ModeStats, mode_stats, toy_episodes, toy_spec

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # torch's jvp
TEACHER = TrainConfig(
    max_steps=400,
    lr=3e-3,
    warmup_steps=50,
    unexecuted_step_weight=1.0,
    checkpoint_every=10**9,
    log_every=50,
    progress=False,
    policy=TINY,
)


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def _train(tmp: Path, method: str, teacher: Path | None = None, **overrides: object) -> tuple[GenerativePolicy, float]:
    cfg = TrainConfig(**{**TEACHER.__dict__, "method": method, **overrides})
    start = time.monotonic()
    if teacher is None:
        ckpt = train_teacher(toy_episodes(), cfg, tmp / method, toy_spec().to_json())
    else:
        ckpt = distill_student(teacher, toy_episodes(), cfg, tmp / method, toy_spec().to_json())
    elapsed = time.monotonic() - start
    return GenerativePolicy.load(ckpt)[0], elapsed


@pytest.fixture(scope="module")
def diffusion_teacher(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenerativePolicy]:
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("diffusion")
    policy, elapsed = _train(tmp, "diffusion")
    print(f"diffusion teacher: 400 steps in {elapsed:.1f} s")
    return tmp / "diffusion" / "model_400.pt", policy


@pytest.fixture(scope="module")
def flow_teacher(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenerativePolicy]:
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("flow")
    policy, elapsed = _train(tmp, "flow")
    print(f"flow teacher: 400 steps in {elapsed:.1f} s")
    return tmp / "flow" / "model_400.pt", policy


def _assert_both_modes(stats: ModeStats, max_error: float, min_near: float) -> None:
    assert 0.3 <= stats.plus_fraction <= 0.7, stats
    assert stats.mean_error <= max_error, stats
    assert stats.near_fraction >= min_near, stats


def test_diffusion_teacher_ddim10_covers_both_modes_ddim1_does_not(diffusion_teacher) -> None:
    """DDIM 10 lands on both modes. DDIM 1 does not land on either: its one clean estimate
    (x − √(1−ᾱ)ε̂)/√ᾱ at k = 99 divides the ε error by √ᾱ ≈ 5·10⁻⁴, so it is the clipped sign of
    that error, scattered over the box edges, rather than the conditional mean the theory predicts."""
    _, policy = diffusion_teacher
    ddim10, ddim1 = mode_stats(policy, 10), mode_stats(policy, 1)
    print(f"diffusion DDIM 10: {ddim10}\ndiffusion DDIM 1: {ddim1}")
    _assert_both_modes(ddim10, max_error=0.2, min_near=0.75)
    assert ddim1.near_fraction <= 0.5 and ddim1.mean_error >= 0.5, ddim1


def test_flow_teacher_euler10_covers_both_modes_euler1_averages_them(flow_teacher) -> None:
    """Ten Euler steps land on both modes; one step lands between them (x₁ − v(x₁, 1) is E[A | c], the
    mean of the modes: the field is curved, the reason for one-step students)."""
    _, policy = flow_teacher
    euler10, euler1 = mode_stats(policy, 10), mode_stats(policy, 1)
    print(f"flow Euler 10: {euler10}\nflow Euler 1: {euler1}")
    _assert_both_modes(euler10, max_error=0.2, min_near=0.75)
    assert euler1.mean_offset <= 0.35 and euler1.near_fraction <= 0.1, euler1


def test_consistency_student_one_step_covers_both_modes(diffusion_teacher, tmp_path: Path) -> None:
    teacher_ckpt, _ = diffusion_teacher
    student, elapsed = _train(tmp_path, "consistency", teacher_ckpt, max_steps=250, batch_size=128)
    stats = mode_stats(student, 1)
    print(f"consistency student (250 steps, {elapsed:.1f} s), 1 step: {stats}")
    assert student.method == "consistency"
    _assert_both_modes(stats, max_error=0.3, min_near=0.6)


@pytest.mark.parametrize("variant", ["imf", pytest.param("mf", marks=pytest.mark.slow)])
def test_meanflow_student_one_step_covers_both_modes(flow_teacher, tmp_path: Path, variant: str) -> None:
    teacher_ckpt, _ = flow_teacher
    options = dataclasses.replace(TINY, meanflow_variant=variant)
    student, elapsed = _train(tmp_path, "meanflow", teacher_ckpt, max_steps=300, policy=options)
    stats = mode_stats(student, 1)
    print(f"meanflow ({variant}) student (300 steps, {elapsed:.1f} s), 1 step: {stats}")
    assert student.method == "meanflow" and student.cfg.options.meanflow_variant == variant
    # Both students learn the teacher's Euler-10 pairs, so they inherit its error (0.12 here): the
    # same bar as the consistency student's. Learnt from data instead, this run measured 0.12 / 0.86.
    _assert_both_modes(stats, max_error=0.3, min_near=0.6)
