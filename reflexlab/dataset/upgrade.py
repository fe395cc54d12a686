"""Migrating a dataset of format 1 (written before LeRobot could load ours) to format 2: `upgrade_dataset`.

Format 1 (info.json has ``reflexlab_version`` but no ``reflexlab_format``) stored the same episodes with other
meanings, which LeRobot's loader misreads (issue 21; the rules are in `reflexlab.dataset.layout`):

* ``timestamp`` held the measured time since reset (``record``), or frame_index / fps (demos). Format 2 moves those
  values to ``measured_timestamp`` (float64) and sets ``timestamp`` to frame_index / fps. Video frame i was step i in
  format 1 too (the writer encoded one frame per step, a dropped one repeated), so however far the measured clock
  drifted, the videos keep their pairing with the steps and only the column's meaning changes.
* Vectors of shape (1,) were one-element lists; they become plain float32 columns.
* Per-camera columns were named after the camera's key (``is_dropped.observation.images.<name>``, ``record``'s
  ``observation.images.<name>.age_s``), which LeRobot takes for images; they become ``camera.<name>.*``.
* tasks.parquet gets the pandas index LeRobot reads task strings from, and stats.json the cameras' per-channel image
  statistics, computed by decoding every committed frame (as the writer folds in every frame it encodes).

The MP4s are kept byte for byte (hard links, or copies across filesystems): nothing is re-encoded.

Safe against a crash at any instant and against a live writer:

1. The writer's lock is held throughout, so a recording in progress (an older reflexlab's) is refused and none can
   start meanwhile.
2. Only what format 1 committed is read: info.json's totals, the first ``total_episodes`` rows of the episodes
   parquet, the first ``total_tasks`` tasks, data rows through the episodes' index ranges, the committed episodes'
   MP4s. What a crashed writer left beyond that is debris (`reflexlab.dataset.writer`, step 4) and is not carried
   over. The original folder is never written to (but for the lock's empty file), so its backup is exactly what was
   there; files in it that are not the dataset's own (a README) are carried over.
3. The new dataset is built in the sibling ``<root>.upgrading`` (every file fsynced), loaded with `load_dataset`
   and compared with the old values, column by column.
4. Then two renames: ``<root>`` to ``<root>.format1-backup``, ``<root>.upgrading`` to ``<root>``. A crash before the
   first leaves the original untouched (a rerun deletes the half-built folder and starts over); a crash between them
   leaves no ``<root>``, and a rerun finds both folders, verifies again and completes the second rename. Without
   ``keep_backup`` the backup is deleted only once the new dataset is in place.
"""

from __future__ import annotations

import dataclasses
import filecmp
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reflexlab import __version__
from reflexlab.dataset.layout import (
    CAMERA_PREFIX,
    CODEBASE_VERSION,
    EPISODES_PATH,
    FORMAT_VERSION,
    INFO_PATH,
    LOCK_NAME,
    STATS_PATH,
    TASKS_PATH,
    DatasetError,
    FileId,
    camera_name,
    check_declared,
    data_schema,
    dropped_column,
    feature_problem,
    step_columns,
    vectors_of,
    videos_of,
)
from reflexlab.dataset.meta import publish_meta, write_parquet
from reflexlab.dataset.reader import load_dataset
from reflexlab.dataset.recovery import lock_dataset
from reflexlab.dataset.stats import Moments, merge_stats
from reflexlab.dataset.video import decode_frames
from reflexlab.io import TEMP_SUFFIX, fsync_dir, make_parent
from reflexlab.spec import Spec

BACKUP_SUFFIX = ".format1-backup"
STAGING_SUFFIX = ".upgrading"
_FORMAT1_DROPPED_PREFIX = "is_dropped."  # + video key: format 1's per-step "this camera frame did not arrive" flag
# What the upgrade rebuilds from the committed state; every other file in the folder (a README, notes) is carried over.
_REBUILT_FOLDERS = ("data", "videos")
_REBUILT_FILES = (INFO_PATH, STATS_PATH, TASKS_PATH, EPISODES_PATH, LOCK_NAME)
_INFO_KEYS = ("fps", "features", "data_path", "total_episodes", "total_frames")


class NothingToUpgradeError(DatasetError):
    """The dataset is already in the current format."""


