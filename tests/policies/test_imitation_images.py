"""A camera dataset → image teacher → one-step students → ONNX with image inputs → onnxruntime, with real (tiny)
training runs on a dataset written by the real writer (3 episodes, 40×40 MP4 frames resized to 32×32), and the
refusals on the way: a dataset without the camera, wrong images at run time; `StepActor` serving it from raw
camera frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.runner import OnnxGenerator, PolicyInputError, load_model
from deploy.step_actor import StepActor
from policies.imitation import distill_run, load_episodes, load_generative, train_bc_run
from reflexlab.cli.export import export_generative_checkpoint
from reflexlab.dataset import DatasetWriter
from reflexlab.spec import ImageInput, Spec
from sim.registry import get_task

CAMERA = "side"
RECORDED, SIZE = (40, 40), (32, 32)
TINY = {"down_dims": (16, 32), "batch_size": 16}


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def write_camera_episodes(root: Path, cameras: tuple[str, ...], episodes: int = 3, length: int = 10) -> Path:
    """Episodes of the panda-push-t Spec with random-walk states and a camera whose colour follows the state."""
    spec = get_task("panda-push-t").spec()
    videos = {f"observation.images.{c}": (*RECORDED, 3) for c in cameras}
    rng = np.random.default_rng(0)
    features = {"observation.state": (6,), "action": (2,)}
    with DatasetWriter(root, spec.control_rate_hz, spec.robot, features, spec, videos=videos) as w:
        for _ in range(episodes):
            state = rng.uniform(-0.2, 0.2, 6).astype(np.float32)
            for k in range(length):
                state = (state + rng.normal(0, 0.01, 6)).astype(np.float32)
                frame = np.zeros((*RECORDED, 3), np.uint8)
                frame[..., 0] = np.uint8(128 + 500 * state[0])
                frame[10:20, 10:20, 1] = 255
                images = {key: frame for key in videos}
                w.add_frame(
                    {"observation.state": state, "action": state[:2].copy(), **images}, truncated=k == length - 1
                )
            w.save_episode("push the T")
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("imitation_images")
    demos = write_camera_episodes(root / "demos", (CAMERA,))
    teacher = root / "diffusion"
    train_bc_run("diffusion", demos, teacher, 4, None, 0, progress=False, image_keys=(CAMERA,), image_size=SIZE, **TINY)
    out = {"demos": demos, "diffusion": teacher}
    for method in ("consistency", "meanflow"):
        out[method] = root / method
        distill_run(teacher, method, demos, out[method], 3, None, 0, progress=False, samples_per_window=2, batch_size=8)
    return out


def test_episodes_carry_resized_camera_frames(runs: dict[str, Path]) -> None:
    episodes, _, _ = load_episodes(runs["demos"], (CAMERA,), SIZE)
    assert len(episodes) == 3
    images = episodes[0]["images"]
    assert images.dtype == np.uint8 and images.shape == (10, 1, 3, *SIZE)
    assert images[0, 0, 1, 10, 10] > 200 and images[0, 0, 1, 28, 28] < 50, "the green square, scaled by 32/40"
    red = images[:, 0, 0].mean(axis=(1, 2)).astype(float)
    state = episodes[0]["obs"][:, 0]
    assert np.corrcoef(red, state)[0, 1] > 0.9, "frame t belongs to step t"


def test_runs_record_cameras_in_spec_and_config(runs: dict[str, Path]) -> None:
    for run in ("diffusion", "consistency", "meanflow"):
        policy, spec, extra, _ = load_generative(runs[run])
        assert spec.images == (ImageInput(CAMERA, *SIZE),), run
        if run != "diffusion":  # by default no DAgger rounds for a student with cameras
            assert extra["train_config"]["dagger"]["rounds"] == 0 and extra["dagger_rounds"] == []
        assert policy.image_keys == (CAMERA,) and policy.cfg.options.image_size == SIZE
        assert Spec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("run", ["consistency", "meanflow"])
def test_student_exports_with_image_input_and_matches_torch(runs: dict[str, Path], tmp_path: Path, run: str) -> None:
    out = tmp_path / f"{run}.onnx"
    result = export_generative_checkpoint(runs[run], out, num_obs=8, dataset=runs["demos"])
    assert result["max_abs_error"] <= 1e-4 and result["sampling_steps"] == 1
    gen = load_model(out)
    assert isinstance(gen, OnnxGenerator) and gen.image_shapes == {CAMERA: (2, 3, *SIZE)}
    inputs = {i.name: (i.type, i.shape[1:]) for i in gen.session.get_inputs()}
    assert inputs["image.side"] == ("tensor(uint8)", [2, 3, *SIZE])
    obs = np.zeros((2, 6), np.float32)
    frames = np.full((2, 3, *SIZE), 128, np.uint8)
    noise = np.random.default_rng(0).standard_normal((16, 2)).astype(np.float32)
    chunk = gen.sample(obs, noise, images={CAMERA: frames})
    assert chunk.shape == (16, 2) and np.isfinite(chunk).all()
    # Torch agrees on a batch of 3 too, through the same runner path.
    policy, *_ = load_generative(runs[run])
    batch = np.repeat(frames[None], 3, axis=0)
    noise3 = np.repeat(noise[None], 3, axis=0)
    with torch.no_grad():
        want = policy.sample(
            torch.zeros(3, 2, 6), torch.from_numpy(noise3), 1, images=torch.from_numpy(batch)[:, :, None]
        )
    got = gen.sample(np.zeros((3, 2, 6), np.float32), noise3, images={CAMERA: batch})
    assert np.abs(got - want.numpy()).max() <= 1e-4


@pytest.fixture(scope="module")
def student(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The consistency student exported to ONNX (parity on the dataset's windows)."""
    out = tmp_path_factory.mktemp("student") / "student.onnx"
    export_generative_checkpoint(runs["consistency"], out, num_obs=4, dataset=runs["demos"])
    return out


