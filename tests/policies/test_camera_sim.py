"""Cameras in simulation: scripted demos with the MJCF "side" camera rendered into video features, a camera policy
trained on them, evaluated with frames rendered at every control step, and exported with parity checked on those
frames. Tiny: one demo episode of 32×32 frames (software EGL renders ~0.1 s a frame here), a few training steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from policies.chunk_eval import evaluate_chunks
from policies.generative.sampler import TorchSampler
from policies.imitation import distill_run, load_episodes, load_generative, train_bc_run
from reflexlab.cli.export import export_generative_checkpoint
from reflexlab.dataset import load_dataset
from sim.demos import record_demos
from sim.registry import get_task

SIZE = 32


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("camera_sim")
    demos = root / "demos"
    record_demos("panda-push-t", 1, demos, seed=0, num_envs=1, progress=False, cameras=("side",), image_size=SIZE)
    teacher, student = root / "diffusion", root / "consistency"
    train_bc_run("diffusion", demos, teacher, 2, None, 0, progress=False, down_dims=(16, 32), image_keys=("side",))
    distill_run(teacher, "consistency", demos, student, 2, None, 0, progress=False, samples_per_window=1, batch_size=8)
    return {"demos": demos, "diffusion": teacher, "consistency": student}


def test_demos_record_the_side_camera_step_by_step(runs: dict[str, Path]) -> None:
    ds = load_dataset(runs["demos"])
    assert ds.video_features == {"observation.images.side": (SIZE, SIZE, 3)}
    episodes, _, _ = load_episodes(runs["demos"], ("side",))
    frames = episodes[0]["images"][:, 0]  # (T, 3, H, W)
    assert len(frames) == len(episodes[0]["obs"]) > 1
    env = get_task("panda-push-t").task_class(1, 5)
    env.reset([0])  # the recorded episode's seed
    first = env.render("side", SIZE, SIZE)[0].transpose(2, 0, 1).astype(float)
    assert np.abs(frames[0] - first).mean() < 6, "frame 0 is the initial scene (up to h264 loss)"
    assert np.abs(frames[-1].astype(float) - first).mean() > np.abs(frames[0] - first).mean(), "the scene changes"


def test_evaluation_renders_the_camera_each_control_step(runs: dict[str, Path]) -> None:
    policy, spec, _, _ = load_generative(runs["diffusion"])
    assert [(c.name, c.height, c.width) for c in spec.images] == [("side", SIZE, SIZE)]
    torch_sampler = TorchSampler(policy, 2)
    seen: list[dict[str, np.ndarray]] = []

    def sampler(obs: np.ndarray, noise: np.ndarray, images: dict[str, np.ndarray]) -> np.ndarray:
        seen.append({k: v.copy() for k, v in images.items()})
        return torch_sampler(obs, noise, images)

    spec_steps = spec.execution_horizon
    res = evaluate_chunks(sampler, spec, [3], episode_steps=spec_steps + 1)
    assert res.replans == 2 and len(seen) == 2
    first, second = seen[0]["side"], seen[1]["side"]
    assert first.shape == (1, 2, 3, SIZE, SIZE) and first.dtype == np.uint8
    assert np.array_equal(first[:, 0], first[:, 1]), "the history starts padded with the first frame"
    assert not np.array_equal(second[:, 1], first[:, 1]), "a new frame after the executed actions"


def test_export_checks_parity_on_rendered_frames(runs: dict[str, Path], tmp_path: Path) -> None:
    result = export_generative_checkpoint(runs["consistency"], tmp_path / "student.onnx", num_obs=8)
    assert result["max_abs_error"] <= 1e-4 and result["num_obs"] == 8
