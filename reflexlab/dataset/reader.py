"""Reading a dataset: `Dataset` validates what is committed and serves episodes, columns and camera frames.

Readers trust only info.json, the first ``total_episodes`` rows of the episodes parquet and the first
``total_tasks`` rows of tasks.parquet, and read data rows only through the index ranges those rows list: whatever a
crashed writer left beyond that is ignored (see `reflexlab.dataset.writer`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reflexlab.dataset.columns import pandas_index, scalar_values, vector_values
from reflexlab.dataset.layout import (
    CODEBASE_VERSION,
    EPISODE_COLUMNS,
    EPISODES_PATH,
    FORMAT_VERSION,
    INFO_PATH,
    LEROBOT_STEP_COLUMNS,
    REQUIRED_VECTORS,
    STATS_PATH,
    TASKS_PATH,
    DatasetError,
    FileId,
    feature_problem,
    step_columns,
    vectors_of,
    video_columns,
    videos_of,
)
from reflexlab.dataset.stats import Moments, merge_stats, stats_json
from reflexlab.dataset.video import decode_frames
from reflexlab.spec import Spec

_INFO_KEYS = ("codebase_version", "fps", "features", "data_path", "chunks_size", "total_episodes", "total_frames")
_FLOAT_STEP_COLUMNS = ("timestamp", "measured_timestamp", "next.reward")
# LeRobot's own tolerance when it looks a step's video frame up at its timestamp (``tolerance_s``).
TIMESTAMP_TOLERANCE_S = 1e-4
# What LeRobot's writer leaves out of a dataset that ours always writes: optional when reading LeRobot's.
_OURS_ONLY_EPISODE_COLUMNS = ("success",)
_OURS_ONLY_VIDEO_COLUMN = "dropped_frames"


def _episode_of_row(starts: np.ndarray, episodes: np.ndarray, row: int) -> int:
    return int(episodes[np.searchsorted(starts, row, side="right") - 1])


class Dataset:
    """A validated, committed dataset: what its meta lists, checked against its data files.

    Loading reads every data file once (one at a time) and refuses, naming the episode and key, anything a training
    run would otherwise trip over much later: missing files or columns, wrong shapes, NaN/inf, empty episodes, index
    ranges that disagree with the rows. Rows and files beyond the committed meta are crash debris and are ignored.
    """

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._info = self._load_info()
        self._features: dict[str, dict[str, Any]] = self._info["features"]
        self._vectors = vectors_of(self._features)
        self._videos = videos_of(self._features)
        self._columns = [key for key in self._features if key not in self._videos]  # what the data files hold
        self._tasks = self._load_tasks()
        self._episodes = self._load_episodes()
        self._files: dict[FileId, tuple[int, int]] = {}  # file -> (its first episode, its first global index)
        self._moments: dict[str, Moments] = self._load_image_stats()
        for file_id, group in itertools.groupby(range(len(self._episodes)), key=self._file_of):
            self._validate_file(file_id, list(group))
        self._cache: tuple[FileId, pa.Table] | None = None

    # public view -------------------------------------------------------------------------------------------------
    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    def __len__(self) -> int:
        return len(self._episodes)

    @property
    def num_frames(self) -> int:
        return int(self._info["total_frames"])

    @property
    def fps(self) -> float:
        return float(self._info["fps"])

    @property
    def robot_type(self) -> str | None:
        return self._info.get("robot_type")

    @property
    def written_by(self) -> str | None:
        """The reflexlab version that last wrote the dataset; None for one written by another tool (LeRobot)."""
        return self._info.get("reflexlab_version")

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        """info.json's features: name -> {dtype, shape, names}, per-step columns included."""
        return dict(self._features)

    @property
    def vector_features(self) -> dict[str, tuple[int, ...]]:
        """The caller-declared float vectors (what a `DatasetWriter` takes as ``features``)."""
        return dict(self._vectors)

    @property
    def video_features(self) -> dict[str, tuple[int, ...]]:
        """The camera features, key -> (height, width, 3) (what a `DatasetWriter` takes as ``videos``)."""
        return dict(self._videos)

    @property
    def spec(self) -> Spec | None:
        stored = self._info.get("reflexlab_spec")
        return None if stored is None else Spec.from_dict(stored)

    @property
    def tasks(self) -> list[str]:
        return list(self._tasks)

    @property
    def stats(self) -> dict[str, dict[str, list[float]]]:
        """mean/std/min/max/count per feature over all committed frames, computed from the data while validating
        (equal to stats.json up to rounding, except in the crash window where stats.json is one episode ahead).

        Cameras' statistics (per channel, (3, 1, 1), in [0, 1]) are stats.json's: recomputing them would decode every
        frame."""
        return stats_json(self._moments, self._videos)

    def episode_meta(self, i: int) -> dict[str, Any]:
        """The episodes-parquet row of episode ``i``; metadata keys this episode did not set are left out."""
        row = self._episodes[self._check_index(i)]
        return {k: v for k, v in row.items() if k in EPISODE_COLUMNS or k.startswith("videos/") or v is not None}

    def video_path(self, i: int, key: str) -> Path:
        """The MP4 holding camera ``key`` of episode ``i`` (frame t is step t, stamped from_timestamp + t / fps)."""
        row = self._episodes[self._check_index(i)]
        if key not in self._videos:
            raise DatasetError(self.root, f"not a video feature ({', '.join(self._videos) or 'none'})", key=key)
        return self._video_of(row, key)

    def video_frames(self, i: int, key: str) -> Iterator[np.ndarray]:
        """Decode camera ``key`` of episode ``i`` one (H, W, 3) uint8 frame at a time, one per step.

        A generator rather than part of `episode`, because a minute of 640x480 at 30 fps is 1.6 GB decoded: callers
        that want every frame in memory write ``np.stack(list(ds.video_frames(i, key)))``. Files holding several
        episodes (LeRobot concatenates them) are read from ``from_timestamp`` on. Raises `DatasetError` if the file
        cannot be decoded or holds fewer frames than the episode has steps.
        """
        path = self.video_path(i, key)
        height, width, _ = self._videos[key]
        length = self._episodes[i]["length"]
        first = round(self._episodes[i][f"videos/{key}/from_timestamp"] * self.fps)
        count = 0
        try:
            for frame in decode_frames(path, height, width, first, length):
                yield frame
                count += 1
        except (OSError, RuntimeError, StopIteration) as err:
            raise self._error(f"cannot decode {path}: {err}", i, key) from err
        if count != length:
            raise self._error(f"{path.name} holds {count} frames from frame {first}, the episode has {length}", i, key)

    def episode(self, i: int) -> dict[str, np.ndarray]:
        """Every per-step column of episode ``i``: vectors as (T, d) float32, the rest as 1-D arrays.

        Camera frames are not included (see `video_frames`).
        """
        row = self._episodes[self._check_index(i)]
        file_id = self._file_of(i)
        start = row["dataset_from_index"] - self._files[file_id][1]
        table = self._file_table(file_id).slice(start, row["length"])
        out: dict[str, np.ndarray] = {}
        for key in self._columns:
            feature = self._features[key]
            column = table.column(key).combine_chunks()
            values = (
                vector_values(column, self._vectors[key][0])
                if key in self._vectors
                else scalar_values(column, feature["dtype"])
            )
            if isinstance(values, str):
                raise DatasetError(self.root, f"{values} (the file changed after loading?)", episode=i, key=key)
            out[key] = values
        return out

    def episodes(self) -> Iterator[dict[str, np.ndarray]]:
        for i in range(len(self._episodes)):
            yield self.episode(i)

    # loading -----------------------------------------------------------------------------------------------------
    def _error(self, message: str, episode: int | None = None, key: str | None = None) -> DatasetError:
        return DatasetError(self.root, message, episode=episode, key=key)

    def _check_index(self, i: int) -> int:
        if not 0 <= i < len(self._episodes):
            raise IndexError(f"dataset {self.root}: no episode {i}; it has {len(self._episodes)}")
        return i

    def _file_of(self, i: int) -> FileId:
        row = self._episodes[i]
        return int(row["data/chunk_index"]), int(row["data/file_index"])

    def _video_of(self, row: dict[str, Any], key: str) -> Path:
        chunk, file = row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"]
        return self.root / self._info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)

    def _data_file(self, file_id: FileId) -> str:
        return self._info["data_path"].format(chunk_index=file_id[0], file_index=file_id[1])

    def _read_parquet(self, relative: str, *, episode: int | None = None) -> pa.Table:
        path = self.root / relative
        if not path.exists():
            raise self._error(f"missing {relative}", episode=episode)
        try:
            # One open file, memory-mapped: a writer may replace the file (rename) while it is read, and a path
            # handed to pyarrow is opened once for the footer and again for the pages, which can then come from
            # two different versions ("Page was smaller than expected"; a learner reading an actor's dataset).
            return pq.read_table(pa.memory_map(str(path)))
        except (OSError, pa.ArrowException) as err:
            raise self._error(f"cannot read {relative}: {err}", episode=episode) from err

    def _load_info(self) -> dict[str, Any]:
        path = self.root / INFO_PATH
        if not path.exists():
            raise self._error(f"missing {INFO_PATH}; not a dataset, or no writer ever opened it")
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise self._error(f"cannot read {INFO_PATH}: {err}") from err
        for key in _INFO_KEYS:
            if key not in info:
                raise self._error(f"{INFO_PATH} lacks this key", key=key)
        if info["codebase_version"] != CODEBASE_VERSION:
            raise self._error(f"codebase_version is {info['codebase_version']!r}, expected {CODEBASE_VERSION!r}")
        self._check_format(info)
        self._check_features(info)
        if info.get("reflexlab_spec") is not None:
            try:
                Spec.from_dict(info["reflexlab_spec"])
            except ValueError as err:
                raise self._error(str(err), key="reflexlab_spec") from err
        return info

    def _check_format(self, info: dict[str, Any]) -> None:
        """Refuse files whose meaning changed since they were written, rather than misread them."""
        if "reflexlab_version" not in info:
            return  # written by LeRobot (or another tool of the v3 layout): read as LeRobot reads it
        stored = info.get("reflexlab_format")
        if stored is None:
            raise self._error(
                f"written by reflexlab {info['reflexlab_version']} in the dataset format before LeRobot could load it "
                "(measured timestamps, one-element lists, camera columns named 'image'); migrate it with "
                f"`reflexlab dataset upgrade {self.root}`",
                key="reflexlab_format",
            )
        if stored != FORMAT_VERSION:
            raise self._error(
                f"reflexlab_format {stored!r}: this reflexlab reads format {FORMAT_VERSION} (a newer reflexlab "
                "wrote it? upgrade reflexlab)",
                key="reflexlab_format",
            )

    def _check_features(self, info: dict[str, Any]) -> None:
        features = info["features"]
        videos = videos_of(features)
        required = step_columns(videos) if "reflexlab_version" in info else LEROBOT_STEP_COLUMNS
        for key in (*REQUIRED_VECTORS, *required):
            if key not in features:
                raise self._error(f"{INFO_PATH} features lack this key", key=key)
        for key, feature in features.items():
            problem = feature_problem(key, feature, videos)
            if problem:
                raise self._error(f"{problem}; {INFO_PATH} says {feature}", key=key)
        if videos and "video_path" not in info:
            raise self._error(f"{INFO_PATH} has video features but no video_path", key="video_path")

    def _load_image_stats(self) -> dict[str, Moments]:
        """The cameras' statistics from stats.json (the rest is recomputed from the committed rows while loading)."""
        path = self.root / STATS_PATH
        if not path.exists():
            raise self._error(f"missing {STATS_PATH}")
        try:
            stats = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise self._error(f"cannot read {STATS_PATH}: {err}") from err
        if not isinstance(stats, dict):
            raise self._error(f"{STATS_PATH} is not a JSON object")
        moments = {}
        for key in self._videos:
            if key not in stats:
                if self._episodes and self.written_by is not None:
                    raise self._error(f"{STATS_PATH} has no statistics for this camera", key=key)
                continue
            try:
                moments[key] = Moments.from_image_json(stats[key])
            except (KeyError, TypeError, ValueError) as err:
                raise self._error(f"{STATS_PATH} holds no per-channel mean/std/min/max/count: {err}", key=key) from err
            if moments[key].mean.shape != (3,):
                raise self._error(f"{STATS_PATH} statistics are not per RGB channel (shape (3, 1, 1))", key=key)
        return moments

    def _load_tasks(self) -> list[str]:
        table = self._read_parquet(TASKS_PATH)
        total = int(self._info.get("total_tasks", 0))
        task_column = pandas_index(table) or "task"  # LeRobot's writer leaves its index unnamed
        for key in ("task_index", task_column):
            if key not in table.column_names:
                raise self._error(f"{TASKS_PATH} lacks this column (the task strings: its pandas index)", key=key)
        if table.num_rows < total:
            raise self._error(f"{TASKS_PATH} has {table.num_rows} rows, info.json says {total} tasks")
        rows = table.slice(0, total).to_pylist()
        if [r["task_index"] for r in rows] != list(range(total)):
            raise self._error(f"{TASKS_PATH} task_index is not 0..{total - 1}", key="task_index")
        return [r[task_column] for r in rows]

    def _load_episodes(self) -> list[dict[str, Any]]:
        table = self._read_parquet(EPISODES_PATH)
        total = int(self._info["total_episodes"])
        if table.num_rows < total:
            raise self._error(f"{EPISODES_PATH} has {table.num_rows} rows, info.json says {total} episodes")
        table = table.slice(0, total)
        required = [*EPISODE_COLUMNS, *video_columns(self._videos)]
        if self.written_by is None:
            required = [
                k for k in required if k not in _OURS_ONLY_EPISODE_COLUMNS and not k.endswith(_OURS_ONLY_VIDEO_COLUMN)
            ]
        for key in required:
            if key not in table.column_names:
                raise self._error(f"{EPISODES_PATH} lacks this column", key=key)
            nulls = np.flatnonzero(table.column(key).is_null().to_numpy(zero_copy_only=False))
            if len(nulls):
                raise self._error(f"null in {EPISODES_PATH}", episode=int(nulls[0]), key=key)
        episodes = table.to_pylist()
        expected_from = 0
        for i, row in enumerate(episodes):
            self._check_episode_row(i, row, expected_from)
            expected_from = row["dataset_to_index"]
        if expected_from != self._info["total_frames"]:
            raise self._error(
                f"the episodes hold {expected_from} frames, info.json says {self._info['total_frames']}",
                key="total_frames",
            )
        return episodes

    def _check_episode_row(self, i: int, row: dict[str, Any], expected_from: int) -> None:
        """Ranges must tile the global index exactly: a gap or overlap means rows would be skipped or read twice."""
        if row["episode_index"] != i:
            raise self._error(f"row {i} of {EPISODES_PATH} says episode {row['episode_index']}", episode=i)
        if row["length"] < 1:
            raise self._error(f"zero-length episode (length {row['length']})", episode=i, key="length")
        if row["dataset_from_index"] != expected_from:
            raise self._error(
                f"starts at index {row['dataset_from_index']}, the previous episode ended at {expected_from}",
                episode=i,
                key="dataset_from_index",
            )
        if row["dataset_to_index"] - row["dataset_from_index"] != row["length"]:
            raise self._error(
                f"index range {row['dataset_from_index']}:{row['dataset_to_index']} disagrees with length "
                f"{row['length']}",
                episode=i,
                key="dataset_to_index",
            )
        if not row["tasks"] or row["tasks"][0] not in self._tasks:
            raise self._error(f"task {row['tasks']} is not in {TASKS_PATH}", episode=i, key="tasks")
        for key in self._videos:
            path = self._video_of(row, key)
            if not path.is_file():
                raise self._error(f"missing {path.relative_to(self.root)}", episode=i, key=key)

    def _validate_file(self, file_id: FileId, group: list[int]) -> None:
        """Check the committed rows of one data file against its episodes and fold them into the stats."""
        first = group[0]
        if file_id in self._files:
            raise self._error(f"{self._data_file(file_id)} also holds earlier, non-adjacent episodes", episode=first)
        base = self._episodes[first]["dataset_from_index"]
        self._files[file_id] = (first, base)
        lengths = np.array([self._episodes[i]["length"] for i in group])
        needed = int(lengths.sum())
        table = self._read_parquet(self._data_file(file_id), episode=first)
        self._check_columns(table, first)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        if table.num_rows < needed:
            short = _episode_of_row(starts, np.array(group), table.num_rows)
            raise self._error(f"data file has {table.num_rows} rows, the episodes need {needed}", episode=short)
        table = table.slice(0, needed)
        values = {key: self._column_values(table, key, starts, group) for key in self._columns}
        self._check_indices(values, base, starts, lengths, group)
        for start, length in zip(starts, lengths, strict=True):  # per episode, as the writer merged them
            episode = {key: Moments.of(v[start : start + length]) for key, v in values.items()}
            self._moments = merge_stats(self._moments, episode)

    def _check_columns(self, table: pa.Table, episode: int) -> None:
        for key in self._columns:
            if key not in table.column_names:
                raise self._error("column missing from its data file", episode=episode, key=key)
        for key in table.column_names:
            if key not in self._columns:
                raise self._error("data column is not a feature in info.json", episode=episode, key=key)

    def _column_values(self, table: pa.Table, key: str, starts: np.ndarray, group: list[int]) -> np.ndarray:
        column = table.column(key).combine_chunks()
        if key in self._vectors:
            values = vector_values(column, self._vectors[key][0])
        else:
            values = scalar_values(column, self._features[key]["dtype"])
        if isinstance(values, str):
            raise self._error(values, episode=group[0], key=key)
        if key in self._vectors or key in _FLOAT_STEP_COLUMNS:
            bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
            if len(bad):
                row = int(bad[0])
                episode = _episode_of_row(starts, np.array(group), row)
                raise self._error(f"NaN or inf in frame {row - int(starts[group.index(episode)])}", episode, key)
        return values

    def _check_indices(
        self, values: dict[str, np.ndarray], base: int, starts: np.ndarray, lengths: np.ndarray, group: list[int]
    ) -> None:
        """The per-row bookkeeping must say what the meta says, else rows would be attributed to wrong episodes."""
        episodes = np.array(group)
        task_of = [self._tasks.index(self._episodes[i]["tasks"][0]) for i in group]
        expected = {
            "index": base + np.arange(int(lengths.sum())),
            "episode_index": np.repeat(episodes, lengths),
            "frame_index": np.arange(int(lengths.sum())) - np.repeat(starts, lengths),
            "task_index": np.repeat(task_of, lengths),
        }
        for key, want in expected.items():
            bad = np.flatnonzero(values[key] != want)
            if len(bad):
                episode = _episode_of_row(starts, episodes, int(bad[0]))
                raise self._error(f"row says {values[key][bad[0]]}, the meta says {want[bad[0]]}", episode, key)
        same_episode = expected["episode_index"][1:] == expected["episode_index"][:-1]
        for key in ("timestamp", "measured_timestamp"):
            bad = np.flatnonzero(same_episode & (np.diff(values[key]) <= 0)) if key in values else []
            if len(bad):
                episode = _episode_of_row(starts, episodes, int(bad[0]) + 1)
                raise self._error("timestamps do not increase", episode=episode, key=key)
        drift = np.abs(values["timestamp"] - expected["frame_index"] / self.fps)
        bad = np.flatnonzero(drift > TIMESTAMP_TOLERANCE_S)
        if len(bad):
            row = int(bad[0])
            episode = _episode_of_row(starts, episodes, row)
            raise self._error(
                f"frame {expected['frame_index'][row]} has timestamp {values['timestamp'][row]} s, not frame_index / "
                f"fps = {expected['frame_index'][row] / self.fps} s (within {TIMESTAMP_TOLERANCE_S} s): video frames "
                "are looked up at it, so they would pair with the wrong steps",
                episode,
                "timestamp",
            )

    def _file_table(self, file_id: FileId) -> pa.Table:
        """One data file at a time is kept (memory-mapped): episodes are mostly read in order."""
        if self._cache is None or self._cache[0] != file_id:
            table = self._read_parquet(self._data_file(file_id), episode=self._files[file_id][0])
            self._cache = (file_id, table)
        return self._cache[1]


def load_dataset(root: Path | str) -> Dataset:
    """Open and validate the dataset at ``root`` (raises `DatasetError` naming what is wrong)."""
    return Dataset(root)
