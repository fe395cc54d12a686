"""Camera observations in generative policies: the image encoder, the policy's condition, windows, teacher
samples, students and the ONNX graph, at tiny sizes (16×16 frames, one U-Net level) on one thread."""

from __future__ import annotations

import dataclasses
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from policies.generative.data import ChunkWindows
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.policy import (
    GenerativePolicy,
    OneStepGenerator,
    PolicyConfig,
    PolicyOptions,
    make_student,
)
from policies.generative.teacher_samples import TeacherSamples
from policies.generative.vision import ImageEncoder, crop_size

SIZE = (16, 16)
CAMS = ("side", "top")
OPTS = PolicyOptions(
    down_dims=(16,),
    time_embed_dim=16,
    encoder_hidden=32,
    encoder_dim=16,
    image_keys=CAMS,
    image_size=SIZE,
    image_channels=(8, 16),
    image_keypoints=4,
    image_feature_dim=8,
)
TO, H, N_OBS, N_ACT = 2, 4, 3, 2
# What a state-only policy's options were before cameras existed: its checkpoints must keep exactly these.
STATE_ONLY_OPTION_KEYS = {
    "down_dims",
    "kernel_size",
    "n_groups",
    "time_embed_dim",
    "encoder_hidden",
    "encoder_dim",
    "diffusion_train_steps",
    "flow_beta",
    "meanflow_variant",
    "meanflow_r_equals_t",
    "meanflow_logit_mean",
    "meanflow_logit_std",
    "meanflow_weight_power",
    "meanflow_jump_fraction",
    "meanflow_endpoint_weight",
    "dispersive_weight",
    "dispersive_tau",
}


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def _frames(*lead: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*lead, 3, *SIZE), dtype=torch.uint8, generator=g)


def _policy(method: str, options: PolicyOptions = OPTS, seed: int = 0) -> GenerativePolicy:
    torch.manual_seed(seed)
    obs_norm = MinMaxNormalizer.fit(torch.randn(100, N_OBS))
    act_norm = MinMaxNormalizer.fit(torch.randn(100, N_ACT))
    return GenerativePolicy(PolicyConfig(method, N_OBS, N_ACT, TO, H, options), obs_norm, act_norm).eval()


def test_encoder_maps_uint8_histories_to_features_deterministically_in_eval() -> None:
    enc = ImageEncoder(SIZE, 0.75, channels=(8, 16), keypoints=4, out_dim=8).eval()
    x = _frames(5, TO)
    with torch.no_grad():
        a, b = enc(x), enc(x)
    assert a.shape == (5, TO, 8) and torch.equal(a, b)
    assert crop_size(SIZE, 0.75) == (12, 12) == enc.crop
    # Eval uses the centre crop: pixels outside it cannot matter, pixels inside it do.
    outside = x.clone()
    outside[..., :2, :] = 255 - outside[..., :2, :]
    inside = x.clone()
    inside[..., 8, 8] = 255 - inside[..., 8, 8]
    with torch.no_grad():
        assert torch.equal(enc(outside), a)
        assert not torch.allclose(enc(inside), a)
    # Frames are encoded independently by one network: frame order in the history is kept.
    with torch.no_grad():
        assert torch.allclose(enc(x.flip(1)), a.flip(1), atol=1e-6)
    assert next(enc.parameters()).dtype == torch.float32 and not any(
        isinstance(m, torch.nn.BatchNorm2d) for m in enc.modules()
    )


def test_random_crop_only_in_training_mode() -> None:
    enc = ImageEncoder(SIZE, 0.75, channels=(8, 16), keypoints=4, out_dim=8)
    x = _frames(8, TO)
    enc.train()
    torch.manual_seed(0)
    first = enc(x)
    second = enc(x)
    assert not torch.allclose(first, second), "training draws a new crop per call"
    first.sum().backward()
    assert all(p.grad is not None for p in enc.parameters())
    # A crop fraction of 1 leaves nothing to randomise: training and eval then agree exactly.
    full = ImageEncoder(SIZE, 1.0, channels=(8, 16), keypoints=4, out_dim=8)
    with torch.no_grad():
        assert torch.allclose(full.train()(x), full.eval()(x), atol=1e-6)


