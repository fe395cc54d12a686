"""Episodes on disk: reflexlab's one episode format, in the LeRobot v3 layout, written crash-safe.

Demos, teleop sessions, interventions and RL rollouts all become episodes of one `Dataset`, so training,
evaluation and LeRobot's own tools read a single format::

    meta/info.json                            fps, robot_type, features, totals, paths; ours: reflexlab_spec,
                                              reflexlab_version
    meta/stats.json                           mean/std/min/max/count of every feature over all frames
    meta/tasks.parquet                        task_index, task
    meta/episodes/chunk-000/file-000.parquet  one row per episode: data file, global index range, success, metadata
    data/chunk-CCC/file-FFF.parquet           per-step rows of many episodes, each file at most data_files_size_in_mb
    videos/KEY/chunk-CCC/file-FFF.mp4         one camera's frames of ONE episode (file index = episode index within
                                              its chunk): h264 yuv420p, frame i is step i, stamped i / fps

Cameras. Camera features (``videos=`` of `DatasetWriter`, LeRobot's ``dtype: "video"``) are (H, W, 3) uint8 RGB
frames, encoded while the episode records: each frame goes straight into an ffmpeg process that writes a temporary
MP4, so a long episode never sits in RAM. h264/yuv420p because every player, browser, PyAV and torchcodec decode
it; GOP 2 (as LeRobot) because training reads frames at random. yuv420p is lossy and halves chroma resolution, so
depth images (which need exact 16-bit values) are not supported: that would need a lossless codec (FFV1 gray16le
in MKV, or PNG files), which LeRobot's video path does not read. A camera frame that did not arrive is given as
``None``: the previous frame is encoded again (video frame i stays step i) and the step's ``is_dropped.KEY`` column
says so; the episodes parquet counts them per episode in ``videos/KEY/dropped_frames``. `Dataset.video_frames`
reads frames by step. LeRobot instead looks a step's frame up at ``from_timestamp + timestamp``, which agrees only
while the ``timestamp`` column stays within its 1e-4 s tolerance of frame_index / fps (the default timestamps do).
stats.json holds no camera statistics yet: a LeRobot policy that normalises images by dataset stats needs them.

Crash-safety protocol. A robot session can die at any instant (SIGKILL, power cut, an e-stop that cuts the PC),
and a day of demonstrations must not die with it: an episode is complete on disk or absent. Parquet cannot be
appended in place (its footer sits at the end of the file) and many episodes share one data file, so a save never
edits a file, it *replaces* files, in an order that makes every intermediate state readable:

1. Frames of the episode being recorded live only in memory, camera frames only in a ``.tmp`` MP4 that no meta file
   references. Dying mid-episode loses that episode and nothing else.
2. ``save_episode`` first finishes each camera's encoder, fsyncs its temp MP4 and renames it to its final name, then
   writes the new version of the current data file (its committed rows plus the new episode, or a
   fresh file when the size cap would be exceeded) to ``<name>.tmp``, fsyncs it and renames it over the old one.
   rename(2) is atomic, so the file is the old or the new version, and the old rows are identical in both.
3. It then publishes tasks.parquet, the episodes parquet and stats.json the same way, and info.json LAST. The
   rename of info.json is the commit point: its ``total_episodes`` says how many rows of the episodes parquet exist,
   and everything those rows point at was fsynced before it.
4. Readers trust only info.json, the first ``total_episodes`` rows of the episodes parquet and the first
   ``total_tasks`` rows of tasks.parquet (both only ever grow by appending rows), and read data rows only through
   the index ranges those rows list. A crash between steps therefore leaves only ignorable debris: rows after the
   last committed episode, a data or video file nobody references, one extra meta row, a ``.tmp`` file, or a
   stats.json one episode ahead (the reader recomputes the stats from the committed rows while it validates them).
5. A writer opening a dataset takes an exclusive lock (it must never delete a live writer's temp files), then
   recovers: removes ``.tmp`` files and unreferenced data and video files, truncates orphan rows and re-publishes the
   meta files from the committed state, so that other tools, which know nothing of commit points, see a clean
   dataset. The writer creates each temp MP4 itself and hands ffmpeg only its descriptor, so an encoder orphaned by
   a killed recorder writes into a file recovery has already unlinked and can never re-create one.

Disk full. An ENOSPC/EDQUOT/EFBIG during ``save_episode`` raises a `DatasetError` saying so; what was written is
debris by the rules above, the dataset is as before and the frames stay buffered: free space and save again. A
camera's video cannot be kept that way (its frames are already in the encoder): when its encoder hits a full disk,
the episode's video is lost, and the error says to free space, ``discard_episode()`` and record again.

Cost: each save rewrites the current data file (at most ``data_files_size_in_mb``); lower the cap when logging
many short episodes at a high rate.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import json
import math
import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import TracebackType
from typing import IO, Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from reflexlab import __version__
from reflexlab.spec import Spec, SpecMismatchError

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_PATH = "meta/episodes/chunk-000/file-000.parquet"
CHUNKS_SIZE = 1000
DATA_FILES_SIZE_IN_MB = 100.0
REQUIRED_VECTORS = ("observation.state", "action")
VIDEO_FILES_SIZE_IN_MB = 200.0
TEMP_SUFFIX = ".tmp"
LOCK_NAME = ".writer.lock"
DROPPED_PREFIX = "is_dropped."  # + video key: the per-step "this camera frame did not arrive" column
# The encoding (see the module docstring); CRF 18 is near visually lossless, "veryfast" keeps up with cameras.
VIDEO_CODEC = "h264"
VIDEO_PIX_FMT = "yuv420p"
_X264_ARGS = ("-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-g", "2", "-pix_fmt", VIDEO_PIX_FMT)
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

# Per-step scalar columns (LeRobot's, then ours: RL end flags, interventions, which policy acted) and their dtypes.
STEP_COLUMNS: dict[str, str] = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
    "next.reward": "float32",
    "next.done": "bool",
    "next.terminated": "bool",
    "next.truncated": "bool",
    "next.success": "bool",
    "is_intervention": "bool",
    "policy_version": "int64",
}
# Columns of the episodes parquet that the format defines; any other column is a caller's per-episode metadata.
EPISODE_COLUMNS: dict[str, pa.DataType] = {
    "episode_index": pa.int64(),
    "tasks": pa.list_(pa.string()),
    "length": pa.int64(),
    "data/chunk_index": pa.int64(),
    "data/file_index": pa.int64(),
    "dataset_from_index": pa.int64(),
    "dataset_to_index": pa.int64(),
    "meta/episodes/chunk_index": pa.int64(),
    "meta/episodes/file_index": pa.int64(),
    "success": pa.bool_(),
}
_ARROW_TYPES = {"float32": pa.float32(), "int64": pa.int64(), "bool": pa.bool_()}
_FLOAT_STEP_COLUMNS = ("timestamp", "next.reward")
_INFO_KEYS = ("codebase_version", "fps", "features", "data_path", "chunks_size", "total_episodes", "total_frames")
_DATA_FILE = re.compile(r"chunk-(\d+)/file-(\d+)\.parquet$")
_VIDEO_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")

FileId = tuple[int, int]  # (chunk_index, file_index)


class DatasetError(ValueError):
    """A dataset on disk, or data offered to a writer, is not valid; says where (path, episode, key) and why."""

    def __init__(self, path: Path | str, message: str, *, episode: int | None = None, key: str | None = None) -> None:
        self.path = Path(path)
        self.episode = episode
        self.key = key
        where = [f"dataset {self.path}"]
        if episode is not None:
            where.append(f"episode {episode}")
        if key is not None:
            where.append(f"key {key!r}")
        super().__init__(f"{', '.join(where)}: {message}")


# --- stats -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Moments:
    """Count, mean, sum of squared deviations, min and max of one feature.

    Mergeable (Chan et al.'s parallel variance), so the writer updates all-frame stats per episode without re-reading
    the data, and the reader builds them file by file while it validates.
    """

    count: int
    mean: np.ndarray
    m2: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> _Moments:
        v = values.astype(np.float64).reshape(len(values), -1)
        mean = v.mean(axis=0)
        return cls(len(v), mean, ((v - mean) ** 2).sum(axis=0), v.min(axis=0), v.max(axis=0))

    def merge(self, other: _Moments) -> _Moments:
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / n)
        return _Moments(n, mean, m2, np.minimum(self.low, other.low), np.maximum(self.high, other.high))

    def to_json(self) -> dict[str, list[float]]:
        std = np.sqrt(self.m2 / self.count)
        return {
            "mean": self.mean.tolist(),
            "std": std.tolist(),
            "min": self.low.tolist(),
            "max": self.high.tolist(),
            "count": [self.count],
        }


def _merge_stats(a: dict[str, _Moments], b: dict[str, _Moments]) -> dict[str, _Moments]:
    return {k: a[k].merge(m) if k in a else m for k, m in b.items()}


def _stats_json(stats: dict[str, _Moments]) -> dict[str, dict[str, list[float]]]:
    return {k: m.to_json() for k, m in stats.items()}


# --- features and schema -----------------------------------------------------------------------------------------
def _features_info(
    vectors: dict[str, tuple[int, ...]], videos: dict[str, tuple[int, ...]], fps: float, spec: Spec | None
) -> dict[str, dict[str, Any]]:
    """info.json ``features``: the caller's float vectors and cameras, then the per-step columns, LeRobot style."""
    features: dict[str, dict[str, Any]] = {}
    for name, shape in vectors.items():
        names = list(spec.action.names) if spec is not None and name == "action" else None
        features[name] = {"dtype": "float32", "shape": list(shape), "names": names}
    for name, (height, width, channels) in videos.items():
        features[name] = {
            "dtype": "video",
            "shape": [height, width, channels],
            "names": ["height", "width", "channels"],
            "info": {
                "video.height": height,
                "video.width": width,
                "video.codec": VIDEO_CODEC,
                "video.pix_fmt": VIDEO_PIX_FMT,
                "video.is_depth_map": False,
                "video.fps": fps,
                "video.channels": channels,
                "has_audio": False,
            },
        }
    for name, dtype in _step_columns(videos).items():
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    return features


def _vectors_of(features: dict[str, dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v["shape"]) for k, v in features.items() if v.get("dtype") == "float32" and k not in STEP_COLUMNS}


def _videos_of(features: dict[str, dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v["shape"]) for k, v in features.items() if v.get("dtype") == "video"}


def _step_columns(videos: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """The per-step scalar columns of a dataset with these cameras: the fixed ones plus one drop flag per camera."""
    return {**STEP_COLUMNS, **{DROPPED_PREFIX + key: "bool" for key in videos}}


def _video_columns(videos: dict[str, tuple[int, ...]]) -> dict[str, pa.DataType]:
    """Episodes-parquet columns locating each camera's file (LeRobot's) and counting its dropped frames (ours)."""
    columns: dict[str, pa.DataType] = {}
    for key in videos:
        for name, kind in (
            ("chunk_index", pa.int64()),
            ("file_index", pa.int64()),
            ("from_timestamp", pa.float64()),
            ("to_timestamp", pa.float64()),
            ("dropped_frames", pa.int64()),
        ):
            columns[f"videos/{key}/{name}"] = kind
    return columns


def _schema(vectors: dict[str, tuple[int, ...]], videos: dict[str, tuple[int, ...]]) -> pa.Schema:
    """Vectors as fixed-size float32 lists (their length is part of the type, so a wrong shape cannot hide)."""
    fields = [pa.field(k, pa.list_(pa.float32(), shape[0])) for k, shape in vectors.items()]
    fields += [pa.field(k, _ARROW_TYPES[dtype]) for k, dtype in _step_columns(videos).items()]
    return pa.schema(fields)


def _check_declared(
    root: Path, vectors: dict[str, tuple[int, ...]], videos: dict[str, tuple[int, ...]], spec: Spec | None
) -> None:
    for key in REQUIRED_VECTORS:
        if key not in vectors:
            raise DatasetError(root, "every dataset needs this vector feature", key=key)
    reserved = _step_columns(videos)
    for key, shape in vectors.items():
        if key in reserved:
            raise DatasetError(root, "is a per-step column the format writes itself; pick another name", key=key)
        if len(shape) != 1 or int(shape[0]) < 1:
            raise DatasetError(root, f"features must be non-empty 1-D vectors, got shape {tuple(shape)}", key=key)
    for key, shape in videos.items():
        if key in vectors or key in reserved:
            raise DatasetError(root, "is already a vector or per-step column; pick another name", key=key)
        if not _VIDEO_KEY.fullmatch(key):
            raise DatasetError(
                root, "video keys become folder names: a letter, then letters, digits, '_', '-', '.'", key=key
            )
        if len(shape) != 3 or shape[2] != 3 or min(shape) < 1:
            raise DatasetError(root, f"videos are (height, width, 3) RGB, got shape {tuple(shape)}", key=key)
        if shape[0] % 2 or shape[1] % 2:
            raise DatasetError(root, f"{VIDEO_PIX_FMT} needs an even height and width, got {tuple(shape)}", key=key)
    if spec is not None and tuple(vectors["action"]) != (spec.action.size,):
        raise DatasetError(root, f"shape {vectors['action']} disagrees with the Spec's {spec.action.size} actions")


def _feature_problem(key: str, feature: dict[str, Any], videos: dict[str, tuple[int, ...]]) -> str | None:
    """Why an info.json feature is not one this format stores (images other than RGB videos are not supported)."""
    shape = feature.get("shape")
    steps = _step_columns(videos)
    if key in steps:
        ok = feature.get("dtype") == steps[key] and shape == [1]
        return None if ok else f"must be {steps[key]} of shape [1]"
    if feature.get("dtype") == "video":
        ok = isinstance(shape, list) and len(shape) == 3 and shape[2] == 3 and all(isinstance(n, int) for n in shape)
        return None if ok and min(shape) >= 1 else "a video must have shape [height, width, 3]"
    ok = feature.get("dtype") == "float32" and isinstance(shape, list) and len(shape) == 1 and shape[0] >= 1
    return None if ok else "must be a float32 vector of shape [n] or an RGB video (images and depth are not supported)"


# --- reading columns ---------------------------------------------------------------------------------------------
def _episode_of_row(starts: np.ndarray, episodes: np.ndarray, row: int) -> int:
    return int(episodes[np.searchsorted(starts, row, side="right") - 1])


def _vector_values(column: pa.Array, size: int) -> np.ndarray | str:
    """(rows, size) float32 values of a list column, or why it is not a list of ``size`` floats per row."""
    kind = column.type
    if not (pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return f"column type {kind} is not a list of floats"
    if not pa.types.is_floating(kind.value_type):
        return f"column type {kind} is not a list of floats"
    lengths = pc.fill_null(pc.list_value_length(column), -1).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(lengths != size)
    if len(bad):
        return f"row {int(bad[0])} has {int(lengths[bad[0]])} values, the feature's shape is ({size},)"
    flat = column.flatten()
    if flat.null_count:
        return "holds null values"
    return flat.to_numpy(zero_copy_only=False).astype(np.float32).reshape(len(column), size)


def _scalar_values(column: pa.Array, dtype: str) -> np.ndarray | str:
    """1-D values of a scalar column, or why it is not one."""
    if pa.types.is_nested(column.type):
        return f"column type {column.type} is nested; the feature's shape is (1,)"
    if column.null_count:
        return "holds null values"
    return column.to_numpy(zero_copy_only=False).astype(dtype)


# --- atomic files ------------------------------------------------------------------------------------------------
def _fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable: without this, a power cut can forget the rename."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_parent(path: Path) -> None:
    if not path.parent.exists():
        path.parent.mkdir(parents=True)
        _fsync_dir(path.parent.parent)


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` via a fsynced temp file and rename(2): readers see the old or the new file, never half of one.

    A failed write removes its temp file: after a full disk, that is the space the caller frees first.
    """
    _make_parent(path)
    tmp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _is_disk_full(err: OSError) -> bool:
    """pyarrow's IO errors carry the errno only in their message, hence the second test."""
    return err.errno in DISK_FULL_ERRNOS or any(os.strerror(code) in str(err) for code in DISK_FULL_ERRNOS)


def _write_parquet(path: Path, table: pa.Table) -> None:
    replace_atomically(path, lambda tmp: pq.write_table(table, tmp))


def _write_json(path: Path, value: dict[str, Any]) -> None:
    replace_atomically(path, lambda tmp: tmp.write_text(json.dumps(value, indent=4) + "\n"))


def _tasks_table(tasks: list[str]) -> pa.Table:
    return pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})


def _episodes_table(root: Path, episodes: list[dict[str, Any]], videos: dict[str, tuple[int, ...]]) -> pa.Table:
    """The episodes parquet; metadata columns are typed by their values, and a type clash names its key."""
    kinds = {**EPISODE_COLUMNS, **_video_columns(videos)}
    columns = {name: pa.array([e[name] for e in episodes], kind) for name, kind in kinds.items()}
    extra = dict.fromkeys(k for e in episodes for k in e if k not in kinds)
    for key in extra:
        try:
            columns[key] = pa.array([e.get(key) for e in episodes])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise DatasetError(
                root, f"metadata values of clashing types: {err}", episode=len(episodes) - 1, key=key
            ) from err
    return pa.table(columns)


def _publish_meta(
    root: Path, info: dict[str, Any], tasks: list[str], episodes: pa.Table, stats: dict[str, _Moments]
) -> None:
    """Publish the meta files, info.json last: its rename is the commit point (see the module docstring)."""
    _write_parquet(root / TASKS_PATH, _tasks_table(tasks))
    _write_parquet(root / EPISODES_PATH, episodes)
    _write_json(root / STATS_PATH, _stats_json(stats))
    _write_json(root / INFO_PATH, info)


# --- reading -----------------------------------------------------------------------------------------------------
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
        self._vectors = _vectors_of(self._features)
        self._videos = _videos_of(self._features)
        self._columns = [key for key in self._features if key not in self._videos]  # what the data files hold
        self._check_stats_file()
        self._tasks = self._load_tasks()
        self._episodes = self._load_episodes()
        self._files: dict[FileId, tuple[int, int]] = {}  # file -> (its first episode, its first global index)
        self._moments: dict[str, _Moments] = {}
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
        (equal to stats.json up to rounding, except in the crash window where stats.json is one episode ahead)."""
        return _stats_json(self._moments)

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
        import imageio_ffmpeg  # only camera datasets need ffmpeg

        path = self.video_path(i, key)
        height, width, _ = self._videos[key]
        length = self._episodes[i]["length"]
        first = round(self._episodes[i][f"videos/{key}/from_timestamp"] * self.fps)
        count = 0
        # -nostdin: ffmpeg 9 otherwise prints "Press [q] to stop" into the middle of the stream line
        # that imageio-ffmpeg parses for the frame size, and a short file then fails to open at random.
        reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24", input_params=["-nostdin"])
        try:
            meta = next(reader)
            if tuple(meta["size"]) != (width, height):
                raise self._error(f"{path.name} is {meta['size']} pixels, the feature is {(width, height)}", i, key)
            for raw in itertools.islice(reader, first, first + length):
                yield np.frombuffer(raw, np.uint8).reshape(height, width, 3)
                count += 1
        except (OSError, RuntimeError, StopIteration) as err:
            raise self._error(f"cannot decode {path}: {err}", i, key) from err
        finally:
            reader.close()
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
                _vector_values(column, self._vectors[key][0])
                if key in self._vectors
                else _scalar_values(column, feature["dtype"])
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
            return pq.read_table(path, memory_map=True)
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
        self._check_features(info)
        if info.get("reflexlab_spec") is not None:
            try:
                Spec.from_dict(info["reflexlab_spec"])
            except ValueError as err:
                raise self._error(str(err), key="reflexlab_spec") from err
        return info

    def _check_features(self, info: dict[str, Any]) -> None:
        features = info["features"]
        videos = _videos_of(features)
        for key in (*REQUIRED_VECTORS, *_step_columns(videos)):
            if key not in features:
                raise self._error(f"{INFO_PATH} features lack this key", key=key)
        for key, feature in features.items():
            problem = _feature_problem(key, feature, videos)
            if problem:
                raise self._error(f"{problem}; {INFO_PATH} says {feature}", key=key)
        if videos and "video_path" not in info:
            raise self._error(f"{INFO_PATH} has video features but no video_path", key="video_path")

    def _check_stats_file(self) -> None:
        """stats.json is only checked to exist and parse: `stats` is recomputed from the committed rows anyway."""
        path = self.root / STATS_PATH
        if not path.exists():
            raise self._error(f"missing {STATS_PATH}")
        try:
            stats = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise self._error(f"cannot read {STATS_PATH}: {err}") from err
        if not isinstance(stats, dict):
            raise self._error(f"{STATS_PATH} is not a JSON object")

    def _load_tasks(self) -> list[str]:
        table = self._read_parquet(TASKS_PATH)
        total = int(self._info.get("total_tasks", 0))
        for key in ("task_index", "task"):
            if key not in table.column_names:
                raise self._error(f"{TASKS_PATH} lacks this column", key=key)
        if table.num_rows < total:
            raise self._error(f"{TASKS_PATH} has {table.num_rows} rows, info.json says {total} tasks")
        rows = table.slice(0, total).to_pylist()
        if [r["task_index"] for r in rows] != list(range(total)):
            raise self._error(f"{TASKS_PATH} task_index is not 0..{total - 1}", key="task_index")
        return [r["task"] for r in rows]

    def _load_episodes(self) -> list[dict[str, Any]]:
        table = self._read_parquet(EPISODES_PATH)
        total = int(self._info["total_episodes"])
        if table.num_rows < total:
            raise self._error(f"{EPISODES_PATH} has {table.num_rows} rows, info.json says {total} episodes")
        table = table.slice(0, total)
        for key in [*EPISODE_COLUMNS, *_video_columns(self._videos)]:
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
        moments = {key: _Moments.of(v) for key, v in values.items()}
        self._moments = _merge_stats(self._moments, moments)

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
            values = _vector_values(column, self._vectors[key][0])
        else:
            values = _scalar_values(column, self._features[key]["dtype"])
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
        bad = np.flatnonzero(same_episode & (np.diff(values["timestamp"]) <= 0))
        if len(bad):
            episode = _episode_of_row(starts, episodes, int(bad[0]) + 1)
            raise self._error("timestamps do not increase", episode=episode, key="timestamp")

    def _file_table(self, file_id: FileId) -> pa.Table:
        """One data file at a time is kept (memory-mapped): episodes are mostly read in order."""
        if self._cache is None or self._cache[0] != file_id:
            table = self._read_parquet(self._data_file(file_id), episode=self._files[file_id][0])
            self._cache = (file_id, table)
        return self._cache[1]


def load_dataset(root: Path | str) -> Dataset:
    """Open and validate the dataset at ``root`` (raises `DatasetError` naming what is wrong)."""
    return Dataset(root)


# --- writing -----------------------------------------------------------------------------------------------------
def _lock(root: Path) -> IO[bytes]:
    """One writer per dataset: recovery deletes temp files and truncates the last data file, which would destroy a
    live writer's save in progress. The kernel drops a flock when its process dies, so a crash leaves no stale lock."""
    handle = open(root / LOCK_NAME, "ab")  # noqa: SIM115 - held open for the writer's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DatasetError(root, "another DatasetWriter has this dataset open") from None
    return handle


def _remove_temp_files(root: Path) -> None:
    for folder in (root / "meta", root / "data", root / "videos"):
        for path in folder.rglob(f"*{TEMP_SUFFIX}"):
            path.unlink()


def _data_files(root: Path) -> dict[FileId, Path]:
    files = {}
    for path in (root / "data").glob("chunk-*/file-*.parquet"):
        match = _DATA_FILE.search(path.as_posix())
        if match:
            files[int(match[1]), int(match[2])] = path
    return files


def _video_files(root: Path) -> list[Path]:
    return list((root / "videos").glob("*/chunk-*/file-*.mp4"))


def _video_file(episode: int, key: str, chunks_size: int) -> str:
    """One MP4 per episode and camera: file index = the episode's place in its chunk."""
    return VIDEO_PATH.format(video_key=key, chunk_index=episode // chunks_size, file_index=episode % chunks_size)


class _EncoderError(Exception):
    """A camera's encoder failed; ``disk_full`` when it could not write its output for lack of space."""

    def __init__(self, detail: str, disk_full: bool) -> None:
        super().__init__(detail)
        self.disk_full = disk_full


class _VideoEncoder:
    """One camera's frames of the episode being recorded, streamed through ffmpeg into a temporary MP4.

    The writer creates the temp file and passes ffmpeg only its descriptor (as ``/dev/fd/N``; Linux, like the
    flock): an encoder orphaned by a killed recorder then writes into that inode, which recovery unlinks, and can
    never re-create a temp file after the next writer cleaned up. ffmpeg runs in its own process group, so a Ctrl-C
    aimed at the recorder does not kill the encoder of an episode that is about to be saved. Its stderr goes to a
    memory file (no pipe to drain, no disk needed to report a full disk).
    """

    def __init__(self, tmp: Path, shape: tuple[int, ...], fps: float) -> None:
        import imageio_ffmpeg  # the ffmpeg binary; only camera datasets need it

        _make_parent(tmp)
        self.tmp = tmp
        self._out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._log = os.memfd_create("ffmpeg-stderr", os.MFD_CLOEXEC)
        height, width, _ = shape
        command = [
            imageio_ffmpeg.get_ffmpeg_exe(),
            *("-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24"),
            *("-s", f"{width}x{height}", "-r", str(Fraction(fps).limit_denominator()), "-i", "pipe:0", "-an"),
            *_X264_ARGS,
            *("-f", "mp4", "-y", f"/dev/fd/{self._out}"),
        ]
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            pass_fds=(self._out,),
            process_group=0,
        )

    def write(self, frame: np.ndarray) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(memoryview(frame).cast("B"))
        except OSError:  # a broken pipe: ffmpeg died, its stderr says why
            raise self._failure() from None

    def finish(self) -> None:
        """Flush the encoder and fsync the temp file; raises `_EncoderError` when the MP4 could not be finished."""
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):  # flushing into a dead ffmpeg; its exit status below says why
            self._process.stdin.close()
        if self._process.wait() != 0:
            raise self._failure()
        try:
            os.fsync(self._out)
        except OSError as err:
            raise _EncoderError(f"fsync of {self.tmp.name}: {err}", _is_disk_full(err)) from err
        self._close_files()

    def abort(self) -> None:
        """Stop ffmpeg and delete the temp file (a discarded or failed episode)."""
        if self._process.poll() is None:
            self._process.kill()
        if self._process.stdin is not None:
            with contextlib.suppress(OSError):  # the pipe's reader is already gone
                self._process.stdin.close()
        self._process.wait()
        self._close_files()
        self.tmp.unlink(missing_ok=True)

    def _failure(self) -> _EncoderError:
        status = self._process.wait()
        lines = os.pread(self._log, 8192, 0).decode(errors="replace").strip().splitlines() or ["no message"]
        full = [line for line in lines if any(os.strerror(code) in line for code in DISK_FULL_ERRNOS)]
        disk_full = status == -signal.SIGXFSZ or bool(full)
        return _EncoderError(f"ffmpeg exited with status {status}: {(full or lines)[0]}", disk_full)

    def _close_files(self) -> None:
        for fd in (self._out, self._log):
            if fd >= 0:
                os.close(fd)
        self._out = self._log = -1


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


class DatasetWriter:
    """Records episodes frame by frame into the dataset at ``root``, creating it or appending to it.

    Opening an existing dataset first recovers it from any crash, then refuses, naming the field, when fps,
    robot_type, features, the Spec or the file layout differ from what is stored: one dataset whose episodes mean
    different things is worse than two datasets. Frames are validated as they arrive (shape, finiteness, increasing
    timestamps), so a bad sensor reading is caught at the step that produced it, not at training time.

    Use as a context manager. Leaving through an exception discards the unsaved episode (it is absent, as after a
    crash); leaving normally with unsaved frames is an error, because silently dropping a demonstration is worse.

    ``features`` are float vectors, name -> (n,); ``videos`` are cameras, name -> (height, width, 3), recorded as
    MP4 (see the module docstring). Camera names conventionally start with ``observation.images.``.
    """

    def __init__(
        self,
        root: Path | str,
        fps: float,
        robot_type: str,
        features: dict[str, tuple[int, ...]],
        spec: Spec | None = None,
        *,
        videos: dict[str, tuple[int, int, int]] | None = None,
        data_files_size_in_mb: float | None = None,
        chunks_size: int | None = None,
    ) -> None:
        self.root = Path(root)
        self._vectors = {key: tuple(int(n) for n in shape) for key, shape in features.items()}
        self._videos = {key: tuple(int(n) for n in shape) for key, shape in (videos or {}).items()}
        _check_declared(self.root, self._vectors, self._videos, spec)
        if not (math.isfinite(fps) and fps > 0):
            raise DatasetError(self.root, f"must be positive and finite, got {fps}", key="fps")
        self._schema = _schema(self._vectors, self._videos)
        self._pending = self._empty_pending()
        # The episode being recorded, per camera: its encoder, the last frame (re-encoded for a dropped one).
        self._encoders: dict[str, _VideoEncoder] = {}
        self._last_images: dict[str, np.ndarray] = {}
        self._video_failure: tuple[str, str] | None = None  # (key, message) once an encoder failed
        self._videos_placed = False  # a failed save already renamed this episode's videos into place
        layout = {"chunks_size": chunks_size, "data_files_size_in_mb": data_files_size_in_mb}
        info_fps = int(fps) if float(fps).is_integer() else float(fps)
        video_layout = {"video_path": VIDEO_PATH, "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB}
        wanted = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type,
            "fps": info_fps,
            "features": _features_info(self._vectors, self._videos, info_fps, spec),
            "data_path": DATA_PATH,
            **(video_layout if self._videos else {}),
            "chunks_size": CHUNKS_SIZE if chunks_size is None else chunks_size,
            "data_files_size_in_mb": DATA_FILES_SIZE_IN_MB if data_files_size_in_mb is None else data_files_size_in_mb,
            "total_episodes": 0,
            "total_frames": 0,
            "total_tasks": 0,
            "splits": {"train": "0:0"},
            "reflexlab_spec": None if spec is None else spec.to_dict(),
            "reflexlab_version": __version__,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock: IO[bytes] | None = _lock(self.root)
        try:
            _remove_temp_files(self.root)
            if (self.root / INFO_PATH).exists():
                self._open_existing(wanted, spec, [key for key, value in layout.items() if value is not None])
            else:
                self._create(wanted)
        except BaseException:
            self._lock.close()
            self._lock = None
            raise

    # public ------------------------------------------------------------------------------------------------------
    @property
    def num_episodes(self) -> int:
        """Saved (committed) episodes; also the index the episode being recorded will get."""
        return len(self._episodes)

    @property
    def num_frames(self) -> int:
        """Saved (committed) frames."""
        return int(self._info["total_frames"])

    def add_frame(
        self,
        frame: dict[str, np.ndarray | None],
        *,
        reward: float = 0.0,
        terminated: bool = False,
        truncated: bool = False,
        success: bool = False,
        is_intervention: bool = False,
        policy_version: int = 0,
        timestamp: float | None = None,
    ) -> None:
        """Buffer one step: ``frame`` holds every declared vector and camera; the keywords describe the step's outcome.

        A camera's value is an (H, W, 3) uint8 RGB array, or ``None`` when the camera delivered no frame for this step
        (the previous frame is encoded again and ``is_dropped.<camera>`` marks the step). ``timestamp`` (s) defaults
        to frame_index / fps. A terminated or truncated step must be the episode's last.
        """
        self._check_open()
        episode = len(self._episodes)
        self._check_recording(episode)
        frame_index = len(self._pending["timestamp"])
        if frame_index and (self._pending["next.terminated"][-1] or self._pending["next.truncated"][-1]):
            raise DatasetError(
                self.root, "frame after a terminated/truncated step; save_episode() first", episode=episode
            )
        for key in frame:
            if key not in self._vectors and key not in self._videos:
                declared = ", ".join([*self._vectors, *self._videos])
                raise DatasetError(self.root, f"not a feature of this dataset ({declared})", episode=episode, key=key)
        vectors = {key: self._checked_vector(frame.get(key), key, episode) for key in self._vectors}
        images = {key: self._checked_image(frame, key, episode) for key in self._videos}
        scalars = {
            "timestamp": self._checked_timestamp(
                frame_index / self._fps if timestamp is None else timestamp, episode, frame_index
            ),
            "next.reward": self._checked_finite(reward, "next.reward", episode),
            "next.terminated": bool(terminated),
            "next.truncated": bool(truncated),
            "next.success": bool(success),
            "is_intervention": bool(is_intervention),
            "policy_version": int(policy_version),
            **{DROPPED_PREFIX + key: image is None for key, image in images.items()},
        }
        for key, image in images.items():
            self._encode(key, image, episode)
        for key, value in {**vectors, **scalars}.items():
            self._pending[key].append(value)

    def save_episode(self, task: str, metadata: dict[str, Any] | None = None) -> int:
        """Commit the buffered frames as one episode and return its index (see the module docstring for the order).

        ``metadata``: per-episode bool/int/float/str values stored as columns of the episodes parquet. If this raises,
        the dataset is unchanged and the frames stay buffered, so the save can be retried (after freeing space, when
        the error says the disk is full) -- except when a camera's encoder failed: then the error says to discard.
        """
        self._check_open()
        index = len(self._episodes)
        self._check_recording(index, saving=True)
        length = len(self._pending["timestamp"])
        if length == 0:
            raise DatasetError(self.root, "refusing to save a zero-length episode; add frames first", episode=index)
        if not isinstance(task, str) or not task:
            raise DatasetError(self.root, f"must be a non-empty string, got {task!r}", episode=index, key="task")
        tasks = self._tasks if task in self._tasks else [*self._tasks, task]
        columns = self._episode_columns(index, tasks.index(task))
        frames = pa.Table.from_arrays([_to_arrow(columns[f.name], f.type) for f in self._schema], schema=self._schema)
        file_id, file_table = self._place(frames)
        start = self.num_frames
        row = {
            "episode_index": index,
            "tasks": [task],
            "length": length,
            "data/chunk_index": file_id[0],
            "data/file_index": file_id[1],
            "dataset_from_index": start,
            "dataset_to_index": start + length,
            "meta/episodes/chunk_index": 0,
            "meta/episodes/file_index": 0,
            "success": bool(columns["next.success"].any()),
            **self._video_row(index, columns),
            **self._checked_metadata(metadata or {}, index),
        }
        episodes = [*self._episodes, row]
        # before any write: a metadata type clash changes nothing
        episodes_table = _episodes_table(self.root, episodes, self._videos)
        stats = _merge_stats(self._stats, {key: _Moments.of(values) for key, values in columns.items()})
        info = {
            **self._info,
            "total_episodes": index + 1,
            "total_frames": start + length,
            "total_tasks": len(tasks),
            "splits": {"train": f"0:{index + 1}"},
        }
        if self._videos:
            info["total_videos"] = (index + 1) * len(self._videos)
        path = self.root / DATA_PATH.format(chunk_index=file_id[0], file_index=file_id[1])
        try:
            self._place_videos(index)
            _write_parquet(path, file_table)
            _publish_meta(self.root, info, tasks, episodes_table, stats)
        except OSError as err:
            if not _is_disk_full(err):
                raise
            raise DatasetError(
                self.root,
                f"disk full ({err}); nothing was committed and the {length} frames are still buffered: "
                "free space, then call save_episode() again",
                episode=index,
            ) from err
        self._info, self._tasks, self._episodes, self._stats = info, tasks, episodes, stats
        self._file, self._file_table, self._file_bytes = file_id, file_table, path.stat().st_size
        self._reset_episode()
        return index

    def discard_episode(self) -> None:
        """Drop the buffered frames (a failed demo, a reset): nothing of them reaches the disk."""
        for encoder in self._encoders.values():
            encoder.abort()
        if self._videos_placed:  # renamed into place by a save that then failed: unreferenced, so remove now
            for key in self._videos:
                (self.root / _video_file(len(self._episodes), key, self._info["chunks_size"])).unlink(missing_ok=True)
        self._reset_episode()

    def close(self) -> None:
        """Release the dataset; raises if frames were left unsaved (they are dropped, and the caller should know)."""
        if self._lock is None:
            return
        unsaved = len(self._pending["timestamp"])
        self.discard_episode()
        self._lock.close()
        self._lock = None
        if unsaved:
            raise DatasetError(
                self.root,
                f"closed with {unsaved} unsaved frames; call save_episode() or discard_episode() first",
                episode=len(self._episodes),
            )

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.discard_episode()
        self.close()

    # opening and recovery ----------------------------------------------------------------------------------------
    @property
    def _fps(self) -> float:
        return float(self._info["fps"])

    def _create(self, info: dict[str, Any]) -> None:
        """Publish an empty dataset right away, so the folder is a valid dataset from the moment a writer exists."""
        if _data_files(self.root) or _video_files(self.root):
            raise DatasetError(
                self.root,
                f"has data or video files but no {INFO_PATH}; refusing to overwrite them (restore the meta folder)",
            )
        self._info, self._tasks, self._episodes, self._stats = info, [], [], {}
        self._file, self._file_table, self._file_bytes = (0, 0), self._schema.empty_table(), 0
        _publish_meta(self.root, info, [], _episodes_table(self.root, [], self._videos), {})

    def _open_existing(self, wanted: dict[str, Any], spec: Spec | None, layout_keys: list[str]) -> None:
        stored = Dataset(self.root)
        self._check_matches(stored._info, wanted, spec, layout_keys)
        self._info = {**stored._info, "reflexlab_version": __version__}
        self._tasks, self._episodes, self._stats = stored._tasks, stored._episodes, stored._moments
        self._file = stored._file_of(len(self._episodes) - 1) if self._episodes else (0, 0)
        self._recover({stored.video_path(i, key) for i in range(len(stored)) for key in self._videos})

    def _check_matches(
        self, stored: dict[str, Any], wanted: dict[str, Any], spec: Spec | None, keys: list[str]
    ) -> None:
        for key in ("fps", "robot_type", "data_path", *(["video_path"] if self._videos else []), *keys):
            if not _same(stored.get(key), wanted[key]):
                raise DatasetError(
                    self.root, f"the dataset has {stored.get(key)!r}, this writer was given {wanted[key]!r}", key=key
                )
        for have, given in (
            (_vectors_of(stored["features"]), self._vectors),
            (_videos_of(stored["features"]), self._videos),
        ):
            for key in dict.fromkeys([*have, *given]):
                if have.get(key) != given.get(key):
                    raise DatasetError(
                        self.root,
                        f"the dataset's shape is {have.get(key)}, this writer was given {given.get(key)}",
                        key=f"features.{key}",
                    )
        stored_spec = stored.get("reflexlab_spec")
        if (stored_spec is None) != (spec is None):
            says = "has a Spec and this writer none" if spec is None else "has no Spec and this writer has one"
            raise DatasetError(self.root, f"the dataset {says}", key="reflexlab_spec")
        if spec is not None:
            try:
                Spec.from_dict(stored_spec).check_compatible(spec, context="dataset vs writer")
            except SpecMismatchError as err:
                raise DatasetError(self.root, str(err), key=f"reflexlab_spec.{err.field}") from err

    def _recover(self, videos: set[Path]) -> None:
        """Remove what a crash left past the commit point, so tools that ignore our commit rules see clean data.

        ``videos``: the committed episodes' video files; any other MP4 is a crashed save's.
        """
        for path in _video_files(self.root):
            if path not in videos:
                path.unlink()
        committed = sum(
            e["length"] for e in self._episodes if (e["data/chunk_index"], e["data/file_index"]) == self._file
        )
        self._file_table, self._file_bytes = self._schema.empty_table(), 0
        for file_id, path in _data_files(self.root).items():
            if file_id > self._file or committed == 0:
                path.unlink()
            elif file_id == self._file:
                table = pq.read_table(path)
                if table.num_rows > committed:
                    table = table.slice(0, committed)
                    _write_parquet(path, table)
                self._file_table = self._conform(table)
                self._file_bytes = path.stat().st_size
        episodes = _episodes_table(self.root, self._episodes, self._videos)
        _publish_meta(self.root, self._info, self._tasks, episodes, self._stats)

    def _conform(self, table: pa.Table) -> pa.Table:
        """The stored rows in this writer's schema (a file written by another tool may type its vectors loosely)."""
        try:
            return table.select(self._schema.names).cast(self._schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
            raise DatasetError(self.root, f"cannot append to data file {self._file}: {err}") from err

    # per-step checks ---------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._lock is None:
            raise DatasetError(self.root, "this DatasetWriter is closed")

    def _check_recording(self, episode: int, *, saving: bool = False) -> None:
        """Refuse to go on with an episode whose video is lost, or whose videos a failed save already finished."""
        if self._video_failure is not None:
            key, message = self._video_failure
            raise DatasetError(self.root, message, episode=episode, key=key)
        if self._videos_placed and not saving:
            raise DatasetError(
                self.root,
                "a failed save_episode() already finished this episode's videos: save again or discard_episode()",
                episode=episode,
            )

    def _checked_image(self, frame: dict[str, np.ndarray | None], key: str, episode: int) -> np.ndarray | None:
        if key not in frame:
            raise DatasetError(
                self.root, "missing from the frame (pass None if the camera dropped it)", episode=episode, key=key
            )
        image = frame[key]
        if image is None:
            return None
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.shape != self._videos[key]:
            raise DatasetError(
                self.root,
                f"{image.dtype} image of shape {image.shape}, the camera's is uint8 {self._videos[key]} (RGB)",
                episode=episode,
                key=key,
            )
        return np.ascontiguousarray(image)

    def _checked_vector(self, value: Any, key: str, episode: int) -> np.ndarray:
        if value is None:
            raise DatasetError(self.root, "missing from the frame", episode=episode, key=key)
        try:
            with np.errstate(over="ignore"):
                array = np.array(value, dtype=np.float32)  # a copy: callers reuse their buffers
        except (TypeError, ValueError) as err:
            raise DatasetError(self.root, f"not numeric: {err}", episode=episode, key=key) from err
        if array.shape != self._vectors[key]:
            raise DatasetError(
                self.root, f"shape {array.shape}, the feature's is {self._vectors[key]}", episode=episode, key=key
            )
        bad = np.flatnonzero(~np.isfinite(array))
        if len(bad):
            raise DatasetError(
                self.root, f"NaN or inf at position {int(bad[0])} (in float32)", episode=episode, key=key
            )
        return array

    def _checked_finite(self, value: float, key: str, episode: int) -> float:
        with np.errstate(over="ignore"):
            value32 = np.float32(value)
        if not np.isfinite(value32):
            raise DatasetError(self.root, f"{value} is not finite in float32", episode=episode, key=key)
        return float(value32)

    def _checked_timestamp(self, value: float, episode: int, frame_index: int) -> float:
        stamp = self._checked_finite(value, "timestamp", episode)
        previous = self._pending["timestamp"][-1] if self._pending["timestamp"] else None
        if previous is not None and stamp <= previous:
            raise DatasetError(
                self.root,
                f"frame {frame_index} has timestamp {stamp} s, not after frame {frame_index - 1}'s {previous} s "
                "(in float32): a clock went backwards or a step was recorded twice",
                episode=episode,
                key="timestamp",
            )
        return stamp

    def _checked_metadata(self, metadata: dict[str, Any], episode: int) -> dict[str, Any]:
        checked = {}
        for key, value in metadata.items():
            if not isinstance(key, str) or key in EPISODE_COLUMNS or key in _video_columns(self._videos):
                raise DatasetError(
                    self.root,
                    "metadata keys must be strings other than the format's columns",
                    episode=episode,
                    key=str(key),
                )
            plain = value.item() if isinstance(value, np.generic) else value
            if not isinstance(plain, (bool, int, float, str)):
                raise DatasetError(
                    self.root,
                    f"metadata must be bool, int, float or str, got {type(value).__name__}",
                    episode=episode,
                    key=key,
                )
            checked[key] = plain
        return checked

    # building the episode ----------------------------------------------------------------------------------------
    def _empty_pending(self) -> dict[str, list[Any]]:
        keys = [*self._vectors, "timestamp", "next.reward", "next.terminated", "next.truncated", "next.success"]
        dropped = [DROPPED_PREFIX + key for key in self._videos]
        return {key: [] for key in [*keys, "is_intervention", "policy_version", *dropped]}

    def _reset_episode(self) -> None:
        self._pending = self._empty_pending()
        self._encoders, self._last_images = {}, {}
        self._video_failure, self._videos_placed = None, False

    # cameras -----------------------------------------------------------------------------------------------------
    def _encode(self, key: str, image: np.ndarray | None, episode: int) -> None:
        """Stream one camera frame into its encoder (started at the episode's first frame)."""
        try:
            if key not in self._encoders:
                final = self.root / _video_file(episode, key, self._info["chunks_size"])
                self._encoders[key] = _VideoEncoder(
                    final.with_name(final.name + TEMP_SUFFIX), self._videos[key], self._fps
                )
            if image is not None:
                self._last_images[key] = image.copy()  # the caller may reuse its buffer; a dropped frame repeats this
            held = self._last_images.get(key)
            self._encoders[key].write(np.zeros(self._videos[key], np.uint8) if held is None else held)
        except _EncoderError as err:
            self._fail_video(key, str(err), err.disk_full, episode)
        except OSError as err:  # creating the temp file or starting ffmpeg
            self._fail_video(key, str(err), _is_disk_full(err), episode)

    def _place_videos(self, episode: int) -> None:
        """Finish every camera's temp MP4 (fsynced) and rename it to its final name: step 2 of the commit protocol."""
        if self._videos_placed:
            return
        for key, encoder in self._encoders.items():
            try:
                encoder.finish()
            except _EncoderError as err:
                self._fail_video(key, str(err), err.disk_full, episode)
        for key, encoder in self._encoders.items():
            final = self.root / _video_file(episode, key, self._info["chunks_size"])
            os.replace(encoder.tmp, final)
            _fsync_dir(final.parent)
        self._videos_placed = True

    def _fail_video(self, key: str, detail: str, disk_full: bool, episode: int) -> NoReturn:
        """An encoder failed: its frames are gone and the episode cannot be saved. Free its temp files, say why."""
        for encoder in self._encoders.values():
            encoder.abort()
        self._encoders = {}
        cause = "disk full while encoding" if disk_full else "the video encoder failed for"
        remedy = "free space, then " if disk_full else ""
        message = (
            f"{cause} this camera ({detail}); this episode's video is lost (saved episodes are intact): "
            f"{remedy}call discard_episode() and record the episode again"
        )
        self._video_failure = (key, message)
        raise DatasetError(self.root, message, episode=episode, key=key)

    def _video_row(self, episode: int, columns: dict[str, np.ndarray]) -> dict[str, Any]:
        """The episodes-parquet video columns: this episode's own file per camera, from t = 0."""
        row: dict[str, Any] = {}
        length = len(columns["timestamp"])
        for key in self._videos:
            chunk, file = episode // self._info["chunks_size"], episode % self._info["chunks_size"]
            row[f"videos/{key}/chunk_index"] = chunk
            row[f"videos/{key}/file_index"] = file
            row[f"videos/{key}/from_timestamp"] = 0.0
            row[f"videos/{key}/to_timestamp"] = length / self._fps
            row[f"videos/{key}/dropped_frames"] = int(columns[DROPPED_PREFIX + key].sum())
        return row

    def _episode_columns(self, index: int, task_index: int) -> dict[str, np.ndarray]:
        """Every column of the episode; ``next.done`` also marks the last frame, since the episode ends there."""
        pending = self._pending
        length = len(pending["timestamp"])
        columns = {key: np.stack(pending[key]) for key in self._vectors}
        for key, dtype in _step_columns(self._videos).items():
            if key in pending:
                columns[key] = np.asarray(pending[key], dtype=dtype)
        start = self.num_frames
        columns["frame_index"] = np.arange(length, dtype=np.int64)
        columns["episode_index"] = np.full(length, index, dtype=np.int64)
        columns["index"] = np.arange(start, start + length, dtype=np.int64)
        columns["task_index"] = np.full(length, task_index, dtype=np.int64)
        done = columns["next.terminated"] | columns["next.truncated"]
        done[-1] = True
        columns["next.done"] = done
        return columns

    def _place(self, frames: pa.Table) -> tuple[FileId, pa.Table]:
        """Which data file the episode goes to, and that file's new contents.

        The current file grows until its size on disk plus the episode's in-memory size would pass the cap; then the
        next file starts, and a chunk folder holds at most ``chunks_size`` files (LeRobot's rules).
        """
        if self._file_table.num_rows == 0:
            return self._file, frames
        if self._file_bytes + frames.nbytes <= self._info["data_files_size_in_mb"] * 1024**2:
            return self._file, pa.concat_tables([self._file_table, frames])
        chunk, file = self._file[0], self._file[1] + 1
        if file >= self._info["chunks_size"]:
            chunk, file = chunk + 1, 0
        return (chunk, file), frames


def _to_arrow(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    if pa.types.is_fixed_size_list(kind):
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()), kind.list_size)
    return pa.array(values, kind)
