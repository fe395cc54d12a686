"""reflexlab.dataset: round trips, appends, file roll-over, refusal of corrupt data, and crash safety under SIGKILL.

Everything runs on real files with real pyarrow; the crash test kills real writer processes.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    Dataset,
    DatasetError,
    DatasetWriter,
    load_dataset,
)
from reflexlab.dataset.recovery import LOCK_GRACE_S, lock_dataset
from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec

REPO = Path(__file__).resolve().parents[2]
FPS = 50
FEATURES = {"observation.state": (3,), "action": (2,), "observation.environment_state": (4,)}
DATA_000 = DATA_PATH.format(chunk_index=0, file_index=0)


def toy_spec(action_names: tuple[str, str] = ("a0", "a1")) -> Spec:
    action = ActionSpec("joint_position", action_names, 1.0, (0.0, 0.0), (-1.0, -1.0), (1.0, 1.0))
    group = ObsGroup("policy", (ObsTerm("q", 3, "rad"),))
    return Spec("toy", "reach", (group,), "policy", action, control_rate_hz=FPS, physics_rate_hz=500.0)


def toy_length(episode: int) -> int:
    return 1 + episode % 5


def toy_frame(episode: int, t: int) -> dict[str, np.ndarray]:
    """Content that follows from (episode, frame) alone, so any episode can be checked without the writer's help."""
    return {
        "observation.state": episode * 100 + t + np.array([0.0, 0.25, 0.5]),
        "action": -(episode + t / 8) + np.array([0.0, 1.0]),
        "observation.environment_state": np.full(4, episode - t * 0.5),
    }


def record_toy_episode(writer: DatasetWriter, pause_s: float = 0.0) -> int:
    episode, length = writer.num_episodes, toy_length(writer.num_episodes)
    for t in range(length):
        writer.add_frame(
            toy_frame(episode, t),
            reward=float(t),
            success=t == length - 1 and episode % 2 == 0,
            is_intervention=t % 2 == 1,
            policy_version=episode,
        )
        time.sleep(pause_s)
    return writer.save_episode(f"task {episode % 3}", {"seed": episode * 7})


def record_until_killed(root: str, pause_s: str) -> None:
    """The crash test's child: records toy episodes until SIGKILL, reporting each save once it has returned."""
    with DatasetWriter(Path(root), FPS, "toy", FEATURES) as writer:
        print("ready", flush=True)
        while True:
            print(f"saved {record_toy_episode(writer, float(pause_s))}", flush=True)


def write_toy(root: Path, episodes: int, **kwargs: Any) -> None:
    with DatasetWriter(root, FPS, "toy", FEATURES, **kwargs) as writer:
        for _ in range(episodes):
            record_toy_episode(writer)


def assert_toy_episode(dataset: Dataset, i: int) -> None:
    ep = dataset.episode(i)
    length = toy_length(i)
    for key in FEATURES:
        want = np.stack([toy_frame(i, t)[key] for t in range(length)]).astype(np.float32)
        assert ep[key].dtype == np.float32
        np.testing.assert_array_equal(ep[key], want, err_msg=f"episode {i} {key}")
    np.testing.assert_array_equal(ep["frame_index"], np.arange(length))
    np.testing.assert_array_equal(ep["episode_index"], np.full(length, i))
    np.testing.assert_allclose(ep["timestamp"], np.arange(length) / FPS, rtol=1e-6)
    np.testing.assert_array_equal(ep["next.reward"], np.arange(length, dtype=np.float32))
    np.testing.assert_array_equal(ep["is_intervention"], np.arange(length) % 2 == 1)
    np.testing.assert_array_equal(ep["policy_version"], np.full(length, i))
    np.testing.assert_array_equal(ep["next.done"], np.arange(length) == length - 1)
    meta = dataset.episode_meta(i)
    assert (meta["length"], meta["tasks"], meta["seed"], meta["success"]) == (
        length,
        [f"task {i % 3}"],
        i * 7,
        i % 2 == 0,
    )
    assert ep["index"][0] == meta["dataset_from_index"] and ep["index"][-1] == meta["dataset_to_index"] - 1


