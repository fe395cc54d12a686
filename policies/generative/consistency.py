"""Consistency distillation, RL-100 style: a one-step student matches a K-step teacher on the same noise.

L = ‖student(ε, O) − sg(teacher_K(ε, O))‖², with the teacher deterministic (DDIM η = 0 for
diffusion, Euler for flow) so that each ε has one target: the student learns the teacher's
noise → chunk map, and with it the teacher's modes, instead of regressing to their mean (which is
what plain one-step regression onto data actions would learn). The student is a copy of the
teacher's network initialised from its weights (`policy.make_student`), with its own optimiser
and EMA (≈ 0.95). Regression happens in normalised units, on the student's unclipped output:
clipping would cut the gradient of samples that overshoot the box. The (ε, teacher_K(ε, O)) pairs
come from `TeacherSamples`, drawn once before training.
"""

from __future__ import annotations

import torch

from policies.generative.policy import GenerativePolicy

# RL-100 distils DDIM 10. On panda-push-t the teacher at 10 steps scores 0.869 / 0.47 (coverage /
# success) against 0.919 / 0.69 at 100, and a student can only inherit what its targets hold: one
# distilled from DDIM-100 samples scored 0.839 / 0.32 where the same run on DDIM-10 samples scored
# 0.817 / 0.24 (12,000 steps, 50 episodes). Drawing them once costs ~16 CPU-minutes for 72,704 pairs.
TEACHER_STEPS = 100


def distillation_loss(
    student: GenerativePolicy,
    obs: torch.Tensor,
    noise: torch.Tensor,
    teacher_chunk: torch.Tensor,
    images: torch.Tensor | None = None,
    step_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean squared error between the student's one step from ``noise`` and the teacher's raw chunk from it.

    ``images``: the camera frames (B, To, K, 3, H, W) of a student with cameras (see `GenerativePolicy.condition`).
    ``step_weights`` (H,), mean 1: how much each chunk step counts (`chunk_step_weights`).
    """
    target = student.action_norm.normalize(teacher_chunk)
    err = (student.one_step_unclipped(noise, student.condition(obs, images)) - target).pow(2)
    loss = err.mean() if step_weights is None else (err * step_weights.view(1, -1, 1)).mean()
    return loss, {"consistency_loss": loss.item(), "loss": loss.item()}


def chunk_step_weights(
    action_chunk: int, observation_horizon: int, execution_horizon: int, unexecuted: float
) -> torch.Tensor:
    """Per-step loss weights (H,), mean 1: 1 on the steps a receding-horizon controller executes
    (``observation_horizon - 1`` onwards, ``execution_horizon`` of them), ``unexecuted`` on the rest.

    Why: a one-step student underfits its teacher's map (held-out error = training error on
    panda-push-t), and its error grows along the chunk; the steps before the current one and those
    after the execution horizon never reach the robot under a receding horizon, so down-weighting
    them moves capacity to the ones that do. Keep ``unexecuted`` > 0 for temporal ensembling, which
    blends later steps of older chunks.
    """
    if not 0.0 <= unexecuted <= 1.0:
        raise ValueError(f"the weight of unexecuted chunk steps must be in [0, 1], got {unexecuted}")
    w = torch.full((action_chunk,), unexecuted)
    first = observation_horizon - 1
    w[first : first + execution_horizon] = 1.0
    return w / w.mean()
