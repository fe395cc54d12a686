"""`reflexlab play`: score a checkpoint on seeded episodes, PPO and chunk policies alike, as the benches do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import tyro

from policies.evaluate import EvalOptions
from reflexlab.cli.common import UserError

DEFAULT_EVALUATION = EvalOptions()  # frozen: one shared default is safe


def play(
    run_dir: Path = Path("runs/quadruped-walk"),
    evaluation: Annotated[EvalOptions, tyro.conf.OmitArgPrefixes] = DEFAULT_EVALUATION,
    sampling_steps: int | None = None,
    execution_horizon: int | None = None,
    noise_seed: int = 0,
    chunk_execution: Literal["receding", "ensemble"] = "receding",
    ensemble_decay: float = 0.01,
) -> None:
    """Evaluate a checkpoint deterministically on seeded episodes; print and write a JSON report.

    A generative (action-chunk) policy is scored on its demonstration task: mean max coverage and
    success rate with their standard errors over episodes seeded SEED, SEED+1, … (`bench distill`
    uses 10000…, with NOISE_SEED = the training seed).

    Args:
        run_dir: a run folder (its latest checkpoint) or a checkpoint file.
        evaluation: episodes, length, seed, video, report, task check (and the locomotion tasks' command options).
        sampling_steps: a generative policy's sampling steps (default: 1 for students, 10 for teachers).
        execution_horizon: actions a generative policy executes per chunk (Ta; default its Spec's).
        noise_seed: seed of a generative policy's noise draws.
        chunk_execution: receding (each chunk's Ta actions, then re-plan) or ensemble (the policy node's
            temporal ensembling: a chunk every step, the last Ta chunks averaged).
        ensemble_decay: m in the ensemble's weights exp(-m * chunk age in steps).
    """
    from policies.imitation import check_generative_task, evaluate_generative_run, is_generative, load_generative
    from reflexlab.chunking import ChunkConfig

    e = evaluation
    episodes, episode_s, video, report, seed, task = e.episodes, e.episode_s, e.video, e.report, e.seed, e.task

    if is_generative(run_dir):
        if task is not None:
            check_generative_task(run_dir, task)
        spec = load_generative(run_dir)[1]
        summary = evaluate_generative_run(
            run_dir,
            episodes,
            seed,
            noise_seed,
            sampling_steps,
            execution_horizon,
            episode_steps=None if episode_s is None else round(episode_s * spec.control_rate_hz),
            video=video,
            chunking=ChunkConfig(chunk_execution, ensemble_decay),
        )
        folder = Path(run_dir) if Path(run_dir).is_dir() else Path(run_dir).parent
        report = report or folder / f"eval_{Path(summary['checkpoint']).stem}.json"
        report.write_text(json.dumps(summary, indent=2))
        print(json.dumps(summary))
        return
    if sampling_steps is not None or execution_horizon is not None:
        raise UserError(
            f"{run_dir} holds a PPO policy: --sampling-steps and --execution-horizon are for chunk policies"
        )
    from policies.evaluate import evaluate_run

    result = evaluate_run(run_dir, evaluation)
    print(json.dumps(result["summary"]))
