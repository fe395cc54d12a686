"""`reflexlab dataset upgrade`: a real format-1 dataset (made by the old writer, tests/reflexlab/data/format1, see its
README) is refused by today's reader and writer, then migrated with every value and video frame kept, safely
against a live writer, a failure at the swap and SIGKILL at any moment.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from reflexlab.dataset import (
    DATA_PATH,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    DatasetError,
    DatasetWriter,
    load_dataset,
)
from reflexlab.dataset import upgrade as upgrade_module
from reflexlab.dataset.recovery import lock_dataset
from reflexlab.dataset.upgrade import NothingToUpgradeError, upgrade_dataset
from reflexlab.spec import Spec
from tests.reflexlab.format1 import FIXTURE, copy_format1

REPO = Path(__file__).resolve().parents[2]
REFLEXLAB = shutil.which("reflexlab") or str(Path(sys.executable).with_name("reflexlab"))
FPS = 10
CAMERA = "observation.images.front"
SHAPE = (16, 24, 3)
LENGTHS = (5, 4)  # the committed episodes; a third, crashed save's rows are debris
TASKS = ["pick the red cube", "place it in the bin"]
# format-1 column -> format-2 column
RENAMED = {
    "timestamp": "measured_timestamp",
    f"is_dropped.{CAMERA}": "camera.front.is_dropped",
    f"{CAMERA}.age_s": "camera.front.age_s",
}
FEATURES = {"observation.state": (3,), "action": (2,), "camera.front.age_s": (1,), "observation.gripper": (1,)}


@pytest.fixture
def format1(tmp_path: Path) -> Path:
    """A copy of the format-1 fixture (the tests change the copy, never the fixture)."""
    return copy_format1(tmp_path / "demos")


def tree(root: Path) -> dict[str, str]:
    """Every file's content hash (the lock file aside: taking the lock creates it), to tell a folder is unchanged."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".writer.lock"
    }


def decode(path: Path) -> np.ndarray:
    """Every frame of an MP4, decoded without our reader."""
    reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24", input_params=["-nostdin"])
    next(reader)
    frames = [np.frombuffer(raw, np.uint8).reshape(SHAPE) for raw in reader]
    return np.stack(frames)


def old_rows() -> dict[str, np.ndarray]:
    """The committed rows of the fixture's data file, read with pyarrow alone: 9 of the 12 stored."""
    table = pq.read_table(FIXTURE / DATA_PATH.format(chunk_index=0, file_index=0))
    assert table.num_rows == sum(LENGTHS) + 3  # the crashed save's rows are there
    table = table.slice(0, sum(LENGTHS))
    out = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_fixed_size_list(column.type):  # every vector, one-element ones included
            out[name] = column.flatten().to_numpy().reshape(len(column), column.type.list_size)
        else:
            out[name] = column.to_numpy(zero_copy_only=False)
    return out


def test_todays_reader_and_writer_refuse_format_1_naming_the_upgrade(format1: Path) -> None:
    before = tree(format1)
    with pytest.raises(DatasetError, match=r"reflexlab dataset upgrade .*demos"):
        load_dataset(format1)
    with pytest.raises(DatasetError, match="reflexlab dataset upgrade"):
        DatasetWriter(format1, FPS, "toy_arm", FEATURES, videos={CAMERA: SHAPE})
    assert tree(format1) == before