# --- round trips -------------------------------------------------------------------------------------------------
def test_round_trip_keeps_values_indices_and_stats(tmp_path: Path) -> None:
    write_toy(tmp_path, 5, spec=toy_spec())
    ds = load_dataset(tmp_path)
    assert (ds.num_episodes, ds.num_frames, ds.fps, ds.robot_type) == (5, sum(map(toy_length, range(5))), FPS, "toy")
    assert ds.spec == toy_spec()
    assert ds.vector_features == FEATURES
    assert ds.features["action"]["names"] == ["a0", "a1"]
    assert ds.tasks == ["task 0", "task 1", "task 2"]
    for i in range(5):
        assert_toy_episode(ds, i)
    episodes = list(ds.episodes())
    np.testing.assert_array_equal(np.concatenate([e["index"] for e in episodes]), np.arange(ds.num_frames))

    for key in [*FEATURES, "next.reward", "index"]:
        values = np.concatenate([e[key] for e in episodes]).astype(np.float64).reshape(ds.num_frames, -1)
        stats = ds.stats[key]
        np.testing.assert_allclose(stats["mean"], values.mean(axis=0), rtol=1e-9, err_msg=key)
        np.testing.assert_allclose(stats["std"], values.std(axis=0), rtol=1e-9, atol=1e-12, err_msg=key)
        np.testing.assert_array_equal(stats["min"], values.min(axis=0))
        np.testing.assert_array_equal(stats["max"], values.max(axis=0))
        assert stats["count"] == [ds.num_frames]
    on_disk = json.loads((tmp_path / STATS_PATH).read_text())
    np.testing.assert_allclose(on_disk["action"]["mean"], ds.stats["action"]["mean"], rtol=1e-9)

    info = json.loads((tmp_path / INFO_PATH).read_text())
    assert info["codebase_version"] == "v3.0" and info["data_path"] == DATA_PATH
    assert (info["total_episodes"], info["total_tasks"], info["splits"]) == (5, 3, {"train": "0:5"})
    assert info["chunks_size"] == 1000 and info["data_files_size_in_mb"] == 100
    assert info["reflexlab_spec"] == toy_spec().to_dict() and "reflexlab_version" in info
    schema = pq.read_schema(tmp_path / DATA_000)
    assert schema.field("action").type == pa.list_(pa.float32(), 2)
    assert pq.read_table(tmp_path / TASKS_PATH).column_names == ["task_index", "task"]


def test_empty_dataset_is_valid_from_the_moment_a_writer_opens_it(tmp_path: Path) -> None:
    DatasetWriter(tmp_path, FPS, "toy", FEATURES).close()
    ds = load_dataset(tmp_path)
    assert (ds.num_episodes, ds.num_frames, ds.stats) == (0, 0, {})


def test_writer_never_overwrites_data_whose_meta_is_gone(tmp_path: Path) -> None:
    write_toy(tmp_path, 1)
    (tmp_path / INFO_PATH).unlink()
    with pytest.raises(DatasetError, match="refusing to overwrite"):
        DatasetWriter(tmp_path, FPS, "toy", FEATURES)
    assert pq.read_metadata(tmp_path / DATA_000).num_rows == 1


def test_appending_after_reopen_continues_the_indices(tmp_path: Path) -> None:
    write_toy(tmp_path, 2)
    write_toy(tmp_path, 3)
    ds = load_dataset(tmp_path)
    assert ds.num_episodes == 5
    for i in range(5):
        assert_toy_episode(ds, i)
    assert ds.episode_meta(2)["dataset_from_index"] == toy_length(0) + toy_length(1)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"fps": 30}, "fps"),
        ({"robot_type": "other"}, "robot_type"),
        ({"features": {**FEATURES, "action": (3,)}}, "features.action"),
        ({"features": {**FEATURES, "observation.extra": (1,)}}, "features.observation.extra"),
        ({"spec": toy_spec()}, "reflexlab_spec"),
        ({"chunks_size": 10}, "chunks_size"),
    ],
)
def test_reopen_refuses_a_different_dataset_naming_the_field(tmp_path: Path, change: dict, field: str) -> None:
    write_toy(tmp_path, 1)
    args = {"fps": FPS, "robot_type": "toy", "features": FEATURES, **change}
    with pytest.raises(DatasetError) as err:
        DatasetWriter(tmp_path, **args)
    assert err.value.key == field and field in str(err.value) and str(tmp_path) in str(err.value)
    DatasetWriter(tmp_path, FPS, "toy", FEATURES).close()  # the refusal released the lock