def test_state_only_policy_is_unchanged() -> None:
    policy = _policy("diffusion", PolicyOptions(down_dims=(16,), time_embed_dim=16, encoder_hidden=32, encoder_dim=16))
    assert policy.image_encoders is None
    assert not [k for k in policy.state_dict() if "image" in k]
    assert policy.encoder.net[1].in_features == TO * N_OBS, "the observation MLP reads the state history only"
    assert set(policy.cfg.to_dict()["options"]) == STATE_ONLY_OPTION_KEYS
    with pytest.raises(ValueError, match="state only"):
        policy.condition(torch.zeros(1, TO, N_OBS), _frames(1, TO, 1))


def test_state_only_checkpoint_without_image_fields_loads(tmp_path: Path) -> None:
    policy = _policy("flow", PolicyOptions(down_dims=(16,), time_embed_dim=16, encoder_hidden=32, encoder_dim=16))
    path = policy.save(tmp_path / "model.pt")
    state = torch.load(path, weights_only=True)
    assert set(state["config"]["options"]) == STATE_ONLY_OPTION_KEYS
    loaded, _ = GenerativePolicy.load(path)
    obs, noise = torch.randn(3, TO, N_OBS), torch.randn(3, H, N_ACT)
    with torch.no_grad():
        assert torch.equal(loaded.sample(obs, noise, 2), policy.sample(obs, noise, 2))


def test_camera_policy_conditions_on_images_and_round_trips(tmp_path: Path) -> None:
    policy = _policy("diffusion")
    obs, noise = torch.randn(3, TO, N_OBS), torch.randn(3, H, N_ACT)
    images = _frames(3, TO, len(CAMS))
    with torch.no_grad():
        a = policy.sample(obs, noise, 2, images=images)
        other = images.clone()
        other[:, :, 1] = _frames(3, TO, seed=5)
        b = policy.sample(obs, noise, 2, images=other)
    assert not torch.allclose(a, b), "the chunk depends on the second camera"
    with pytest.raises(ValueError, match=r"\(K, 3, H, W\) = \(2, 3, 16, 16\)"):
        policy.condition(obs)
    with pytest.raises(ValueError, match="reads cameras"):
        policy.condition(obs, images[:, :, :1])
    loss, _logs = policy.train().loss(obs, torch.randn(3, H, N_ACT), images=images)
    loss.backward()
    assert all(p.grad is not None for p in policy.image_encoders.parameters())
    path = policy.eval().save(tmp_path / "model.pt")
    loaded, _ = GenerativePolicy.load(path)
    assert loaded.image_keys == CAMS and loaded.cfg == policy.cfg
    with torch.no_grad():
        assert torch.equal(loaded.sample(obs, noise, 2, images=images), a)


def test_students_copy_the_image_encoders() -> None:
    flow = _policy("flow")
    obs, noise, images = torch.randn(4, TO, N_OBS), torch.randn(4, H, N_ACT), _frames(4, TO, len(CAMS))
    with torch.no_grad():
        euler1 = flow.sample(obs, noise, 1, images=images)
        for method in ("consistency", "meanflow"):
            student = make_student(flow, method).eval()
            assert student.image_keys == CAMS
            for s, t in zip(student.image_encoders.parameters(), flow.image_encoders.parameters(), strict=True):
                assert torch.equal(s, t)
            assert torch.allclose(student.sample(obs, noise, 1, images=images), euler1, atol=1e-6), method


def _image_episodes(lengths: tuple[int, ...]) -> list[dict[str, torch.Tensor]]:
    eps = []
    for i, n in enumerate(lengths):
        frames = torch.zeros(n, len(CAMS), 3, *SIZE, dtype=torch.uint8)
        frames[:, :, 0, 0, 0] = torch.arange(n, dtype=torch.uint8)[:, None] + 10 * i  # pixel = step id
        eps.append({"obs": torch.randn(n, N_OBS), "action": torch.randn(n, N_ACT), "images": frames})
    return eps


