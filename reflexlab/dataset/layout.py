"""What an episode dataset is on disk: the LeRobot v3 layout, its columns and features, and `DatasetError`.

Demos, teleop sessions, interventions and RL rollouts all become episodes of one dataset, so training, evaluation
and LeRobot's own tools read a single format::

    meta/info.json                            fps, robot_type, features, totals, paths; ours: reflexlab_spec,
                                              reflexlab_version
    meta/stats.json                           mean/std/min/max/count of every feature over all frames
    meta/tasks.parquet                        task_index, task
    meta/episodes/chunk-000/file-000.parquet  one row per episode: data file, global index range, success, metadata
    data/chunk-CCC/file-FFF.parquet           per-step rows of many episodes, each file at most data_files_size_in_mb
    videos/KEY/chunk-CCC/file-FFF.mp4         one camera's frames of ONE episode (file index = episode index within
                                              its chunk): h264 yuv420p, frame i is step i, stamped i / fps

How these files are written without a crash ever leaving a half-written dataset is told in
`reflexlab.dataset.writer`; how camera frames are encoded, in `reflexlab.dataset.video`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from reflexlab.spec import Spec

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
LOCK_NAME = ".writer.lock"
DROPPED_PREFIX = "is_dropped."  # + video key: the per-step "this camera frame did not arrive" column
# How cameras are encoded (why: see `reflexlab.dataset.video`).
VIDEO_CODEC = "h264"
VIDEO_PIX_FMT = "yuv420p"

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


def features_info(
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
    for name, dtype in step_columns(videos).items():
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    return features


def vectors_of(features: dict[str, dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    """The caller's float vectors among info.json ``features``, name -> shape (per-step columns left out)."""
    return {k: tuple(v["shape"]) for k, v in features.items() if v.get("dtype") == "float32" and k not in STEP_COLUMNS}


def videos_of(features: dict[str, dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    """The cameras among info.json ``features``, name -> (height, width, 3)."""
    return {k: tuple(v["shape"]) for k, v in features.items() if v.get("dtype") == "video"}


def step_columns(videos: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """The per-step scalar columns of a dataset with these cameras: the fixed ones plus one drop flag per camera."""
    return {**STEP_COLUMNS, **{DROPPED_PREFIX + key: "bool" for key in videos}}


def video_columns(videos: dict[str, tuple[int, ...]]) -> dict[str, pa.DataType]:
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


def data_schema(vectors: dict[str, tuple[int, ...]], videos: dict[str, tuple[int, ...]]) -> pa.Schema:
    """Vectors as fixed-size float32 lists (their length is part of the type, so a wrong shape cannot hide)."""
    fields = [pa.field(k, pa.list_(pa.float32(), shape[0])) for k, shape in vectors.items()]
    fields += [pa.field(k, _ARROW_TYPES[dtype]) for k, dtype in step_columns(videos).items()]
    return pa.schema(fields)


def check_declared(
    root: Path, vectors: dict[str, tuple[int, ...]], videos: dict[str, tuple[int, ...]], spec: Spec | None
) -> None:
    """Refuse, before anything touches the disk, features a writer was given that this format cannot store."""
    for key in REQUIRED_VECTORS:
        if key not in vectors:
            raise DatasetError(root, "every dataset needs this vector feature", key=key)
    reserved = step_columns(videos)
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


def feature_problem(key: str, feature: dict[str, Any], videos: dict[str, tuple[int, ...]]) -> str | None:
    """Why an info.json feature is not one this format stores (images other than RGB videos are not supported)."""
    shape = feature.get("shape")
    steps = step_columns(videos)
    if key in steps:
        ok = feature.get("dtype") == steps[key] and shape == [1]
        return None if ok else f"must be {steps[key]} of shape [1]"
    if feature.get("dtype") == "video":
        ok = isinstance(shape, list) and len(shape) == 3 and shape[2] == 3 and all(isinstance(n, int) for n in shape)
        return None if ok and min(shape) >= 1 else "a video must have shape [height, width, 3]"
    ok = feature.get("dtype") == "float32" and isinstance(shape, list) and len(shape) == 1 and shape[0] >= 1
    return None if ok else "must be a float32 vector of shape [n] or an RGB video (images and depth are not supported)"


def video_file(episode: int, key: str, chunks_size: int) -> str:
    """One MP4 per episode and camera: file index = the episode's place in its chunk."""
    return VIDEO_PATH.format(video_key=key, chunk_index=episode // chunks_size, file_index=episode % chunks_size)
