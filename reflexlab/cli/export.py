"""`reflexlab export`: one self-contained ONNX file per checkpoint, checked against torch before it is kept."""

from __future__ import annotations

from pathlib import Path


def export(
    run_dir: Path = Path("runs/quadruped-walk"),
    out: Path = Path("policy.onnx"),
    num_obs: int = 1000,
    task: str | None = None,
    steps: int | None = None,
    dataset: Path | None = None,
) -> None:
    """Export a checkpoint to ONE self-contained ONNX file (Spec in metadata) and verify it against torch.

    PPO runs export obs -> action; generative runs export (obs history, noise) -> action chunk: one
    network evaluation for a one-step student, the unrolled sampler for a teacher.

    Args:
        run_dir: a run folder (its latest checkpoint) or a checkpoint file.
        out: output .onnx path.
        num_obs: recorded observations used to check onnxruntime against torch.
        task: refuse the checkpoint unless its Spec matches this task's (names the differing field).
        steps: sampling steps of a generative policy (default: 1 for students, 10 for teachers).
        dataset: check a generative policy on this dataset's windows (state and camera frames) instead of
            observations recorded by running it on its task.
    """
    from deploy.onnx_export import export_checkpoint, export_generative_checkpoint
    from policies.imitation import check_generative_task, is_generative

    if is_generative(run_dir):
        if task is not None:
            check_generative_task(run_dir, task)
        result = export_generative_checkpoint(run_dir, out, steps=steps, num_obs=min(num_obs, 256), dataset=dataset)
    else:
        result = export_checkpoint(run_dir, out, num_obs=num_obs, task=task)
    print(f"wrote {out} (checkpoint sha256 {result['checkpoint_sha256'][:12]}…)")
    print(
        f"onnxruntime vs torch on {result['num_obs']} recorded observations: "
        f"max abs error {result['max_abs_error']:.2e}"
    )
