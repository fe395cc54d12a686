"""Writing a dataset: `DatasetWriter` records episodes and commits each one crash-safe.

Crash-safety protocol. A robot session can die at any instant (SIGKILL, power cut, an e-stop that cuts the PC),
and a day of demonstrations must not die with it: an episode is complete on disk or absent. Parquet cannot be
appended in place (its footer sits at the end of the file) and many episodes share one data file, so a save never
edits a file, it *replaces* files, in an order that makes every intermediate state readable:

1. Frames of the episode being recorded live only in memory, camera frames only in a ``.tmp`` MP4 that no meta file
   references (`reflexlab.dataset.episode_buffer`). Dying mid-episode loses that episode and nothing else.
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
   recovers (`reflexlab.dataset.recovery`): removes ``.tmp`` files and unreferenced data and video files, truncates
   orphan rows and re-publishes the meta files from the committed state, so that other tools, which know nothing of
   commit points, see a clean dataset. The writer creates each temp MP4 itself and hands ffmpeg only its
   descriptor, so an encoder orphaned by a killed recorder writes into a file recovery has already unlinked and can
   never re-create one.

Disk full. An ENOSPC/EDQUOT/EFBIG during ``save_episode`` raises a `DatasetError` saying so; what was written is
debris by the rules above, the dataset is as before and the frames stay buffered: free space and save again. A
camera's video cannot be kept that way (its frames are already in the encoder): when its encoder hits a full disk,
the episode's video is lost, and the error says to free space, ``discard_episode()`` and record again.

Cost: each save rewrites the current data file (at most ``data_files_size_in_mb``); lower the cap when logging
many short episodes at a high rate.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np
import pyarrow as pa

from reflexlab import __version__
from reflexlab.dataset.episode_buffer import EpisodeBuffer
from reflexlab.dataset.layout import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_FILES_SIZE_IN_MB,
    DATA_PATH,
    EPISODE_COLUMNS,
    FORMAT_VERSION,
    INFO_PATH,
    VIDEO_FILES_SIZE_IN_MB,
    VIDEO_PATH,
    DatasetError,
    FileId,
    check_declared,
    data_schema,
    features_info,
    vectors_of,
    video_columns,
    videos_of,
)
from reflexlab.dataset.meta import episodes_table, publish_meta, write_parquet
from reflexlab.dataset.reader import Dataset
from reflexlab.dataset.recovery import data_files, lock_dataset, recover_files, remove_temp_files, video_files
from reflexlab.dataset.stats import Moments, merge_stats
from reflexlab.io import is_disk_full
from reflexlab.spec import Spec, SpecMismatchError


def _same(a: Any, b: Any) -> bool:
    """Stored and given settings agree: numbers up to rounding (an fps computed as 1 / dt), anything else exactly."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9)
    return a == b