@dataclass(frozen=True)
class UpgradeReport:
    """What `upgrade_dataset` did; `to_json` is what ``reflexlab dataset upgrade`` prints."""

    root: Path
    backup: Path | None  # the format-1 original; None once deleted (keep_backup=False)
    written_by: str  # the reflexlab version that wrote the format-1 dataset
    episodes: int
    frames: int
    cameras: tuple[str, ...]
    renamed: dict[str, str]  # format-1 column -> format-2 column
    scalar_columns: tuple[str, ...]  # shape-(1,) vectors now stored as plain float32 columns (format-2 names)
    max_timestamp_drift_s: float  # largest |old timestamp - frame_index / fps|: how far the measured clock was off
    carried_files: tuple[str, ...]  # files beside the dataset's own (a README), kept as they were; relative paths
    resumed: bool  # an upgrade interrupted between its renames was completed

    def to_json(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "upgraded": True,
            "format": FORMAT_VERSION,
            "written_by": self.written_by,
            "episodes": self.episodes,
            "frames": self.frames,
            "cameras": list(self.cameras),
            "renamed": self.renamed,
            "scalar_columns": list(self.scalar_columns),
            "max_timestamp_drift_s": self.max_timestamp_drift_s,
            "carried_files": list(self.carried_files),
            "backup": None if self.backup is None else str(self.backup),
            "resumed": self.resumed,
        }


def upgrade_dataset(root: Path | str, *, keep_backup: bool = True) -> UpgradeReport:
    """Migrate the format-1 dataset at ``root`` to format 2 in place (how, and why that is safe: the module
    docstring); the original is kept at ``<root>.format1-backup`` unless ``keep_backup`` is False.

    Raises `NothingToUpgradeError` for a dataset already at format 2, and `DatasetError` saying why for a folder that
    is not a dataset, a dataset written by another tool (LeRobot's own: read as it is) or by a newer reflexlab, one
    a writer has open, or format-1 data that is inconsistent or that format 2 cannot hold.
    """
    root = Path(root).resolve()
    staging = root.with_name(root.name + STAGING_SUFFIX)
    backup = root.with_name(root.name + BACKUP_SUFFIX)
    if not root.is_dir():
        if staging.is_dir() and backup.is_dir():
            return _resume(root, staging, backup, keep_backup)
        left = f"; {backup} holds the format-1 original of an interrupted upgrade" if backup.is_dir() else ""
        raise DatasetError(root, f"not a dataset: no such folder{left}")
    _format1_info(root, backup)  # refuse before the lock creates its file in the folder
    if backup.exists():
        raise DatasetError(root, f"{backup} already exists (an earlier upgrade's backup?); move it away, then rerun")
    lock = _lock(root)
    try:
        if staging.exists():  # a crashed upgrade's half-built folder: the original was never swapped out
            shutil.rmtree(staging)
        old = _Format1(root, _format1_info(root, backup))  # read again under the lock: a writer may just have saved
        try:
            _build(old, staging)
            report = _verify(old, staging, root, backup)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        os.rename(root, backup)
        os.rename(staging, root)
        fsync_dir(root.parent)
    finally:
        lock.close()
    return _finish(report, keep_backup)


def dataset_format(info: dict[str, Any]) -> int | None:
    """The reflexlab format an info.json declares: 1 when it predates ``reflexlab_format``, None when reflexlab did not
    write it (LeRobot's own datasets, read as they are)."""
    if "reflexlab_version" not in info:
        return None
    stored = info.get("reflexlab_format")
    return 1 if stored is None else stored


# the format-1 dataset -------------------------------------------------------------------------------------------------
def _format1_info(root: Path, backup: Path | None) -> dict[str, Any]:
    """info.json of the dataset at ``root`` if it is one to upgrade; otherwise the error saying why not."""
    path = root / INFO_PATH
    if not path.is_file():
        raise DatasetError(root, f"not a dataset: no {INFO_PATH}")
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DatasetError(root, f"not a dataset: cannot read {INFO_PATH}: {err}") from err
    if not isinstance(info, dict) or info.get("codebase_version") != CODEBASE_VERSION:
        raise DatasetError(root, f"not a LeRobot {CODEBASE_VERSION} dataset (see codebase_version in {INFO_PATH})")
    stored = dataset_format(info)
    if stored is None:
        raise DatasetError(
            root,
            "was not written by reflexlab (no reflexlab_version in info.json; LeRobot's own?): reflexlab reads it as "
            "it is, there is nothing to upgrade",
        )
    if stored == FORMAT_VERSION:
        kept = f"; its format-1 original is kept at {backup}" if backup is not None and backup.exists() else ""
        raise NothingToUpgradeError(root, f"nothing to do: already reflexlab_format {FORMAT_VERSION}{kept}")
    if stored != 1:
        raise DatasetError(
            root, f"reflexlab_format {stored!r} is not one this reflexlab knows ({FORMAT_VERSION}): upgrade reflexlab"
        )
    for key in _INFO_KEYS:
        if key not in info:
            raise DatasetError(root, f"{INFO_PATH} lacks this key", key=key)
    return info


