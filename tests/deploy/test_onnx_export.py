import dataclasses
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from deploy.onnx_export import ExportError, export_generator, read_metadata, spec_of, verify_generator
from reflexlab.cli import main
from reflexlab.io import file_sha256
from sim.registry import get_task
from tests.deploy.conftest import TINY_FACTS


def test_parity_with_torch(exported) -> None:
    _, result = exported
    assert result["num_obs"] == 1000
    assert result["max_abs_error"] <= 1e-5


def test_single_self_contained_file_with_dynamic_batch(exported) -> None:
    path, _ = exported
    assert [p.name for p in path.parent.iterdir()] == ["policy.onnx"], "external data file written"
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    spec = spec_of(path)
    for batch in (1, 7, 64):
        out = sess.run(["action"], {"obs": np.zeros((batch, spec.policy_obs.size), np.float32)})[0]
        assert out.shape == (batch, spec.action.size)


def test_metadata_carries_spec_and_hash(exported, trained_run: Path) -> None:
    path, result = exported
    meta = read_metadata(path)
    get_task("quadruped-walk").spec().check_compatible(spec_of(path))
    assert meta["checkpoint_sha256"] == file_sha256(Path(result["checkpoint"]))
    assert meta["inputs"]["obs"][0] == "batch"


def test_normalisation_is_baked_in(exported) -> None:
    """The model reads physical units: scaling joint velocity by the Spec's 0.05 is inside it."""
    path, _ = exported
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    spec = spec_of(path)
    sl = spec.policy_obs.slices()["joint_vel"]
    a = np.zeros((1, spec.policy_obs.size), np.float32)
    b = a.copy()
    b[0, sl] = 20.0  # rad/s: must change the action noticeably only if scaled as the Spec says
    da = sess.run(["action"], {"obs": a})[0]
    db = sess.run(["action"], {"obs": b})[0]
    assert np.isfinite(db).all() and not np.allclose(da, db)


def test_inspect_prints_the_spec(exported, capsys) -> None:
    path, _ = exported
    main(["inspect", str(path), "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert shown["spec"]["task"] == "quadruped-walk"
    assert shown["spec"]["action"]["names"][0] == "FR_hip_joint"


def test_inspect_rejects_non_models(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx file")
    with pytest.raises(SystemExit) as e:
        main(["inspect", str(junk)])
    assert e.value.code == 2
    assert "junk.onnx" in capsys.readouterr().err


def test_generator_export_is_one_file_with_parity_dynamic_batch_and_metadata(generator) -> None:
    path, module, spec = generator
    assert [p.name for p in path.parent.iterdir()] == ["generator.onnx"], "external data file written"
    rng = np.random.default_rng(0)
    for batch in (1, 5):
        obs = rng.normal(size=(batch, 2, spec.policy_obs.size)).astype(np.float32)
        noise = rng.standard_normal((batch, 8, 12), dtype=np.float32)
        assert verify_generator(module, path, obs, noise) <= 1e-5
    meta = read_metadata(path)
    assert meta["inputs"] == {"obs": ["batch", 2, spec.policy_obs.size], "noise": ["batch", 8, 12]}
    assert meta["outputs"] == {"action_chunk": ["batch", 8, 12]}
    assert meta["teacher"] == "none (test)" and meta["checkpoint_sha256"] == "0" * 64
    spec.check_compatible(spec_of(path))


def test_generator_export_refuses_wrong_modules_and_specs(generator, tmp_path: Path) -> None:
    _, module, spec = generator

    class OneStep(torch.nn.Module):
        def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
            return noise[:, :1] + obs[:, -1:, :12]

    with pytest.raises(ExportError, match=r"output has shape \(1, 1, 12\) for noise \(1, 8, 12\)"):
        export_generator(OneStep(), spec, tmp_path / "g.onnx", {}, TINY_FACTS)
    plain = dataclasses.replace(spec, action_chunk=1, execution_horizon=1, observation_horizon=1)
    with pytest.raises(ExportError, match="export_policy"):
        export_generator(module, plain, tmp_path / "g.onnx", {}, TINY_FACTS)
    with pytest.raises(ExportError, match="reserved"):
        export_generator(module, spec, tmp_path / "g.onnx", {"reflexlab_spec": "{}"}, TINY_FACTS)
    assert not (tmp_path / "g.onnx").exists()
