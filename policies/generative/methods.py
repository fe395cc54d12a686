"""The generative methods by name: what each learns from, how it samples, how many steps it takes.

Everything that differs between methods is read from its `MethodInfo` here (the policy's loss and
sampler, which training entry point applies, DAgger's default, export, the CLI's choices), so adding
a method is its objective module plus one entry in `METHODS`, and no other module compares names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # the registry itself stays light: the CLI reads its names without loading torch
    import torch


class Objective(Protocol):
    """A method's training loss and deterministic sampler, over the network with its condition bound."""

    def loss(self, net: Callable[..., torch.Tensor], x0: torch.Tensor) -> torch.Tensor: ...

    def sample(self, net: Callable[..., torch.Tensor], noise: torch.Tensor, steps: int) -> torch.Tensor: ...


@dataclass(frozen=True)
class MethodInfo:
    """One generative method.

    ``objective`` builds its loss and sampler from the policy's options (`PolicyOptions`); None for a
    method whose generator is one network call trained only by consistency distillation.
    ``from_data``: `train_teacher` trains it on demonstrations. ``student``: `distill_student`
    trains it from a teacher; ``teacher``: it can be one. ``two_times``: the network also takes
    t − r (MeanFlow's average velocity over [r, t]); such a student may also regress the teacher's
    coupled (noise, chunk) pairs with its own loss (``coupled_loss``). ``student_options``: the
    option-name prefixes a student takes from the user rather than from its teacher.
    """

    name: str
    default_steps: int
    objective: Callable[[Any], Objective] | None = None
    from_data: bool = False
    student: bool = False
    teacher: bool = False
    two_times: bool = False
    coupled_loss: bool = False
    default_dagger_rounds: int = 0
    student_options: tuple[str, ...] = ()

    @property
    def one_step(self) -> bool:
        return self.default_steps == 1


def _diffusion(o: Any) -> Objective:
    from policies.generative.diffusion import Diffusion

    return Diffusion(o.diffusion_train_steps)


def _flow(o: Any) -> Objective:
    from policies.generative.flow import FlowMatching

    return FlowMatching(*o.flow_beta)


def _meanflow(o: Any) -> Objective:
    from policies.generative.meanflow import MeanFlow

    return MeanFlow(
        o.meanflow_variant,
        o.meanflow_r_equals_t,
        o.meanflow_logit_mean,
        o.meanflow_logit_std,
        o.meanflow_weight_power,
        jump_fraction=o.meanflow_jump_fraction,
        endpoint_weight=o.meanflow_endpoint_weight,
    )


# `default_dagger_rounds` (`dagger.DaggerConfig`, rounds=None):
# rounds a state-only student gets by default. panda-push-t, success over 400 episodes at Ta 2
# (teacher@100: 0.8975 on seeds 10000-10399):
# * consistency, one training seed, after 0 / 1 / 2 rounds: 0.8575 / 0.85 / 0.87. Neutral, kept at one.
# * MeanFlow: a round (its cosine schedule restarts at lr 1e-3) can wreck the student. Three training seeds,
#   before / after one round of 5,000 steps: 0.8025 / 0.8675, 0.7225 / 0.035, 0.845 / 0.5975; on seed 0 a
#   round of 10,000 steps gave 0.885 and a second one 0.7675. The training is what is unstable: seed 1's
#   round, rerun from the same checkpoint on bit-identical labels with another random stream, scored 0.84
#   (rounds are now seeded on their own, so such a rerun is bit-identical: `train.distill_student`).
#   So none unless asked for.
METHODS: dict[str, MethodInfo] = {
    m.name: m
    for m in (
        MethodInfo("diffusion", 10, _diffusion, from_data=True, teacher=True),
        MethodInfo("flow", 10, _flow, from_data=True, teacher=True),
        MethodInfo("consistency", 1, None, student=True, default_dagger_rounds=1),
        MethodInfo(
            "meanflow",
            1,
            _meanflow,
            from_data=True,
            student=True,
            two_times=True,
            coupled_loss=True,
            student_options=("meanflow_", "dispersive_"),
        ),
    )
}

Method = Literal[tuple(METHODS)]  # type: ignore[valid-type]  (the registry's names, for tyro and dataclasses)
FROM_DATA: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.from_data)
STUDENTS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.student)
TEACHERS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.teacher)
ONE_STEP_METHODS: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.one_step)