def test_windows_pad_images_as_observations() -> None:
    windows = ChunkWindows(_image_episodes((3, 2)), TO, H)
    assert windows.image_shape == (len(CAMS), 3, *SIZE)
    _obs, _action, images = windows.gather(torch.arange(len(windows)))
    assert images.shape == (5, TO, len(CAMS), 3, *SIZE) and images.dtype == torch.uint8
    ids = images[:, :, 0, 0, 0, 0].tolist()
    assert ids == [[0, 0], [0, 1], [1, 2], [10, 10], [10, 11]], "first frame repeated before the start"
    assert windows[1]["images"].shape == (TO, len(CAMS), 3, *SIZE)
    with pytest.raises(ValueError, match="every episode"):
        ChunkWindows([*_image_episodes((3,)), {"obs": torch.zeros(2, N_OBS), "action": torch.zeros(2, N_ACT)}], TO, H)
    bad = _image_episodes((3,))
    bad[0]["images"] = bad[0]["images"].float()
    with pytest.raises(ValueError, match="uint8"):
        ChunkWindows(bad, TO, H)


def test_teacher_samples_index_windows_instead_of_copying_frames() -> None:
    windows = ChunkWindows(_image_episodes((3, 2)), TO, H)
    teacher = _policy("flow")
    samples = TeacherSamples.draw(teacher, windows, per_window=3, steps=2, progress=False)
    assert len(samples) == 15 and samples.window is not None and samples.window.shape == (15,)
    idx = torch.tensor([0, 7, 14])
    obs, noise, chunk, images = samples.gather(idx)
    assert torch.equal(images, windows.gather_images(samples.window[idx]))
    assert torch.equal(obs, windows.gather(samples.window[idx])[0])
    with torch.no_grad():
        again = teacher.sample(obs, noise, 2, images=images)
    assert torch.allclose(again, chunk, atol=1e-5), "each chunk is the teacher's sample from its own window's frames"
    state_only = ChunkWindows([{k: v for k, v in e.items() if k != "images"} for e in _image_episodes((3,))], TO, H)
    with pytest.raises(ValueError, match="no images"):
        TeacherSamples.draw(teacher, state_only, 1, 2, progress=False)


def test_one_step_generator_exports_uint8_image_inputs() -> None:
    policy = _policy("consistency")
    gen = OneStepGenerator(policy).eval()
    names = ["obs", "noise", "image.side", "image.top"]
    dummy = (torch.zeros(1, TO, N_OBS), torch.zeros(1, H, N_ACT), *(_frames(1, TO) for _ in CAMS))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            gen,
            dummy,
            buf,
            input_names=names,
            output_names=["action_chunk"],
            dynamic_axes={n: {0: "batch"} for n in [*names, "action_chunk"]},
            opset_version=18,
            dynamo=False,
        )
    model = onnx.load_from_string(buf.getvalue())
    assert [i.type.tensor_type.elem_type for i in model.graph.input[2:]] == [onnx.TensorProto.UINT8] * 2
    assert not {n.op_type for n in model.graph.node} & {"BatchNormalization", "RandomUniform", "RandomUniformLike"}
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    for batch in (1, 4):
        obs, noise = torch.randn(batch, TO, N_OBS), torch.randn(batch, H, N_ACT)
        frames = [_frames(batch, TO, seed=k) for k in range(len(CAMS))]
        with torch.no_grad():
            want = gen(obs, noise, *frames).numpy()
        feeds = dict(zip(names, [obs.numpy(), noise.numpy(), *(f.numpy() for f in frames)], strict=True))
        got = session.run(["action_chunk"], feeds)[0]
        assert np.abs(got - want).max() < 1e-4


def test_image_keys_must_be_usable_names() -> None:
    for keys in (("a.b",), ("",), ("side", "side")):
        with pytest.raises(ValueError, match="camera names"):
            dataclasses.replace(OPTS, image_keys=keys)
