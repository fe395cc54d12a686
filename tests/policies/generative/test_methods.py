"""The method registry: every registered method trains, samples and (as a student) distils through its entry alone."""

from __future__ import annotations

import pytest
import torch

from policies.generative.methods import FROM_DATA, METHODS, STUDENTS, TEACHERS
from policies.generative.policy import GenerativePolicy, PolicyConfig, PolicyOptions, make_student

OBS, ACT, TO, H = 6, 2, 2, 16


def _policy(method: str) -> GenerativePolicy:
    torch.manual_seed(0)
    return GenerativePolicy(PolicyConfig(method, OBS, ACT, TO, H, PolicyOptions(down_dims=(32, 64))))


@pytest.mark.parametrize("method", FROM_DATA)
def test_methods_trained_from_data_have_a_finite_loss_and_sample_in_their_default_steps(method: str) -> None:
    policy = _policy(method)
    obs, actions = torch.randn(4, TO, OBS), torch.rand(4, H, ACT) * 2 - 1
    loss, logs = policy.loss(obs, actions)
    assert torch.isfinite(loss) and f"{method}_loss" in logs
    chunk = policy.sample(obs, torch.randn(4, H, ACT))
    assert chunk.shape == (4, H, ACT) and torch.isfinite(chunk).all()


@pytest.mark.parametrize("teacher", TEACHERS)
@pytest.mark.parametrize("student", STUDENTS)
def test_every_student_starts_from_every_teacher_and_samples_in_one_step(teacher: str, student: str) -> None:
    s = make_student(_policy(teacher), student)
    assert s.method == student and METHODS[student].one_step
    assert s.sample(torch.randn(3, TO, OBS), torch.randn(3, H, ACT)).shape == (3, H, ACT)


def test_registry_flags_agree_with_what_the_policy_refuses() -> None:
    for name, info in METHODS.items():
        policy = _policy(name)
        if info.objective is None:  # one network call: trained only by consistency distillation
            with pytest.raises(ValueError, match="learns from a teacher"):
                policy.loss(torch.randn(2, TO, OBS), torch.zeros(2, H, ACT))
            with pytest.raises(ValueError, match="one step"):
                policy.sample(torch.randn(2, TO, OBS), torch.randn(2, H, ACT), steps=2)
        if not info.coupled_loss and info.objective is not None:
            with pytest.raises(ValueError, match="coupled noise"):
                policy.loss(torch.randn(2, TO, OBS), torch.zeros(2, H, ACT), noise=torch.randn(2, H, ACT))
    with pytest.raises(ValueError, match="students are"):
        make_student(_policy("diffusion"), "flow")
    with pytest.raises(ValueError, match="needs a diffusion or flow teacher"):
        make_student(_policy("meanflow"), "consistency")