def test_bad_images_are_refused_with_the_expected_shape(student: Path) -> None:
    gen = OnnxGenerator(student)
    obs = np.zeros((2, 6), np.float32)
    good = np.zeros((2, 3, *SIZE), np.uint8)
    with pytest.raises(PolicyInputError, match=r"camera 'side' missing.*\(2, 3, 32, 32\)"):
        gen.sample(obs)
    with pytest.raises(PolicyInputError, match=r"float32 .*expected uint8 RGB .*\(2, 3, 32, 32\)"):
        gen.sample(obs, images={CAMERA: good.astype(np.float32)})
    with pytest.raises(PolicyInputError, match=r"\(2, 32, 32, 3\), expected uint8 RGB"):
        gen.sample(obs, images={CAMERA: np.zeros((2, *SIZE, 3), np.uint8)})  # channels last
    with pytest.raises(PolicyInputError, match=r"\(batch, To, 3, H, W\) = \(4, 2, 3, 32, 32\)"):
        gen.sample(np.zeros((4, 2, 6), np.float32), images={CAMERA: good})  # one history for a batch of 4
    with pytest.raises(PolicyInputError, match="unknown camera"):
        gen.sample(obs, images={CAMERA: good, "wrist": good})


def test_dataset_without_the_camera_is_a_clear_error(runs: dict[str, Path], tmp_path: Path) -> None:
    bare = write_camera_episodes(tmp_path / "bare", (), episodes=1, length=3)
    with pytest.raises(ValueError, match=r"bare: the dataset has no camera 'side' .*observation\.images\.side.*none"):
        train_bc_run("flow", bare, tmp_path / "run", 1, None, 0, progress=False, image_keys=(CAMERA,), **TINY)
    with pytest.raises(ValueError, match=r"no camera 'side'"):
        distill_run(runs["diffusion"], "consistency", bare, tmp_path / "student", 1, None, 0, progress=False)
    with pytest.raises(ValueError, match=r"no camera 'wrist'.*its cameras: side"):
        load_episodes(runs["demos"], ("wrist",))


def test_cli_bc_names_the_missing_camera(runs: dict[str, Path], tmp_path: Path, capsys) -> None:
    from reflexlab.cli import main

    bare = write_camera_episodes(tmp_path / "bare", (), episodes=1, length=3)
    args = ["bc", "--dataset", str(bare), "--run-dir", str(tmp_path / "r"), "--steps", "1", "--image-keys", CAMERA]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert "no camera 'side'" in capsys.readouterr().err


def test_step_actor_feeds_each_frame_resized_as_training_saw_it(runs: dict[str, Path], student: Path) -> None:
    """The recorded 40×40 frames fed raw, step by step: the model sees exactly the 32×32 frames training read."""
    episodes, _, dataset = load_episodes(runs["demos"], (CAMERA,), SIZE)
    trained, raw = episodes[0], list(dataset.video_frames(0, f"observation.images.{CAMERA}"))
    actor = StepActor(student, seed=3)
    assert actor.cameras == (CAMERA,) and raw[0].shape == (*RECORDED, 3)
    fed: list[tuple[np.ndarray, np.ndarray]] = []
    sample = actor.model.sample
    actor.model.sample = lambda h, **kw: fed.append((h, kw["images"][CAMERA])) or sample(h, **kw)  # watched
    steps = []
    for t in range(6):
        actor.act(trained["obs"][t], {CAMERA: raw[t]})
        steps.append(t) if len(fed) > len(steps) else None
    ta = actor.spec.execution_horizon
    assert steps == list(range(0, 6, ta)) and len(fed) == len(steps)
    for t, (history, frames) in zip(steps, fed, strict=True):
        rows = [max(t - 1, 0), t]  # To 2, the first step padded by itself
        np.testing.assert_array_equal(frames, trained["images"][rows, 0])
        np.testing.assert_array_equal(history, trained["obs"][rows])


def test_step_actor_holds_without_a_fresh_frame_and_replans_when_it_comes(student: Path) -> None:
    actor, obs = StepActor(student), np.zeros(6, np.float32)
    good = np.zeros((*RECORDED, 3), np.uint8)
    assert actor.spec.execution_horizon > 1  # so a plan is in flight when the camera stalls
    assert np.isfinite(actor.act(obs, {CAMERA: good})).all() and actor.noise_row(actor.noise_size).any()
    held = actor.act(obs, {CAMERA: None})
    assert held.shape == (2,) and np.isnan(held).all() and not actor.noise_row(actor.noise_size).any()
    assert np.isfinite(actor.act(obs, {CAMERA: good})).all()
    assert actor.noise_row(actor.noise_size).any(), "the plan from before the hold was dropped: a new chunk"
    with pytest.raises(PolicyInputError, match=r"reads cameras \['side'\] every step; no frame given for \['side'\]"):
        actor.act(obs)
    with pytest.raises(PolicyInputError, match=r"unknown camera\(s\) \['wrist'\].*reads: side"):
        actor.act(obs, {CAMERA: good, "wrist": good})
    with pytest.raises(PolicyInputError, match=r"camera 'side': frame is float32 \(40, 40, 3\), expected uint8 RGB"):
        actor.act(obs, {CAMERA: good.astype(np.float32)})