def test_upgrade_keeps_every_value_and_frame_and_adds_what_lerobot_reads(format1: Path) -> None:
    before = tree(format1)
    old = old_rows()
    old_frames = [decode(format1 / f"videos/{CAMERA}/chunk-000/file-{i:03d}.mp4") for i in range(len(LENGTHS))]
    report = upgrade_dataset(format1)

    backup = format1.with_name("demos.format1-backup")
    assert report.backup == backup and tree(backup) == before  # the original, byte for byte
    assert (report.episodes, report.frames, report.cameras) == (2, 9, (CAMERA,))
    assert report.renamed == RENAMED and report.carried_files == ("README.md",) and not report.resumed
    assert report.scalar_columns == ("camera.front.age_s", "observation.gripper")
    ds = load_dataset(format1)
    assert (ds.num_episodes, ds.num_frames, ds.tasks) == (2, 9, TASKS)
    assert ds.vector_features == FEATURES and ds.video_features == {CAMERA: SHAPE}
    spec = json.loads((backup / INFO_PATH).read_text())["reflexlab_spec"]
    assert spec is not None and ds.spec == Spec.from_dict(spec)
    steps = {key: np.concatenate([ds.episode(i)[key] for i in range(2)]) for key in ds.episode(0)}
    # the measured times moved; timestamp is where LeRobot looks the frames up
    np.testing.assert_array_equal(steps["measured_timestamp"], old["timestamp"].astype(np.float64))
    assert steps["measured_timestamp"].dtype == np.float64
    assert np.abs(old["timestamp"] - old["frame_index"] / FPS).max() > 0.02  # the fixture's clock drifted
    np.testing.assert_array_equal(steps["timestamp"], (old["frame_index"] / FPS).astype(np.float32))
    assert report.max_timestamp_drift_s == pytest.approx(np.abs(old["timestamp"] - old["frame_index"] / FPS).max())
    for key, values in old.items():
        if key != "timestamp":
            np.testing.assert_array_equal(steps[RENAMED.get(key, key)].reshape(values.shape), values, err_msg=key)
    assert steps["camera.front.is_dropped"].tolist() == [False, False, True] + [False] * 6
    assert [ds.episode_meta(i)["operator"] for i in range(2)] == ["ana", "bo"]

    # LeRobot's rules: scalar columns, the task as the pandas index, no "image" outside the camera, camera stats
    schema = pq.read_schema(format1 / DATA_PATH.format(chunk_index=0, file_index=0))
    assert schema.field("camera.front.age_s").type == pa.float32()
    assert schema.field("observation.state").type == pa.list_(pa.float32(), 3)
    tasks = pq.read_table(format1 / TASKS_PATH)
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"] and tasks.num_rows == 2
    info = json.loads((format1 / INFO_PATH).read_text())
    assert info["reflexlab_format"] == 2
    assert info["features"]["measured_timestamp"] == {"dtype": "float64", "shape": [1], "names": None}
    assert [key for key in info["features"] if "image" in key] == [CAMERA]
    stats = json.loads((format1 / STATS_PATH).read_text())
    assert ds.stats == stats  # what the reader computes from the data, as the format-2 writer would have written it
    camera = stats[CAMERA]
    assert camera["count"] == [9]
    pixels = np.concatenate(old_frames).reshape(-1, 3) / 255.0  # every frame, a dropped step's repeat included
    np.testing.assert_allclose(np.array(camera["mean"]).reshape(3), pixels.mean(axis=0), atol=1e-9)
    for name in ("mean", "std", "min", "max", "q01", "q50", "q99"):
        assert np.array(camera[name]).shape == (3, 1, 1) and 0 <= np.min(camera[name]) <= np.max(camera[name]) <= 1

    # the videos are the old files: frame i is still step i
    for i, length in enumerate(LENGTHS):
        frames = np.stack(list(ds.video_frames(i, CAMERA)))
        assert frames.shape == (length, *SHAPE)
        np.testing.assert_array_equal(frames, old_frames[i])
    # the crashed save's debris stays behind (in the backup only)
    assert not (format1 / f"videos/{CAMERA}/chunk-000/file-002.mp4").exists()
    assert pq.read_metadata(format1 / EPISODES_PATH).num_rows == 2
    assert (format1 / "README.md").read_bytes() == (FIXTURE / "README.md").read_bytes()


def test_todays_writer_appends_to_an_upgraded_dataset(format1: Path) -> None:
    upgrade_dataset(format1)
    spec = load_dataset(format1).spec
    with DatasetWriter(format1, FPS, "toy_arm", FEATURES, spec, videos={CAMERA: SHAPE}) as writer:
        for t in range(3):
            frame = {key: np.full(shape, t, np.float32) for key, shape in FEATURES.items()}
            writer.add_frame({**frame, CAMERA: np.full(SHAPE, 60, np.uint8)}, measured_timestamp=0.2 * t)
        writer.save_episode(TASKS[1])
    ds = load_dataset(format1)
    assert (ds.num_episodes, ds.num_frames, ds.tasks) == (3, 12, TASKS)
    np.testing.assert_array_equal(ds.episode(2)["measured_timestamp"], [0.0, 0.2, 0.4])