def test_reopen_refuses_a_different_spec_naming_its_field(tmp_path: Path) -> None:
    write_toy(tmp_path, 1, spec=toy_spec())
    with pytest.raises(DatasetError) as err:
        DatasetWriter(tmp_path, FPS, "toy", FEATURES, spec=toy_spec(("a0", "wrist")))
    assert err.value.key == "reflexlab_spec.action.names"


def test_files_roll_over_at_the_size_cap_and_chunks_at_chunks_size(tmp_path: Path) -> None:
    write_toy(tmp_path, 5, data_files_size_in_mb=0.0001, chunks_size=2)  # every episode passes a 100-byte cap
    ds = load_dataset(tmp_path)
    files = [(ds.episode_meta(i)["data/chunk_index"], ds.episode_meta(i)["data/file_index"]) for i in range(5)]
    assert files == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    assert all((tmp_path / DATA_PATH.format(chunk_index=c, file_index=f)).exists() for c, f in files)

    shared = tmp_path / "shared"
    write_toy(shared, 10, data_files_size_in_mb=0.005)  # a file is ~4.5 kB of overhead + ~0.1 kB per episode
    write_toy(shared, 6, data_files_size_in_mb=0.005)
    ds = load_dataset(shared)
    per_file: dict[int, int] = {}
    for i in range(ds.num_episodes):
        assert_toy_episode(ds, i)
        file = ds.episode_meta(i)["data/file_index"]
        per_file[file] = per_file.get(file, 0) + 1
    assert len(per_file) > 1 and max(per_file.values()) > 1, per_file


# --- writer refusals ---------------------------------------------------------------------------------------------
def frame_with(**changes: object) -> dict[str, object]:
    return {**toy_frame(0, 0), **changes}


@pytest.mark.parametrize(
    ("frame", "kwargs", "key"),
    [
        (frame_with(action=np.array([0.0, np.nan])), {}, "action"),
        (frame_with(**{"observation.state": np.array([np.inf, 0.0, 0.0])}), {}, "observation.state"),
        (frame_with(action=np.array([1e39, 0.0])), {}, "action"),
        (frame_with(action=np.zeros(3)), {}, "action"),
        (frame_with(action=np.zeros((2, 1))), {}, "action"),
        ({k: v for k, v in toy_frame(0, 0).items() if k != "observation.environment_state"}, {}, None),
        (frame_with(**{"observation.typo": np.zeros(1)}), {}, "observation.typo"),
        (frame_with(), {"reward": float("nan")}, "next.reward"),
    ],
)
def test_writer_refuses_bad_frames_naming_the_key(tmp_path: Path, frame: dict, kwargs: dict, key: str | None) -> None:
    key = key or "observation.environment_state"
    with DatasetWriter(tmp_path, FPS, "toy", FEATURES) as writer:
        record_toy_episode(writer)
        with pytest.raises(DatasetError) as err:
            writer.add_frame(frame, **kwargs)
        assert (err.value.key, err.value.episode) == (key, 1)
        assert key in str(err.value) and "episode 1" in str(err.value)
    assert load_dataset(tmp_path).num_episodes == 1


