"""`reflexlab export`: one self-contained ONNX file per checkpoint, checked against torch before it is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any


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


def export_checkpoint(
    run_or_ckpt: Path, out: Path, num_obs: int = 1000, tolerance: float = 1e-5, task: str | None = None
) -> dict[str, Any]:
    """Export the latest checkpoint of a PPO run, checked on ``num_obs`` observations recorded by running it
    on its task; raise beyond ``tolerance``. With ``task``, a checkpoint whose Spec differs from that
    task's is refused before exporting.

    The wiring lives here because it spans layers: learning records the inputs (it runs the simulator),
    deployment exports and verifies what it is given.
    """
    from deploy.onnx_export import export_verified_policy
    from policies.actor import load_policy
    from policies.rollouts import record_observations
    from sim.registry import get_task

    policy = load_policy(run_or_ckpt, expect_spec=get_task(task).spec() if task else None)
    return export_verified_policy(policy, out, record_observations(policy, num_obs), tolerance)


def export_generative_checkpoint(
    run_or_ckpt: Path,
    out: Path,
    steps: int | None = None,
    num_obs: int = 256,
    tolerance: float = 1e-4,
    sampler_tolerance: float = 2e-3,
    dataset: Path | None = None,
) -> dict[str, Any]:
    """Export a generative policy (`deploy.onnx_export.export_verified_generator` says how) and verify it on
    observation histories recorded by running it on its task, or with ``dataset`` on that dataset's
    windows (observations and, for a policy with cameras, its frames), for a task that cannot be simulated here.
    """
    from deploy.onnx_export import export_verified_generator
    from policies.generative.methods import METHODS
    from policies.generative.sampler import TorchSampler
    from policies.imitation import load_generative, observation_windows
    from policies.rollouts import record_histories

    policy, spec, extra, path = load_generative(run_or_ckpt)
    if dataset is not None:
        obs, images = observation_windows(Path(dataset), spec, num_obs)
    else:
        sampling_steps = steps or METHODS[policy.method].default_steps
        obs, images = record_histories(TorchSampler(policy, sampling_steps), spec, num_obs)
    return export_verified_generator(
        policy, spec, extra, path, out, obs, images, steps, tolerance=tolerance, sampler_tolerance=sampler_tolerance
    )
