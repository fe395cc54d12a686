"""`reflexlab distill`: a one-step student (consistency or MeanFlow) of a `bc` teacher, with DAgger rounds.

Defaults shared with the library come from its dataclasses (`TrainConfig`, `PolicyOptions`,
`DaggerConfig`), so each lives in one place. Three stay here, set for students on purpose: ``lr``
1e-3 (the teachers' default is lower; `policies.imitation.distill_run` says why), the MeanFlow
endpoint weight 1 (a MeanFlow policy trained from data has no teacher sample to regress onto, so
the library's default is 0) and ``dagger_rounds`` None (the per-method default; the library's 0
means no rounds unless asked for).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from policies.generative.dagger import DaggerConfig
from policies.generative.methods import STUDENTS
from policies.generative.policy import PolicyOptions
from policies.generative.train import TrainConfig
from reflexlab.cli.common import require


def distill(
    teacher: Path = Path("runs/panda-push-t/diffusion"),
    method: Literal[STUDENTS] = "consistency",  # type: ignore[valid-type]
    dataset: Path = Path("runs/panda-push-t/demos"),
    run_dir: Path = Path("runs/panda-push-t/consistency"),
    steps: int = 40_000,
    time_budget_s: float | None = None,
    seed: int = 0,
    dispersive_weight: float = PolicyOptions.dispersive_weight,
    samples_per_window: int = TrainConfig.teacher_samples_per_window,
    lr: float = 1e-3,
    teacher_sampling_steps: int = TrainConfig.teacher_steps,
    unexecuted_step_weight: float = TrainConfig.unexecuted_step_weight,
    execution_horizon: int | None = 2,
    dagger_rounds: int | None = None,
    dagger_episodes: int = DaggerConfig.episodes,
    dagger_steps: int = DaggerConfig.steps,
    dagger_draws_per_state: int = DaggerConfig.draws_per_state,
    init: Path | None = None,
    meanflow_jump_fraction: float = PolicyOptions.meanflow_jump_fraction,
    meanflow_endpoint_weight: float = 1.0,
) -> None:
    """Distil a teacher into a one-step generator (obs, noise) -> action chunk.

    Args:
        teacher: teacher run folder or checkpoint.
        method: consistency (regress onto the teacher's samples from the same noise) or meanflow
            (average velocity of the straight paths from each noise to the teacher's sample; one step).
        dataset: the dataset whose observations condition the student; must match the teacher's Spec.
        run_dir: checkpoints and TensorBoard logs.
        steps: optimiser steps.
        time_budget_s: stop earlier after this many seconds.
        seed: torch seed.
        dispersive_weight: DMPO's dispersive regulariser on the observation embedding (0 = off; DMPO uses 0.5).
        samples_per_window: teacher samples drawn (once, before training) per dataset window.
        lr: AdamW peak learning rate (linear warm-up, cosine decay over ``steps``).
        teacher_sampling_steps: DDIM / Euler steps of the teacher samples the student learns.
        unexecuted_step_weight: loss weight (0-1) of the chunk steps the student's Ta never executes.
        execution_horizon: actions executed per chunk (Ta) recorded in the student's Spec (the teacher's if None).
        dagger_rounds: DAgger rounds after distillation: roll the student out, label the states it visits
            with the teacher's samples, train on all samples so far. Default 1 for state-only consistency
            students, 0 for MeanFlow (a round wrecked 2 of 3 training seeds) and for students with cameras
            (DAgger would need every visited frame).
        dagger_episodes: student rollouts per round (seeds 50000…, apart from demos and evaluation).
        dagger_steps: optimiser steps after each round.
        dagger_draws_per_state: teacher samples per visited state.
        init: go on from this student run or checkpoint (same method and teacher); with --steps 0 only
            the DAgger rounds run.
        meanflow_jump_fraction: MeanFlow: fraction of each batch trained at the one-step jump (r = 0, t = 1).
        meanflow_endpoint_weight: MeanFlow: weight of the regression of the one-step jump onto the teacher's sample
            from the same noise (0 = the MeanFlow loss alone). With --init, the student's own settings hold.
    """
    from policies.imitation import distill_run

    require(teacher, "a teacher run (reflexlab bc)")
    require(dataset, "a dataset (reflexlab demos)")
    if init is not None:
        require(init, "a student run (reflexlab distill)")
    ckpt = distill_run(
        teacher,
        method,
        dataset,
        run_dir,
        steps,
        time_budget_s,
        seed,
        dispersive_weight,
        True,
        samples_per_window,
        lr=lr,
        teacher_sampling_steps=teacher_sampling_steps,
        unexecuted_step_weight=unexecuted_step_weight,
        execution_horizon=execution_horizon,
        dagger=DaggerConfig(dagger_rounds, dagger_episodes, dagger_steps, dagger_draws_per_state),
        init=init,
        meanflow_jump_fraction=meanflow_jump_fraction,
        meanflow_endpoint_weight=meanflow_endpoint_weight,
    )
    print(f"checkpoint: {ckpt}\ntensorboard --logdir {run_dir}")
