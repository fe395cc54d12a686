"""What an episode dataset is on disk: the LeRobot v3 layout, its columns and features, and `DatasetError`.

Demos, teleop sessions, interventions and RL rollouts all become episodes of one dataset, so training, evaluation
and LeRobot's own tools read a single format::

    meta/info.json                            fps, robot_type, features, totals, paths; ours: reflexlab_spec,
                                              reflexlab_version, reflexlab_format
    meta/stats.json                           mean/std/min/max/count of every feature over all frames; cameras
                                              per channel, shape (3, 1, 1), in [0, 1] (LeRobot's convention)
    meta/tasks.parquet                        task_index, indexed by the task string (pandas index ``task``)
    meta/episodes/chunk-000/file-000.parquet  one row per episode: data file, global index range, success, metadata
    data/chunk-CCC/file-FFF.parquet           per-step rows of many episodes, each file at most data_files_size_in_mb
    videos/KEY/chunk-CCC/file-FFF.mp4         one camera's frames of ONE episode (file index = episode index within
                                              its chunk): h264 yuv420p, frame i is step i, stamped i / fps

LeRobot's loader reads these files as they are, which fixes four rules (each broke it once, issue 21):

* ``timestamp`` is exactly frame_index / fps: LeRobot finds a step's video frame at ``from_timestamp + timestamp``
  within 1e-4 s. The time a step was measured at (robot or sim clock, s since the episode start) is a column of its
  own, ``measured_timestamp``.
* A feature of shape (1,) is a plain scalar column, not a one-element list.
* The task string is the (pandas) index of tasks.parquet: LeRobot takes ``ds[i]["task"]`` from it.
* No key but a camera's contains "image": LeRobot takes every such key for an image. Per-camera columns are named
  ``camera.<name>.*`` (``<name>``: the video key without ``observation.images.``).

Datasets written before these rules (no ``reflexlab_format`` in info.json) are refused by the reader and the writer
with a message naming ``reflexlab dataset upgrade``, which migrates them (`reflexlab.dataset.upgrade`). Datasets
written by LeRobot itself (no ``reflexlab_version``) are read: the RL columns (``next.*``, ``is_intervention``,
``policy_version``, ``measured_timestamp``) are then optional.

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
# Our own revision of what the files mean, in info.json ``reflexlab_format``: 2 = LeRobot-loadable (issue 21); the
# datasets written before it carry no such key (format 1).
FORMAT_VERSION = 2
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
IMAGE_PREFIX = "observation.images."  # LeRobot's convention for camera keys
CAMERA_PREFIX = "camera."  # + camera name + ".<what>": per-camera columns that must not say "image" (see above)
# How cameras are encoded (why: see `reflexlab.dataset.video`).
VIDEO_CODEC = "h264"
VIDEO_PIX_FMT = "yuv420p"

# Per-step scalar columns (LeRobot's, then ours: the measured time, RL end flags, interventions, which policy acted)
# and their dtypes.
LEROBOT_STEP_COLUMNS: dict[str, str] = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}
STEP_COLUMNS: dict[str, str] = {
    **LEROBOT_STEP_COLUMNS,
    "measured_timestamp": "float64",
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
_ARROW_TYPES = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_()}
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


def camera_name(video_key: str) -> str:
    """``observation.images.wrist`` -> ``wrist``: the name in the camera's own columns (``camera.wrist.*``)."""
    return video_key.removeprefix(IMAGE_PREFIX)


def dropped_column(video_key: str) -> str:
    """The per-step "this camera frame did not arrive" flag of a camera (the previous frame was encoded again)."""
    return f"{CAMERA_PREFIX}{camera_name(video_key)}.is_dropped"


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
    return {**STEP_COLUMNS, **{dropped_column(key): "bool" for key in videos}}


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


def arrow_type(shape: tuple[int, ...]) -> pa.DataType:
    """A vector's column type: a fixed-size float32 list (its length is part of the type, so a wrong shape cannot
    hide), or a plain float32 for shape (1,), as LeRobot stores it (its loader cannot cast a one-element list)."""
    return pa.float32() if tuple(shape) == (1,) else pa.list_(pa.float32(), shape[0])


def data_schema(vectors: dict[str, tuple[int, ...]], videos: dict[str, tuple[int, ...]]) -> pa.Schema:
    fields = [pa.field(k, arrow_type(shape)) for k, shape in vectors.items()]
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
        if "image" in key:
            raise DatasetError(
                root,
                "only a camera's key may contain 'image': LeRobot takes every such feature for an image "
                f"(name per-camera values {CAMERA_PREFIX}<camera>.<what>)",
                key=key,
            )
    for key, shape in videos.items():
        if key in vectors or key in reserved:
            raise DatasetError(root, "is already a vector or per-step column; pick another name", key=key)
        if not _VIDEO_KEY.fullmatch(key):
            raise DatasetError(
                root, "video keys become folder names: a letter, then letters, digits, '_', '-', '.'", key=key
            )
        if "image" in dropped_column(key):
            raise DatasetError(
                root,
                f"the camera's name {camera_name(key)!r} contains 'image', which would make its own columns look "
                "like images to LeRobot; rename the camera",
                key=key,
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