def test_a_second_upgrade_has_nothing_to_do(format1: Path) -> None:
    upgrade_dataset(format1)
    after = tree(format1)
    with pytest.raises(NothingToUpgradeError, match=r"nothing to do.*format1-backup"):
        upgrade_dataset(format1)
    assert tree(format1) == after


def test_without_a_backup_the_original_goes_once_the_upgrade_is_in_place(format1: Path) -> None:
    report = upgrade_dataset(format1, keep_backup=False)
    assert report.backup is None and sorted(p.name for p in format1.parent.iterdir()) == ["demos"]
    assert load_dataset(format1).num_frames == 9


@pytest.mark.parametrize("failing_rename", [1, 2], ids=["before-the-swap", "between-the-renames"])
def test_a_failure_at_the_swap_loses_nothing_and_a_rerun_completes(
    format1: Path, monkeypatch: pytest.MonkeyPatch, failing_rename: int
) -> None:
    """As a crash would: the first rename (the original aside) or the second (the new dataset into place) fails."""
    before = tree(format1)
    backup, staging = format1.with_name("demos.format1-backup"), format1.with_name("demos.upgrading")
    calls = []

    def rename(source: Path, target: Path) -> None:
        calls.append(source)
        if len(calls) == failing_rename:
            raise OSError("simulated crash at the swap")
        real_rename(source, target)

    real_rename = upgrade_module.os.rename
    monkeypatch.setattr(upgrade_module.os, "rename", rename)
    with pytest.raises(OSError, match="simulated crash"):
        upgrade_dataset(format1)
    monkeypatch.undo()
    assert staging.is_dir()  # complete, as a crash would leave it
    if failing_rename == 1:  # the original is where it was, as it was, and still refused as before
        assert tree(format1) == before and not backup.exists()
        with pytest.raises(DatasetError, match="reflexlab dataset upgrade"):
            load_dataset(format1)
    else:  # no dataset at the path: the rerun finds both folders
        assert not format1.exists() and tree(backup) == before
    report = upgrade_dataset(format1)
    assert report.resumed == (failing_rename == 2)
    assert load_dataset(format1).num_frames == 9 and tree(backup) == before and not staging.exists()


def start_upgrade(root: Path) -> subprocess.Popen:
    """An upgrade of ``root`` in a child process, started once the child has imported everything."""
    child = (
        "import sys; from reflexlab.dataset.upgrade import upgrade_dataset; print('ready', flush=True); input(); "
        "upgrade_dataset(sys.argv[1])"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
    )
    assert proc.stdout.readline() == b"ready\n"
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    return proc


def test_sigkill_at_random_moments_never_loses_the_dataset(tmp_path: Path) -> None:
    """A real upgrade process killed at a random instant: afterwards the path holds the original (unchanged) or the
    upgraded dataset, or an interrupted swap the rerun completes; the rerun always ends with the upgraded dataset."""
    pristine = copy_format1(tmp_path / "pristine")
    before = tree(pristine)
    shutil.copytree(pristine, tmp_path / "timing")
    start = time.perf_counter()
    assert start_upgrade(tmp_path / "timing").wait() == 0
    duration = time.perf_counter() - start
    rng = random.Random(21)
    outcomes = []
    for attempt in range(8):
        root = tmp_path / f"demos{attempt}"
        backup, staging = root.with_name(root.name + ".format1-backup"), root.with_name(root.name + ".upgrading")
        shutil.copytree(pristine, root)
        proc = start_upgrade(root)
        time.sleep(rng.uniform(0.0, duration))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if root.is_dir() and json.loads((root / INFO_PATH).read_text()).get("reflexlab_format") == 2:
            outcomes.append("done")
        elif root.is_dir():
            assert tree(root) == before
            outcomes.append("building" if staging.exists() else "not started")
        else:
            assert tree(backup) == before
            outcomes.append("between the renames")
        with contextlib.suppress(NothingToUpgradeError):  # the kill came after the swap
            upgrade_dataset(root)
        assert load_dataset(root).num_frames == 9 and tree(backup) == before and not staging.exists()
    assert set(outcomes) != {"done"}, outcomes  # kills landed before the upgrade finished