def _lock(root: Path) -> IO[bytes]:
    """The writer's lock (`lock_dataset`), with the error an upgrade's user needs."""
    try:
        return lock_dataset(root)
    except DatasetError as err:
        raise DatasetError(
            root, "a writer has it open (a recording by an older reflexlab?): upgrade it once that has finished"
        ) from err


class _Format1:
    """The committed state of a format-1 dataset, read as its writer defined it, and its format-2 names and features."""

    def __init__(self, root: Path, info: dict[str, Any]) -> None:
        self.root = root
        self.info = info
        self.fps = float(info["fps"])
        old: dict[str, dict[str, Any]] = info["features"]
        self.videos = videos_of(old)
        self.renamed = _renames(old, self.videos)
        self.features: dict[str, dict[str, Any]] = {}  # format 2's info.json features
        for key, feature in old.items():
            if key == "timestamp":  # its meaning changes; its values move to the new column beside it
                self._add_feature(key, "timestamp", feature)
                self._add_feature(key, "measured_timestamp", {"dtype": "float64", "shape": [1], "names": None})
            else:
                self._add_feature(key, self.renamed.get(key, key), feature)
        for key in step_columns(self.videos):
            if key not in self.features:
                raise DatasetError(root, f"{INFO_PATH} features lack this key (format 1's name for it)", key=key)
        for key, feature in self.features.items():
            problem = feature_problem(key, feature, self.videos)
            if problem:
                raise DatasetError(root, f"{problem}; {INFO_PATH} says {feature}", key=key)
        if self.videos and "video_path" not in info:
            raise DatasetError(root, f"{INFO_PATH} has video features but no video_path", key="video_path")
        self.vectors = vectors_of(self.features)  # format-2 names
        spec = info.get("reflexlab_spec")
        check_declared(root, self.vectors, self.videos, None if spec is None else Spec.from_dict(spec))
        total_tasks, total = int(info.get("total_tasks", 0)), int(info["total_episodes"])
        tasks, episodes = self._read(TASKS_PATH), self._read(EPISODES_PATH)
        if "task" not in tasks.column_names or tasks.num_rows < total_tasks:
            raise DatasetError(root, f"{TASKS_PATH} lacks the task column or has fewer than {total_tasks} rows")
        if episodes.num_rows < total:
            raise DatasetError(root, f"{EPISODES_PATH} has {episodes.num_rows} rows, info.json says {total}")
        self.tasks: list[str] = tasks.column("task").to_pylist()[:total_tasks]
        self.episodes = episodes.slice(0, total)  # the committed rows, kept as they are
        self.rows: list[dict[str, Any]] = self.episodes.to_pylist()
        self.files: dict[FileId, list[int]] = {}  # data file -> its committed episodes, in order
        for i, row in enumerate(self.rows):
            self.files.setdefault((row["data/chunk_index"], row["data/file_index"]), []).append(i)

    def _add_feature(self, old_key: str, new_key: str, feature: dict[str, Any]) -> None:
        if new_key in self.features or (new_key != old_key and new_key in self.info["features"]):
            raise DatasetError(self.root, f"format 2 calls it {new_key!r}, a name the dataset already has", key=old_key)
        self.features[new_key] = feature

    def data_file(self, file_id: FileId) -> str:
        return self.info["data_path"].format(chunk_index=file_id[0], file_index=file_id[1])

    def video_file(self, episode: int, key: str) -> str:
        row = self.rows[episode]
        chunk, file = row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"]
        return self.info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)

    def columns(self, file_id: FileId) -> dict[str, np.ndarray]:
        """The committed rows of one data file as format 2's columns (new names, new timestamp), as numpy arrays."""
        relative = self.data_file(file_id)
        needed = sum(self.rows[i]["length"] for i in self.files[file_id])
        table = self._read(relative)
        if table.num_rows < needed:
            raise DatasetError(self.root, f"{relative} has {table.num_rows} rows, its episodes need {needed}")
        table = table.slice(0, needed)  # rows past them are a crashed save's
        out: dict[str, np.ndarray] = {}
        for key in self.info["features"]:
            if key in self.videos:
                continue
            if key not in table.column_names:
                raise DatasetError(self.root, f"column missing from {relative}", key=key)
            column, new = table.column(key).combine_chunks(), self.renamed.get(key, key)
            if new in self.vectors:
                out[new] = self._vector(column, self.vectors[new][0], key)
            else:
                out[new] = self._scalar(column, self.features[new]["dtype"], key)
        out["timestamp"] = (out["frame_index"] / self.fps).astype(np.float32)  # as the format-2 writer computes it
        return out

    def camera_stats(self) -> dict[str, Moments]:
        """Per camera, the image statistics of every committed frame (decoded), checking one frame per step."""
        stats: dict[str, Moments] = {}
        for key, (height, width, _) in self.videos.items():
            for i, row in enumerate(self.rows):
                start, length = round(row[f"videos/{key}/from_timestamp"] * self.fps), row["length"]
                count = 0
                try:
                    for frame in decode_frames(self.root / self.video_file(i, key), height, width, start, length):
                        stats = merge_stats(stats, {key: Moments.of_image(frame)})
                        count += 1
                except (OSError, RuntimeError) as err:
                    raise DatasetError(self.root, f"cannot decode {self.video_file(i, key)}: {err}", i, key) from err
                if count != length:
                    raise DatasetError(
                        self.root,
                        f"its video holds {count} frames from frame {start}, the episode has {length} steps",
                        i,
                        key,
                    )
        return stats

    def _read(self, relative: str) -> pa.Table:
        try:
            return pq.read_table(self.root / relative)
        except (OSError, pa.ArrowException) as err:
            raise DatasetError(self.root, f"cannot read {relative}: {err}") from err

    def _vector(self, column: pa.Array, size: int, key: str) -> np.ndarray:
        kind = column.type
        if not (pa.types.is_fixed_size_list(kind) and kind.list_size == size and pa.types.is_float32(kind.value_type)):
            raise DatasetError(self.root, f"column type {kind}, format 1 wrote fixed_size_list<float>[{size}]", key=key)
        values = column.flatten()  # of the sliced rows only
        if column.null_count or values.null_count:
            raise DatasetError(self.root, "holds null values", key=key)
        return values.to_numpy(zero_copy_only=False).reshape(len(column), size)

    def _scalar(self, column: pa.Array, dtype: str, key: str) -> np.ndarray:
        if pa.types.is_nested(column.type) or column.null_count:
            raise DatasetError(self.root, f"column type {column.type}, {column.null_count} nulls; not {dtype}", key=key)
        return column.to_numpy(zero_copy_only=False).astype(dtype)