def test_writer_refuses_empty_episodes_and_broken_episode_structure(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path, FPS, "toy", FEATURES) as writer:
        with pytest.raises(DatasetError, match="zero-length") as err:
            writer.save_episode("task")
        assert err.value.episode == 0
        writer.add_frame(toy_frame(0, 0), measured_timestamp=1.0)
        with pytest.raises(DatasetError) as err:
            writer.add_frame(toy_frame(0, 1), measured_timestamp=0.75)
        assert (err.value.key, err.value.episode) == ("measured_timestamp", 0)
        assert "frame 1 was measured at 0.75 s, not after frame 0's 1.0 s" in str(err.value)
        writer.add_frame(toy_frame(0, 1), measured_timestamp=1.5, terminated=True)
        with pytest.raises(DatasetError, match="terminated"):
            writer.add_frame(toy_frame(0, 2), measured_timestamp=2.0)
        with pytest.raises(DatasetError) as err:
            writer.save_episode("task", {"length": 3})
        assert err.value.key == "length"
        with pytest.raises(DatasetError) as err:
            writer.save_episode("task", {"note": [1, 2]})
        assert err.value.key == "note"
        assert writer.save_episode("task", {"note": "ok"}) == 0  # refused saves kept the frames
        writer.add_frame(toy_frame(1, 0))
        with pytest.raises(DatasetError) as err:
            writer.save_episode("task", {"note": 3})  # the column holds strings
        assert (err.value.key, err.value.episode) == ("note", 1)
        writer.discard_episode()
        with pytest.raises(DatasetError, match="unsaved"), DatasetWriter(tmp_path / "b", FPS, "toy", FEATURES) as other:
            other.add_frame(toy_frame(0, 0))
    ds = load_dataset(tmp_path)
    assert ds.num_episodes == 1 and ds.episode_meta(0)["note"] == "ok"
    np.testing.assert_array_equal(ds.episode(0)["next.done"], [False, True])
    with pytest.raises(DatasetError) as err:
        DatasetWriter(tmp_path, FPS, "toy", {"observation.state": (3,)})
    assert err.value.key == "action"


def test_exception_inside_the_writer_discards_the_episode_and_one_writer_at_a_time(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), DatasetWriter(tmp_path, FPS, "toy", FEATURES) as writer:
        record_toy_episode(writer)
        writer.add_frame(toy_frame(1, 0))
        with pytest.raises(DatasetError, match="another DatasetWriter"):
            DatasetWriter(tmp_path, FPS, "toy", FEATURES)
        raise RuntimeError("robot fell over")
    assert load_dataset(tmp_path).num_episodes == 1


def test_a_lock_shared_with_a_dying_writers_forked_child_is_waited_for_not_refused(tmp_path: Path) -> None:
    """A writer killed while forking (ffmpeg's Popen with a preexec_fn) leaves its flock with the child until that
    child execs or exits. Here a real forked child holds the writer's lock 0.3 s after the writer let go: the next
    writer waits for it (`LOCK_GRACE_S`); a child that outlives the grace is another writer, refused by name."""
    for hold_s, taken in ((0.3, True), (LOCK_GRACE_S + 1.0, False)):
        root = tmp_path / f"held{hold_s}"
        root.mkdir()
        handle = lock_dataset(root)
        child = os.fork()
        if child == 0:  # the child shares the lock's open file description, as a forking writer's child does
            time.sleep(hold_s)
            os._exit(0)
        handle.close()  # the writer is gone; only its child holds the lock now
        start = time.monotonic()
        try:
            if taken:
                lock_dataset(root).close()
                assert 0.1 < time.monotonic() - start < LOCK_GRACE_S
            else:
                with pytest.raises(DatasetError, match="another DatasetWriter"):
                    lock_dataset(root)
                assert time.monotonic() - start >= LOCK_GRACE_S
        finally:
            os.waitpid(child, 0)


# --- reader refusals ---------------------------------------------------------------------------------------------
def edit_parquet(path: Path, edit: Callable[[pa.Table], pa.Table]) -> None:
    pq.write_table(edit(pq.read_table(path)), path)


def with_vector_value(table: pa.Table, key: str, row: int, value: float) -> pa.Table:
    column = table.column(key).combine_chunks()
    values = column.flatten().to_numpy().copy()
    values[row * column.type.list_size] = value
    array = pa.FixedSizeListArray.from_arrays(pa.array(values), column.type.list_size)
    return table.set_column(table.schema.get_field_index(key), key, array)


def with_column(table: pa.Table, key: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(key), key, values)


def edit_episode(root: Path, episode: int, **changes: int | None) -> None:
    rows = pq.read_table(root / EPISODES_PATH).to_pylist()
    rows[episode].update(changes)
    pq.write_table(pa.Table.from_pylist(rows), root / EPISODES_PATH)