@pytest.mark.parametrize(
    ("prepare", "message"),
    [
        ("missing", "no such folder"),
        ("empty", "not a dataset: no meta/info.json"),
        ("lerobot", "not written by reflexlab"),
        ("future", "reflexlab_format 3 .* upgrade reflexlab"),
        ("writer", "a writer has it open"),
        ("backup", "format1-backup already exists"),
    ],
)
def test_refuses_what_it_must_not_upgrade_changing_nothing(format1: Path, prepare: str, message: str) -> None:
    info_path = format1 / INFO_PATH
    info = json.loads(info_path.read_text())
    lock = None
    if prepare == "missing":
        shutil.rmtree(format1)
    elif prepare == "empty":
        shutil.rmtree(format1)
        format1.mkdir()
    elif prepare == "lerobot":
        info_path.write_text(json.dumps({k: v for k, v in info.items() if k != "reflexlab_version"}))
    elif prepare == "future":
        info_path.write_text(json.dumps({**info, "reflexlab_format": 3}))
    elif prepare == "writer":
        lock = lock_dataset(format1)  # a recording in progress
    elif prepare == "backup":
        format1.with_name("demos.format1-backup").mkdir()
    before = sorted(p.name for p in format1.parent.iterdir()), tree(format1) if format1.exists() else {}
    try:
        with pytest.raises(DatasetError, match=message):
            upgrade_dataset(format1)
    finally:
        if lock is not None:
            lock.close()
    assert (sorted(p.name for p in format1.parent.iterdir()), tree(format1) if format1.exists() else {}) == before


def test_a_dataset_whose_only_content_is_debris_upgrades_to_an_empty_one(format1: Path) -> None:
    """info.json is the commit point: with totals of 0 (a writer that crashed in its first save), every row, task and
    MP4 on disk is debris."""
    info = json.loads((format1 / INFO_PATH).read_text())
    (format1 / INFO_PATH).write_text(json.dumps({**info, "total_episodes": 0, "total_frames": 0, "total_tasks": 0}))
    report = upgrade_dataset(format1)
    assert (report.episodes, report.frames) == (0, 0)
    ds = load_dataset(format1)
    assert (ds.num_episodes, ds.tasks) == (0, [])
    assert not (format1 / "data").exists() and not (format1 / "videos").exists()


def test_the_cli_upgrades_prints_one_json_line_and_stays_torch_free(format1: Path) -> None:
    code = "import sys; from reflexlab.cli import main; main(sys.argv[1:]); print({'torch', 'mujoco'} & {*sys.modules})"
    args = ["dataset", "upgrade", str(format1), "--no-keep-backup"]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    line, imported = r.stdout.strip().splitlines()
    assert imported == "set()"
    out = json.loads(line)
    assert (out["upgraded"], out["episodes"], out["frames"], out["backup"]) == (True, 2, 9, None)
    assert out["renamed"] == RENAMED
    assert "to format 2" in r.stderr and "measured_timestamp" in r.stderr
    again = subprocess.run([REFLEXLAB, "dataset", "upgrade", str(format1)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and json.loads(again.stdout)["upgraded"] is False and "nothing to do" in again.stderr
    info = subprocess.run([REFLEXLAB, "dataset", "info", str(format1)], capture_output=True, text=True, timeout=120)
    assert info.returncode == 0 and "reflexlab format 2" in info.stdout and "camera.front.age_s" in info.stdout
    assert "1  place it in the bin" in info.stdout
    refused = subprocess.run(
        [REFLEXLAB, "dataset", "upgrade", str(format1.with_name("nope"))], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "no such folder" in refused.stderr and "Traceback" not in refused.stderr
