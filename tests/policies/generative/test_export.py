"""What gets exported: one-step students and fixed-K teachers as obs + noise → raw chunk, in ONNX and on disk."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from deploy.artifact import CHUNK_OUTPUT_NAME, INPUT_NAME, NOISE_NAME
from policies.checkpoint import CheckpointError
from policies.generative.ema import EMA
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.policy import (
    GenerativePolicy,
    MultiStepSampler,
    OneStepGenerator,
    PolicyConfig,
    PolicyOptions,
    make_student,
)

OPTS = PolicyOptions(down_dims=(16, 32), time_embed_dim=16, encoder_hidden=32, encoder_dim=16)
TO, H, N_OBS, N_ACT = 2, 8, 3, 2


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def _policy(method: str, seed: int = 0) -> GenerativePolicy:
    """An untrained policy whose normalisers are fitted to data far from [-1, 1], so baking them in shows."""
    torch.manual_seed(seed)
    obs_norm = MinMaxNormalizer.fit(5 * torch.randn(200, N_OBS) + 10)
    action_norm = MinMaxNormalizer.fit(torch.rand(200, N_ACT) * torch.tensor([2.0, 40.0]) - torch.tensor([1.0, 20.0]))
    return GenerativePolicy(PolicyConfig(method, N_OBS, N_ACT, TO, H, OPTS), obs_norm, action_norm).eval()


def _export(module: nn.Module) -> ort.InferenceSession:
    """As deploy.onnx_export writes generators: legacy tracer, opset 18, batch dynamic."""
    buf = io.BytesIO()
    names = [INPUT_NAME, NOISE_NAME, CHUNK_OUTPUT_NAME]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module.eval(),
            (torch.zeros(1, TO, N_OBS), torch.zeros(1, H, N_ACT)),
            buf,
            input_names=names[:2],
            output_names=names[2:],
            dynamic_axes={n: {0: "batch"} for n in names},
            opset_version=18,
            dynamo=False,
        )
    model = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(model, full_check=True)
    assert not {n.op_type for n in model.graph.node} & {"BatchNormalization", "Attention"}
    return ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])


def _parity(module: nn.Module, session: ort.InferenceSession, batch: int) -> float:
    obs, noise = 5 * torch.randn(batch, TO, N_OBS) + 10, torch.randn(batch, H, N_ACT)
    with torch.no_grad():
        expected = module(obs, noise).numpy()
    got = session.run([CHUNK_OUTPUT_NAME], {INPUT_NAME: obs.numpy(), NOISE_NAME: noise.numpy()})[0]
    assert got.shape == (batch, H, N_ACT)
    return float(np.abs(got - expected).max())


@pytest.mark.parametrize("method", ["meanflow", "consistency"])
def test_one_step_generator_is_one_sampling_step_and_exports(method: str) -> None:
    policy = _policy(method)
    if method == "meanflow":
        nn.init.normal_(policy.denoiser.h_embed[-1].weight, std=0.1)  # so the graph depends on t − r
    gen = OneStepGenerator(policy)
    obs, noise = 5 * torch.randn(4, TO, N_OBS) + 10, torch.randn(4, H, N_ACT)
    with torch.no_grad():
        chunk = gen(obs, noise)
        assert torch.allclose(chunk, policy.sample(obs, noise, steps=1), atol=1e-5)
    assert chunk.shape == (4, H, N_ACT)
    assert chunk[..., 1].abs().max() <= 20 + 1e-4 and chunk[..., 1].abs().max() > 1.5, "raw units, clipped to data"
    session = _export(gen)
    for batch in (1, 5):
        assert _parity(gen, session, batch) < 1e-4


@pytest.mark.parametrize("method", ["diffusion", "flow"])
def test_three_step_teacher_exports_unrolled(method: str) -> None:
    sampler = MultiStepSampler(_policy(method), steps=3)
    session = _export(sampler)
    for batch in (1, 3):
        assert _parity(sampler, session, batch) < 1e-4


def test_one_step_generator_refuses_multi_step_methods() -> None:
    for method in ("diffusion", "flow"):
        with pytest.raises(ValueError, match="MultiStepSampler"):
            OneStepGenerator(_policy(method))


def test_students_start_from_their_teacher() -> None:
    """A consistency student is the teacher; a MeanFlow student of a flow teacher starts as its one Euler step."""
    flow = _policy("flow")
    obs, noise = 5 * torch.randn(4, TO, N_OBS) + 10, torch.randn(4, H, N_ACT)
    with torch.no_grad():
        euler1 = flow.sample(obs, noise, steps=1)
        for method in ("consistency", "meanflow"):
            student = make_student(flow, method).eval()
            assert student.method == method
            assert torch.allclose(student.sample(obs, noise, steps=1), euler1, atol=1e-6), method
    diffusion = _policy("diffusion", seed=1)
    mf = make_student(diffusion, "meanflow", PolicyOptions(meanflow_variant="mf", dispersive_weight=0.5))
    assert mf.cfg.options.down_dims == OPTS.down_dims, "a student keeps the teacher's network sizes"
    assert mf.cfg.options.meanflow_variant == "mf" and mf.cfg.options.dispersive_weight == 0.5
    assert torch.equal(mf.encoder.net[1].weight, diffusion.encoder.net[1].weight)
    with pytest.raises(ValueError, match="diffusion or flow teacher"):
        make_student(mf, "consistency")


def test_checkpoint_round_trip_with_ema(tmp_path: Path) -> None:
    policy = _policy("flow")
    ema = EMA(policy)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.5)
    path = policy.save(tmp_path / "model_3.pt", {"step": 3, "spec": {"task": "x"}}, ema=ema.model)
    assert [p.name for p in tmp_path.iterdir()] == ["model_3.pt"], "no temporary file left behind"
    averaged, extra = GenerativePolicy.load(path)
    raw, _ = GenerativePolicy.load(path, use_ema=False)
    assert extra == {"step": 3, "spec": {"task": "x"}}
    assert averaged.cfg == policy.cfg and not averaged.training
    params = zip(averaged.parameters(), raw.parameters(), ema.model.parameters(), policy.parameters(), strict=True)
    for a, r, e, p in params:
        assert torch.equal(a, e) and torch.equal(r, p)
    assert torch.equal(averaged.action_norm.scale, policy.action_norm.scale), "normalisers travel with the weights"


def test_load_refuses_foreign_and_truncated_files(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.pt"
    torch.save({"actor_state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="not a generative-policy checkpoint"):
        GenerativePolicy.load(foreign)
    good = _policy("diffusion").save(tmp_path / "good.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="cannot be read"):
        GenerativePolicy.load(truncated)