def edit_info(root: Path, edit: Callable[[dict], None]) -> None:
    info = json.loads((root / INFO_PATH).read_text())
    edit(info)
    (root / INFO_PATH).write_text(json.dumps(info))


# Toy episodes 0, 1, 2 have 1, 2, 3 frames: rows 0 | 1-2 | 3-5 of one data file.
CORRUPTIONS: dict[str, tuple[Callable[[Path], None], int | None, str | None]] = {
    "column deleted": (lambda r: edit_parquet(r / DATA_000, lambda t: t.drop_columns(["action"])), 0, "action"),
    "unknown column": (
        lambda r: edit_parquet(r / DATA_000, lambda t: t.append_column("extra", pa.array([0.0] * 6))),
        0,
        "extra",
    ),
    "NaN action": (
        lambda r: edit_parquet(r / DATA_000, lambda t: with_vector_value(t, "action", 2, np.nan)),
        1,
        "action",
    ),
    "inf observation": (
        lambda r: edit_parquet(
            r / DATA_000, lambda t: with_vector_value(t, "observation.environment_state", 4, np.inf)
        ),
        2,
        "observation.environment_state",
    ),
    "wrong shape": (
        lambda r: edit_parquet(
            r / DATA_000, lambda t: with_column(t, "action", pa.array([[0.0] * 3] * 6, pa.list_(pa.float32(), 3)))
        ),
        0,
        "action",
    ),
    "zero-length episode": (lambda r: edit_episode(r, 1, length=0, dataset_to_index=1), 1, "length"),
    "range gap": (lambda r: edit_episode(r, 2, dataset_from_index=4, dataset_to_index=7), 2, "dataset_from_index"),
    "null in episodes meta": (lambda r: edit_episode(r, 1, length=None), 1, "length"),
    "length disagrees with range": (lambda r: edit_episode(r, 1, length=3), 1, "dataset_to_index"),
    "rows disagree with meta": (
        lambda r: edit_parquet(r / DATA_000, lambda t: with_column(t, "index", pa.array([0, 1, 2, 3, 5, 4]))),
        2,
        "index",
    ),
    "rows missing": (lambda r: edit_parquet(r / DATA_000, lambda t: t.slice(0, 4)), 2, None),
    "garbage data file": (lambda r: (r / DATA_000).write_bytes(b"PAR1 not really"), 0, None),
    "feature missing from info": (
        lambda r: edit_info(r, lambda i: i["features"].pop("next.success")),
        None,
        "next.success",
    ),
    "info key missing": (lambda r: edit_info(r, lambda i: i.pop("total_frames")), None, "total_frames"),
    "info.json missing": (lambda r: (r / INFO_PATH).unlink(), None, None),
    "stats.json unreadable": (lambda r: (r / STATS_PATH).write_text("{"), None, None),
    "tasks missing": (lambda r: (r / TASKS_PATH).unlink(), None, None),
    "episodes missing": (lambda r: (r / EPISODES_PATH).unlink(), None, None),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_load_refuses_corrupt_datasets_naming_episode_and_key(tmp_path: Path, name: str) -> None:
    corrupt, episode, key = CORRUPTIONS[name]
    write_toy(tmp_path, 3)
    corrupt(tmp_path)
    with pytest.raises(DatasetError) as err:
        load_dataset(tmp_path)
    assert (err.value.episode, err.value.key) == (episode, key), str(err.value)
    assert str(tmp_path) in str(err.value)
    if episode is not None:
        assert f"episode {episode}" in str(err.value)


# --- crash safety ------------------------------------------------------------------------------------------------
def test_a_crash_window_is_ignored_by_readers_and_cleaned_by_the_next_writer(tmp_path: Path) -> None:
    """Deterministic version of the kill test: the state a crash just before the info.json rename leaves."""
    write_toy(tmp_path, 2)
    committed_info = (tmp_path / INFO_PATH).read_text()
    write_toy(tmp_path, 1)
    (tmp_path / INFO_PATH).write_text(committed_info)  # data, tasks, episodes, stats hold episode 2; info does not
    (tmp_path / "meta/stats.json.tmp").write_text("half a json")
    orphan = tmp_path / DATA_PATH.format(chunk_index=0, file_index=1)
    orphan.write_bytes(b"a roll-over that never committed")

    ds = load_dataset(tmp_path)
    assert (ds.num_episodes, ds.num_frames) == (2, 3)
    assert ds.stats["action"]["count"] == [3]

    with DatasetWriter(tmp_path, FPS, "toy", FEATURES) as writer:
        assert pq.read_metadata(tmp_path / DATA_000).num_rows == 3
        assert pq.read_metadata(tmp_path / EPISODES_PATH).num_rows == 2
        assert json.loads((tmp_path / STATS_PATH).read_text())["action"]["count"] == [3]
        assert not orphan.exists() and not (tmp_path / "meta/stats.json.tmp").exists()
        record_toy_episode(writer)
    ds = load_dataset(tmp_path)
    for i in range(3):
        assert_toy_episode(ds, i)


def test_sigkill_at_random_moments_never_loses_a_saved_episode(tmp_path: Path) -> None:
    """Writers killed mid-episode and mid-save (most of a fast child's time is inside save_episode)."""
    root = tmp_path / "ds"
    child_code = "import sys; from tests.reflexlab.test_dataset import record_until_killed as r; r(*sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rng = random.Random(20261201)
    reported: set[int] = set()
    episodes_before = 0
    for attempt in range(10):
        pause_s = 0.002 if attempt % 3 == 2 else 0.0  # every third child records in "real time": killed mid-episode
        child = subprocess.Popen(
            [sys.executable, "-c", child_code, str(root), str(pause_s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        assert child.stdout is not None
        if child.stdout.readline() != "ready\n":
            child.kill()
            pytest.fail(f"writer child failed to start: {child.communicate()[1]}")
        time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        this_child = {int(line.split()[1]) for line in out.splitlines() if line.startswith("saved ")}
        reported |= this_child

        ds = load_dataset(root)  # as the crash left it, before any writer recovers it
        assert reported <= set(range(ds.num_episodes)), f"attempt {attempt}: saved episodes lost"
        last_reported = max(this_child, default=episodes_before - 1)
        assert ds.num_episodes <= last_reported + 2  # plus at most the one committed but killed before reporting
        episodes_before = ds.num_episodes
        for i in range(ds.num_episodes):
            assert_toy_episode(ds, i)
    assert len(reported) > 30, "the children saved too little for the test to mean anything"

    write_toy(root, 1)
    ds = load_dataset(root)
    for i in range(ds.num_episodes):
        assert_toy_episode(ds, i)
    rows = sum(pq.read_metadata(p).num_rows for p in (root / "data").rglob("*.parquet"))
    assert rows == ds.num_frames and pq.read_metadata(root / EPISODES_PATH).num_rows == ds.num_episodes
    assert not list(root.rglob("*.tmp"))


APPENDER = """
import sys
import numpy as np
from reflexlab.dataset import DatasetWriter
with DatasetWriter(sys.argv[1], 10, "toy", {"observation.state": (40,), "action": (2,)}) as writer:
    for episode in range(150):
        for t in range(50):
            writer.add_frame({"observation.state": np.full(40, episode + t / 100), "action": np.zeros(2)})
        writer.save_episode("task")
"""


def test_a_reader_beside_a_live_writer_reads_every_committed_episode(tmp_path: Path) -> None:
    """A learner reads the dataset its actor is appending to: every load sees a consistent committed state.

    Each save replaces the data and meta files by rename; a reader that opened a file twice (pyarrow does, for the
    footer and then the pages, when given a path) failed ~2 % of loads with "Page was smaller than expected".
    """
    root = tmp_path / "live"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = subprocess.Popen([sys.executable, "-c", APPENDER, str(root)], env=env)
    loads = 0
    try:
        while writer.poll() is None:
            if not (root / INFO_PATH).exists():
                continue
            ds = load_dataset(root)
            for i in range(ds.num_episodes):
                np.testing.assert_allclose(ds.episode(i)["observation.state"][:, 0], i + np.arange(50) / 100, rtol=1e-6)
            loads += 1
    finally:
        writer.kill()
        writer.wait()
    assert loads >= 20, f"only {loads} loads overlapped the writer: the test proved little"