def _renames(features: dict[str, Any], videos: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """Format-1 column -> format-2 column, for the columns whose name changed."""
    renamed = {"timestamp": "measured_timestamp"}
    for video in videos:
        renamed[_FORMAT1_DROPPED_PREFIX + video] = dropped_column(video)
        for key in features:
            if key.startswith(video + ".") and key not in videos:  # a per-camera value, e.g. record's age_s
                renamed[key] = f"{CAMERA_PREFIX}{camera_name(video)}.{key.removeprefix(video + '.')}"
    return renamed


# building, checking and swapping in the format-2 dataset --------------------------------------------------------------
def _build(old: _Format1, staging: Path) -> None:
    """Write the format-2 dataset into ``staging``: data, linked videos, carried-over files, then the meta files."""
    staging.mkdir()
    schema = data_schema(old.vectors, old.videos)
    stats: dict[str, Moments] = {}
    for file_id, episodes in old.files.items():
        columns = old.columns(file_id)
        start = 0
        for length in (old.rows[i]["length"] for i in episodes):  # per episode, as the writer merges them
            stats = merge_stats(stats, {key: Moments.of(v[start : start + length]) for key, v in columns.items()})
            start += length
        table = pa.Table.from_arrays([_arrow(columns[f.name], f.type) for f in schema], schema=schema)
        write_parquet(staging / old.data_file(file_id), table)
    stats |= old.camera_stats()
    videos = [old.video_file(i, key) for key in old.videos for i in range(len(old.rows))]
    for relative in [*videos, *_carried_files(old.root)]:
        _link(old.root / relative, staging / relative)
    info = {**old.info, "features": old.features, "reflexlab_version": __version__, "reflexlab_format": FORMAT_VERSION}
    publish_meta(staging, info, old.tasks, old.episodes, stats)
    for folder, _, _ in os.walk(staging):  # every new entry durable before the swap makes the folder the dataset
        fsync_dir(Path(folder))
    fsync_dir(staging.parent)


def _arrow(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A column in format 2's type: a fixed-size list for a vector of size > 1, a plain column otherwise."""
    if pa.types.is_fixed_size_list(kind):
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()), kind.list_size)
    return pa.array(values.reshape(len(values)), kind)