class DatasetWriter:
    """Records episodes frame by frame into the dataset at ``root``, creating it or appending to it.

    Opening an existing dataset first recovers it from any crash, then refuses, naming the field, when fps,
    robot_type, features, the Spec or the file layout differ from what is stored: one dataset whose episodes mean
    different things is worse than two datasets. Frames are validated as they arrive (shape, finiteness, increasing
    timestamps; see `EpisodeBuffer`), so a bad sensor reading is caught at the step that produced it, not at training
    time.

    Use as a context manager. Leaving through an exception discards the unsaved episode (it is absent, as after a
    crash); leaving normally with unsaved frames is an error, because silently dropping a demonstration is worse.

    ``features`` are float vectors, name -> (n,); ``videos`` are cameras, name -> (height, width, 3), recorded as
    MP4 (see `reflexlab.dataset.video`). Camera names conventionally start with ``observation.images.``.
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
        check_declared(self.root, self._vectors, self._videos, spec)
        if not (math.isfinite(fps) and fps > 0):
            raise DatasetError(self.root, f"must be positive and finite, got {fps}", key="fps")
        self._schema = data_schema(self._vectors, self._videos)
        layout = {"chunks_size": chunks_size, "data_files_size_in_mb": data_files_size_in_mb}
        info_fps = int(fps) if float(fps).is_integer() else float(fps)
        video_layout = {"video_path": VIDEO_PATH, "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB}
        wanted = {
            "codebase_version": CODEBASE_VERSION,
            "robot_type": robot_type,
            "fps": info_fps,
            "features": features_info(self._vectors, self._videos, info_fps, spec),
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
            "reflexlab_format": FORMAT_VERSION,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock: IO[bytes] | None = lock_dataset(self.root)
        try:
            remove_temp_files(self.root)
            if (self.root / INFO_PATH).exists():
                self._open_existing(wanted, spec, [key for key, value in layout.items() if value is not None])
            else:
                self._create(wanted)
        except BaseException:
            self._lock.close()
            self._lock = None
            raise
        self._episode = self._new_episode()

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
        measured_timestamp: float | None = None,
    ) -> None:
        """Buffer one step: ``frame`` holds every declared vector and camera; the keywords describe the step's outcome.

        A camera's value is an (H, W, 3) uint8 RGB array, or ``None`` when the camera delivered no frame for this step
        (the previous frame is encoded again and ``camera.<name>.is_dropped`` marks the step).
        ``measured_timestamp``: when the step was measured, s since the episode start, by the robot's or the sim's
        clock (default frame_index / fps); it must increase. The ``timestamp`` column is always frame_index / fps,
        the time LeRobot looks the step's video frames up at. A terminated or truncated step must be the episode's
        last.
        """
        self._check_open()
        self._episode.add(
            frame,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            success=success,
            is_intervention=is_intervention,
            policy_version=policy_version,
            measured_timestamp=measured_timestamp,
        )

    def save_episode(self, task: str, metadata: dict[str, Any] | None = None) -> int:
        """Commit the buffered frames as one episode and return its index (see the module docstring for the order).

        ``metadata``: per-episode bool/int/float/str values stored as columns of the episodes parquet. If this raises,
        the dataset is unchanged and the frames stay buffered, so the save can be retried (after freeing space, when
        the error says the disk is full) -- except when a camera's encoder failed: then the error says to discard.
        """
        self._check_open()
        index = len(self._episodes)
        episode = self._episode
        episode.check_recording(saving=True)
        length = len(episode)
        if length == 0:
            raise DatasetError(self.root, "refusing to save a zero-length episode; add frames first", episode=index)
        if not isinstance(task, str) or not task:
            raise DatasetError(self.root, f"must be a non-empty string, got {task!r}", episode=index, key="task")
        tasks = self._tasks if task in self._tasks else [*self._tasks, task]
        columns = episode.columns(tasks.index(task), self.num_frames)
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
            **episode.video_row(columns),
            **self._checked_metadata(metadata or {}, index),
        }
        episodes = [*self._episodes, row]
        # before any write: a metadata type clash changes nothing
        episodes_meta = episodes_table(self.root, episodes, self._videos)
        moments = {key: Moments.of(values) for key, values in columns.items()} | episode.image_stats()
        stats = merge_stats(self._stats, moments)
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
            episode.place_videos()
            write_parquet(path, file_table)
            publish_meta(self.root, info, tasks, episodes_meta, stats)
        except OSError as err:
            if not is_disk_full(err):
                raise
            raise DatasetError(
                self.root,
                f"disk full ({err}); nothing was committed and the {length} frames are still buffered: "
                "free space, then call save_episode() again",
                episode=index,
            ) from err
        self._info, self._tasks, self._episodes, self._stats = info, tasks, episodes, stats
        self._file, self._file_table, self._file_bytes = file_id, file_table, path.stat().st_size
        self._episode = self._new_episode()
        return index

    def discard_episode(self) -> None:
        """Drop the buffered frames (a failed demo, a reset): nothing of them reaches the disk."""
        self._episode.discard()
        self._episode = self._new_episode()

    def close(self) -> None:
        """Release the dataset; raises if frames were left unsaved (they are dropped, and the caller should know)."""
        if self._lock is None:
            return
        unsaved = len(self._episode)
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
    def _new_episode(self) -> EpisodeBuffer:
        """A buffer for the next episode to record, whose index is the number of committed episodes."""
        fps, chunks_size = float(self._info["fps"]), self._info["chunks_size"]
        return EpisodeBuffer(self.root, len(self._episodes), self._vectors, self._videos, fps, chunks_size)

    def _create(self, info: dict[str, Any]) -> None:
        """Publish an empty dataset right away, so the folder is a valid dataset from the moment a writer exists."""
        if data_files(self.root) or video_files(self.root):
            raise DatasetError(
                self.root,
                f"has data or video files but no {INFO_PATH}; refusing to overwrite them (restore the meta folder)",
            )
        self._info, self._tasks, self._episodes, self._stats = info, [], [], {}
        self._file, self._file_table, self._file_bytes = (0, 0), self._schema.empty_table(), 0
        publish_meta(self.root, info, [], episodes_table(self.root, [], self._videos), {})

    def _open_existing(self, wanted: dict[str, Any], spec: Spec | None, layout_keys: list[str]) -> None:
        stored = Dataset(self.root)
        if stored.written_by is None:
            raise DatasetError(
                self.root, "was written by another tool (no reflexlab_version in info.json); record into a new folder"
            )
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
            (vectors_of(stored["features"]), self._vectors),
            (videos_of(stored["features"]), self._videos),
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
        """Remove what a crash left past the commit point (see `recover_files`) and re-publish the committed meta.

        ``videos``: the committed episodes' video files; any other MP4 is a crashed save's.
        """
        committed = sum(
            e["length"] for e in self._episodes if (e["data/chunk_index"], e["data/file_index"]) == self._file
        )
        self._file_table, self._file_bytes = recover_files(self.root, videos, self._file, committed, self._schema)
        episodes = episodes_table(self.root, self._episodes, self._videos)
        publish_meta(self.root, self._info, self._tasks, episodes, self._stats)

    # checks ------------------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._lock is None:
            raise DatasetError(self.root, "this DatasetWriter is closed")

    def _checked_metadata(self, metadata: dict[str, Any], episode: int) -> dict[str, Any]:
        checked = {}
        for key, value in metadata.items():
            if not isinstance(key, str) or key in EPISODE_COLUMNS or key in video_columns(self._videos):
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

    # placing the episode -----------------------------------------------------------------------------------------
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
    return pa.array(values.reshape(len(values)), kind)  # a (T, 1) vector becomes a scalar column
