"""LeRobot 0.4.4's own code on our datasets, and ours on LeRobot's: issue 21's bars, checked by the tool users have.

LeRobot runs in its own venv (``make setup-lerobot``; it pins torch<2.11) through `lerobot_side.py`; these tests write
datasets with our writers (``demos``: state only and with a camera; ``record``: sim-as-real with the scene camera),
hand them to LeRobot and compare what it read, item by item, with what our reader reads: every vector and per-step
column equal, every step's frame pixel-identical, tasks as strings, ``delta_timestamps`` windows as LeRobot
defines them, stats, one training step of LeRobot's diffusion policy, aggregation of two of our datasets. The other
way, LeRobot's writer makes a dataset and our teacher and student train on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from policies.generative.dagger import DaggerConfig
from policies.imitation import distill_run, load_generative, train_bc_run
from reflexlab.dataset import Dataset, load_dataset
from reflexlab.dataset.upgrade import upgrade_dataset
from sim.demos import record_demos
from tests.reflexlab.format1 import copy_format1

REPO = Path(__file__).resolve().parents[2]
LEROBOT_PYTHON = REPO / ".venv-lerobot" / "bin" / "python"
SIDE = Path(__file__).with_name("lerobot_side.py")
CAMERA = "observation.images.side"


LeRobot = Callable[..., str]


@pytest.fixture(scope="module")
def lerobot(tmp_path_factory: pytest.TempPathFactory) -> LeRobot:
    """Run a `lerobot_side.py` command in LeRobot's venv; returns its stdout."""
    if not LEROBOT_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{LEROBOT_PYTHON} missing: `make test` builds it (make setup-lerobot)")
        pytest.skip("LeRobot's venv is not built: make setup-lerobot")
    home = tmp_path_factory.mktemp("hf-home")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "PYTHONPATH": ""}

    def run(*args: object) -> str:
        done = subprocess.run(
            [str(LEROBOT_PYTHON), str(SIDE), *map(str, args)], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"LeRobot side {args[0]} failed:\n{done.stderr[-4000:]}"
        return done.stdout

    return run


@pytest.fixture(scope="module")
def demos_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demos-state") / "ds"
    record_demos("panda-push-t", 3, out, seed=0, num_envs=3, progress=False)
    return out


@pytest.fixture(scope="module")
def demos_camera(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demos-camera") / "ds"
    record_demos("panda-push-t", 2, out, seed=0, num_envs=2, progress=False, cameras=("side",), image_size=64)
    return out


@pytest.fixture(scope="module")
def rl_rollouts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What an RL loop records: interventions, policy versions, rewards, successes, a camera that drops frames."""
    from reflexlab.dataset import DatasetWriter
    from reflexlab.tasks.panda_push_t.spec import make_spec

    spec = make_spec()
    out = tmp_path_factory.mktemp("rl") / "ds"
    rng = np.random.default_rng(0)
    features = {"observation.state": (spec.policy_obs.size,), "action": (2,), "policy.action": (2,)}
    with DatasetWriter(out, spec.control_rate_hz, spec.robot, features, spec, videos={CAMERA: (48, 64, 3)}) as w:
        for episode in range(3):
            length = 12 + 3 * episode
            for t in range(length):
                image = None if t in (0, 5) and episode == 1 else rng.integers(0, 255, (48, 64, 3), np.uint8)
                action = rng.normal(size=2)
                w.add_frame(
                    {"observation.state": rng.normal(size=spec.policy_obs.size), "action": action,
                     "policy.action": action + (t % 4 == 1), CAMERA: image},
                    reward=float(t == length - 1), terminated=t == length - 1, success=t == length - 1 and episode != 2,
                    is_intervention=4 <= t < 8, policy_version=episode, measured_timestamp=t * 0.1 + 0.003 * (t % 3),
                )  # fmt: skip
            w.save_episode("push the T onto the target", {"round": episode})
    return out


def lerobot_reads(lerobot: LeRobot, root: Path, out: Path) -> tuple[dict, dict, dict]:
    out.mkdir(parents=True, exist_ok=True)
    lerobot("load", root, out)
    return (
        dict(np.load(out / "items.npz")),
        dict(np.load(out / "windows.npz")),
        json.loads((out / "meta.json").read_text()),
    )


def our_steps(ds: Dataset) -> dict[str, np.ndarray]:
    """Every per-step column of every episode, concatenated in index order, and each camera's frames."""
    episodes = [ds.episode(i) for i in range(ds.num_episodes)]
    steps = {key: np.concatenate([ep[key] for ep in episodes]) for key in episodes[0]}
    for key in ds.video_features:
        steps[key] = np.concatenate([np.stack(list(ds.video_frames(i, key))) for i in range(ds.num_episodes)])
    return steps


def check_items_match(ds: Dataset, items: dict, meta: dict) -> None:
    ours = our_steps(ds)
    assert set(items) == set(ours), "LeRobot and our reader see different columns"
    for key, values in ours.items():
        theirs = items[key].reshape(values.shape)
        if values.dtype == np.float64:  # measured_timestamp: LeRobot's items hold every float as float32
            values = values.astype(np.float32)
        np.testing.assert_array_equal(theirs, values, err_msg=f"{key} differs (frames: not pixel-identical)")
    assert meta["tasks"] == [ds.tasks[i] for i in ours["task_index"]]  # the strings, not their index


def check_windows(ds: Dataset, windows: dict, meta: dict) -> None:
    """delta_timestamps as LeRobot defines them: rows clamped to the episode, outside ones flagged as padding."""
    ours = our_steps(ds)
    starts = np.repeat([ds.episode_meta(i)["dataset_from_index"] for i in range(len(ds))], [
        ds.episode_meta(i)["length"] for i in range(len(ds))])  # fmt: skip
    ends = starts + np.repeat([ds.episode_meta(i)["length"] for i in range(len(ds))], [
        ds.episode_meta(i)["length"] for i in range(len(ds))])  # fmt: skip
    index = np.arange(ds.num_frames)
    for key, deltas in meta["deltas"].items():
        shifts = np.rint(np.asarray(deltas) * ds.fps).astype(int)
        wanted = index[:, None] + shifts[None, :]
        pad = (wanted < starts[:, None]) | (wanted >= ends[:, None])
        rows = np.clip(wanted, starts[:, None], ends[:, None] - 1)
        np.testing.assert_array_equal(windows[f"{key}_is_pad"], pad, err_msg=f"{key} padding")
        np.testing.assert_array_equal(windows[key], ours[key][rows].reshape(windows[key].shape), err_msg=key)


def check_stats(ds: Dataset, meta: dict) -> None:
    stats = meta["stats"]
    ours = ds.stats
    names = ("mean", "std", "min", "max", "q01", "q10", "q50", "q90", "q99")  # what LeRobot's normalisers read
    for key in ds.vector_features:
        for stat in names:
            np.testing.assert_allclose(np.ravel(stats[key][stat]), np.ravel(ours[key][stat]), rtol=1e-5, atol=1e-6)
        values = our_steps(ds)[key].reshape(ds.num_frames, -1)
        np.testing.assert_allclose(np.ravel(stats[key]["mean"]), values.mean(axis=0), rtol=1e-5, atol=1e-6)
    for key in ds.video_features:
        frames = our_steps(ds)[key].reshape(-1, 3) / 255.0
        mean = np.asarray(stats[key]["mean"])
        assert all(np.asarray(stats[key][stat]).shape == (3, 1, 1) for stat in names), key
        # the writer's stats are of the frames it encoded, LeRobot decodes h264: equal up to compression
        np.testing.assert_allclose(mean.ravel(), frames.mean(axis=0), atol=0.01)
        assert stats[key]["count"] == [ds.num_frames]


@pytest.mark.parametrize("kind", ["demos_state", "demos_camera", "rl_rollouts"])
def test_lerobot_loads_our_datasets_aligned(
    kind: str, lerobot: LeRobot, request: pytest.FixtureRequest, tmp_path: Path
):
    root = request.getfixturevalue(kind)
    ds = load_dataset(root)
    items, windows, meta = lerobot_reads(lerobot, root, tmp_path / "read")
    assert meta["num_episodes"] == ds.num_episodes and meta["cameras"] == list(ds.video_features)
    check_items_match(ds, items, meta)
    check_windows(ds, windows, meta)
    check_stats(ds, meta)


def test_lerobot_dataloader_workers_decode_our_frames(lerobot: LeRobot, demos_camera: Path, tmp_path: Path) -> None:
    """Through 2 DataLoader worker processes, as LeRobot's trainer reads: every frame at its index, pixel-identical."""
    lerobot("workers", demos_camera, tmp_path)
    seen = np.load(tmp_path / "workers.npz")
    ours = our_steps(load_dataset(demos_camera))
    np.testing.assert_array_equal(seen["index"], ours["index"])
    np.testing.assert_array_equal(seen[CAMERA], ours[CAMERA])


def test_lerobot_loads_a_dataset_migrated_by_dataset_upgrade(lerobot: LeRobot, tmp_path: Path) -> None:
    """A recording from the old writer (measured timestamps, one-element lists), after `reflexlab dataset upgrade`."""
    root = copy_format1(tmp_path / "old")
    upgrade_dataset(root, keep_backup=False)
    ds = load_dataset(root)
    items, windows, meta = lerobot_reads(lerobot, root, tmp_path / "read")
    check_items_match(ds, items, meta)
    check_windows(ds, windows, meta)
    check_stats(ds, meta)


@pytest.mark.realtime
def test_lerobot_loads_a_sim_as_real_recording_frame_aligned(lerobot: LeRobot, tmp_path: Path) -> None:
    """``record`` against the arm bridge (its scene camera over ROS): measured times jitter, frames still align."""
    out = tmp_path / "rec"
    cmd = [sys.executable, "-m", "reflexlab.cli", "record", "--out", out, "--episodes", "2",
           "--episode-time-s", "2", "--cameras", "scene=ros:/camera/color/image_raw"]  # fmt: skip
    subprocess.run(list(map(str, cmd)), check=True, capture_output=True, timeout=300)
    ds = load_dataset(out)
    measured = our_steps(ds)["measured_timestamp"]
    assert not np.allclose(measured, our_steps(ds)["timestamp"], atol=1e-4), "expected a real, jittering clock"
    items, windows, meta = lerobot_reads(lerobot, out, tmp_path / "read")
    check_items_match(ds, items, meta)
    check_windows(ds, windows, meta)
    check_stats(ds, meta)


@pytest.mark.parametrize("kind", ["demos_state", "demos_camera"])
def test_lerobot_trains_a_step_on_our_dataset(kind: str, lerobot: LeRobot, request: pytest.FixtureRequest) -> None:
    """LeRobot's diffusion policy, normalised by our stats.json (frames mean/std, vectors min/max)."""
    result = json.loads(lerobot("train", request.getfixturevalue(kind)))
    assert np.isfinite(result["loss"])
    assert all(result["normalised"].values()), result
    assert result["images"] == ([CAMERA] if kind == "demos_camera" else [])


def test_lerobot_aggregates_two_of_our_datasets(lerobot: LeRobot, demos_camera: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    record_demos("panda-push-t", 2, other, seed=50, num_envs=2, progress=False, cameras=("side",), image_size=64)
    merged = tmp_path / "merged"
    result = json.loads(lerobot("aggregate", merged, demos_camera, other))
    a, b = load_dataset(demos_camera), load_dataset(other)
    assert result == {
        "frames": a.num_frames + b.num_frames,
        "episodes": 4,
        "tasks": ["panda-push-t"],
        "last_episode_index": 3,
    }
    both = load_dataset(merged)  # LeRobot concatenated the videos: our reader finds each episode's frames
    for i, (source, j) in enumerate([(a, 0), (a, 1), (b, 0), (b, 1)]):
        np.testing.assert_array_equal(both.episode(i)["action"], source.episode(j)["action"])
        np.testing.assert_array_equal(
            np.stack(list(both.video_frames(i, CAMERA))), np.stack(list(source.video_frames(j, CAMERA)))
        )


def test_our_teacher_and_student_train_on_a_lerobot_written_dataset(
    lerobot: LeRobot, demos_camera: Path, tmp_path: Path
) -> None:
    """LeRobot's own writer (its encoder, its layout, no reflexlab Spec): ``bc --task`` and ``distill`` read it."""
    source = load_dataset(demos_camera)
    keys = ("observation.state", "observation.environment_state", "action")
    arrays = {}
    for i in range(source.num_episodes):
        arrays |= {f"ep{i}.{key}": source.episode(i)[key] for key in keys}
        arrays[f"ep{i}.{CAMERA}"] = np.stack(list(source.video_frames(i, CAMERA)))
    meta = {
        "fps": int(source.fps),
        "task": source.tasks[0],
        "episodes": source.num_episodes,
        "vectors": {key: list(source.vector_features[key]) for key in keys},
        "videos": {CAMERA: list(source.video_features[CAMERA])},
    }
    np.savez(tmp_path / "arrays.npz", meta=json.dumps(meta), **arrays)
    theirs = tmp_path / "lerobot-written"
    lerobot("write", tmp_path / "arrays.npz", theirs)
    ds = load_dataset(theirs)
    assert ds.written_by is None and ds.spec is None and ds.num_frames == source.num_frames
    for i in range(ds.num_episodes):
        np.testing.assert_array_equal(ds.episode(i)["action"], source.episode(i)["action"])
        frames = np.stack(list(ds.video_frames(i, CAMERA)))  # LeRobot re-encoded them (AV1): close, not equal
        assert frames.shape == arrays[f"ep{i}.{CAMERA}"].shape
        assert np.abs(frames.astype(int) - arrays[f"ep{i}.{CAMERA}"]).mean() < 4.0
    with pytest.raises(ValueError, match="--task"):
        train_bc_run("diffusion", theirs, tmp_path / "refused", 2, None, 0, progress=False)
    teacher = train_bc_run(
        "diffusion", theirs, tmp_path / "teacher", 4, None, 0, progress=False, down_dims=(16, 32),
        horizon=8, execution_horizon=4, image_keys=("side",), task="panda-push-t",
    )  # fmt: skip
    _, spec, _, _ = load_generative(teacher)
    assert spec.task == "panda-push-t" and [i.name for i in spec.images] == ["side"]
    student = distill_run(
        teacher, "consistency", theirs, tmp_path / "student", 2, None, 0, progress=False, samples_per_window=1,
        teacher_sampling_steps=2, dagger=DaggerConfig(rounds=0),
    )  # fmt: skip
    assert load_generative(student)[1].images == spec.images