def _carried_files(root: Path) -> list[str]:
    """Files in the folder that are not the dataset's own (a README, notes), as paths relative to ``root``."""
    carried = []
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if path.is_dir() or relative.parts[0] in _REBUILT_FOLDERS or relative.as_posix() in _REBUILT_FILES:
            continue
        if not path.name.endswith(TEMP_SUFFIX):  # a crashed write's temp file
            carried.append(relative.as_posix())
    return carried


def _link(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (a fsynced copy across filesystems): the bytes are never rewritten."""
    make_parent(target)
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
        return
    try:
        os.link(source, target)
    except OSError:  # another filesystem, or one without hard links
        shutil.copyfile(source, target)
        fd = os.open(target, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _verify(old: _Format1, staging: Path, root: Path, backup: Path) -> UpgradeReport:
    """Load the new dataset as every reader will and check that it holds exactly the old data; say what changed."""
    new = load_dataset(staging)
    if (new.num_episodes, new.num_frames, new.tasks) != (len(old.rows), old.info["total_frames"], old.tasks):
        raise DatasetError(staging, "the upgraded dataset's episodes, frames or tasks differ from the format-1 ones")
    if not pq.read_table(staging / EPISODES_PATH).equals(old.episodes):
        raise DatasetError(staging, f"the upgraded {EPISODES_PATH} differs from the format-1 one")
    drift = 0.0
    for file_id, episodes in old.files.items():
        want = old.columns(file_id)
        got = [new.episode(i) for i in episodes]
        for key, values in want.items():
            if not np.array_equal(np.concatenate([g[key] for g in got]).reshape(values.shape), values):
                raise DatasetError(staging, "differs from the format-1 data after upgrading", episodes[0], key)
        drift = max(drift, float(np.abs(want["measured_timestamp"] - want["frame_index"] / old.fps).max()))
    for key in old.videos:
        for i in range(len(old.rows)):
            a, b = old.root / old.video_file(i, key), staging / old.video_file(i, key)
            if not (os.path.samefile(a, b) or filecmp.cmp(a, b, shallow=False)):
                raise DatasetError(staging, "video differs from the format-1 one", episode=i, key=key)
    return UpgradeReport(
        root=root,
        backup=backup,
        written_by=str(old.info["reflexlab_version"]),
        episodes=len(old.rows),
        frames=int(old.info["total_frames"]),
        cameras=tuple(old.videos),
        renamed={k: v for k, v in old.renamed.items() if k in old.info["features"]},
        scalar_columns=tuple(k for k, shape in old.vectors.items() if shape == (1,)),
        max_timestamp_drift_s=drift,
        carried_files=tuple(_carried_files(old.root)),
        resumed=old.root == backup,
    )


def _resume(root: Path, staging: Path, backup: Path, keep_backup: bool) -> UpgradeReport:
    """Complete an upgrade that crashed between its two renames: the original is at ``backup``, the new dataset at
    ``staging``, ``root`` is missing. The new one is checked against the original again before it takes ``root``."""
    info = _format1_info(backup, None)
    lock = _lock(backup)
    try:
        report = _verify(_Format1(backup, info), staging, root, backup)
        os.rename(staging, root)
        fsync_dir(root.parent)
    finally:
        lock.close()
    return _finish(report, keep_backup)


def _finish(report: UpgradeReport, keep_backup: bool) -> UpgradeReport:
    """Delete the backup if asked, only now that the new dataset is in place."""
    if keep_backup or report.backup is None:
        return report
    shutil.rmtree(report.backup)
    return dataclasses.replace(report, backup=None)
