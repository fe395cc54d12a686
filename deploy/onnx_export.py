"""Export a checkpoint to ONE self-contained ONNX file and verify it against torch.

The file takes observations in physical units (the Spec's per-term scales and any running
normaliser are baked in), has a dynamic batch dimension, and carries the Spec and the checkpoint
hash in ``metadata_props``: a robot needs nothing but this file and its own Spec to check that
the two agree. rsl-rl's own exporter writes ``.onnx`` + ``.onnx.data`` with batch 1, which is
why we export here.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from deploy.artifact import INPUT_NAME, OUTPUT_NAME, read_metadata, spec_of
from policies.actor import LoadedPolicy, load_policy
from policies.checkpoint import file_sha256
from reflexlab import __version__

OPSET = 18


class ExportError(RuntimeError):
    """Export failed or the exported model disagrees with torch."""


class PhysicalUnitsPolicy(nn.Module):
    """obs (physical units) → Spec scales → rsl-rl actor (normaliser + MLP + mean)."""

    def __init__(self, policy: LoadedPolicy) -> None:
        super().__init__()
        self.inner = policy.actor.as_onnx(verbose=False)
        self.register_buffer("scales", torch.tensor(policy.spec.policy_obs.scales(), dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.inner(obs * self.scales)


def record_observations(policy: LoadedPolicy, num_obs: int, seed: int = 7) -> np.ndarray:
    """Policy observations in physical units, recorded by running the policy on its own task."""
    from reflexlab.config import update_dataclass
    from sim.backends.mujoco_cpu import MujocoVecEnv
    from sim.registry import get_task

    entry = get_task(policy.info["task"])
    cfg = update_dataclass(entry.config(policy.info["profile"]), policy.info["task_cfg"])
    num_envs = 8
    env = MujocoVecEnv(entry, cfg, num_envs=num_envs, nthread=1, seed=seed)
    scales = torch.tensor(policy.spec.policy_obs.scales())
    obs = env.get_observations()
    rows = []
    for _ in range(-(-num_obs // num_envs)):
        rows.append(obs[policy.spec.policy_group] / scales)
        obs, *_ = env.step(policy.act(obs))
    return torch.cat(rows)[:num_obs].numpy().astype(np.float32)


def export_policy(policy: LoadedPolicy, out: Path, checkpoint_sha256: str) -> None:
    """Write the ONNX file (single file, dynamic batch, Spec in metadata)."""
    module = PhysicalUnitsPolicy(policy).eval()
    dummy = torch.zeros(1, policy.spec.policy_obs.size)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (dummy,),
            buf,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )
    model = onnx.load_from_string(buf.getvalue())
    meta = {
        "reflexlab_spec": policy.spec.to_json(),
        "checkpoint_sha256": checkpoint_sha256,
        "checkpoint_iteration": str(policy.iteration),
        "reflexlab_version": __version__,
        "task": policy.info["task"],
        "profile": policy.info["profile"],
    }
    for k, v in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    model.doc_string = f"reflexlab policy for {policy.spec.robot} / {policy.spec.task}"
    onnx.checker.check_model(model, full_check=True)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(out), save_as_external_data=False)


def verify(policy: LoadedPolicy, onnx_path: Path, observations: np.ndarray) -> float:
    """Max abs error between onnxruntime and torch on ``observations`` (physical units)."""
    import onnxruntime as ort

    module = PhysicalUnitsPolicy(policy).eval()
    with torch.no_grad():
        expected = module(torch.from_numpy(observations)).numpy()
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = sess.run([OUTPUT_NAME], {INPUT_NAME: observations})[0]
    return float(np.max(np.abs(got - expected)))


def export_checkpoint(
    run_or_ckpt: Path, out: Path, num_obs: int = 1000, tolerance: float = 1e-5, task: str | None = None
) -> dict[str, Any]:
    """Export the latest checkpoint of a run and verify parity; raise if beyond ``tolerance``.

    With ``task``, a checkpoint whose Spec differs from that task's is refused before exporting.
    """
    from sim.registry import get_task

    policy = load_policy(run_or_ckpt, expect_spec=get_task(task).spec() if task else None)
    sha = file_sha256(policy.path)
    export_policy(policy, out, sha)
    observations = record_observations(policy, num_obs)
    err = verify(policy, out, observations)
    if not err <= tolerance:
        raise ExportError(f"onnxruntime differs from torch by {err:.3g} (> {tolerance:g}) on recorded observations")
    return {
        "onnx": str(out),
        "checkpoint": str(policy.path),
        "checkpoint_sha256": sha,
        "max_abs_error": err,
        "num_obs": len(observations),
    }


__all__ = ["ExportError", "export_checkpoint", "read_metadata", "spec_of", "verify"]
