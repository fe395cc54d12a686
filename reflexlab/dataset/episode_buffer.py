"""The episode being recorded: validated step columns in memory, camera frames in temporary MP4s.

Nothing of it is referenced by a meta file until `DatasetWriter.save_episode` commits it, so dying mid-episode loses
that episode and nothing else (step 1 of the protocol in `reflexlab.dataset.writer`). Frames are validated as they
arrive (shape, finiteness, increasing measured times), so a bad sensor reading is caught at the step that produced it,
not at training time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from reflexlab.dataset.layout import DatasetError, dropped_column, step_columns, video_file
from reflexlab.dataset.stats import Moments, merge_stats
from reflexlab.dataset.video import EncoderError, VideoEncoder
from reflexlab.io import TEMP_SUFFIX, fsync_dir, is_disk_full


class EpisodeBuffer:
    """One episode from its first frame until it is saved or discarded; a writer starts a new one after either.

    ``index`` is the episode index it will be saved as (the number of committed episodes), used in error messages
    and to name its video files.
    """

    def __init__(
        self,
        root: Path,
        index: int,
        vectors: dict[str, tuple[int, ...]],
        videos: dict[str, tuple[int, ...]],
        fps: float,
        chunks_size: int,
    ) -> None:
        self.root = root
        self.index = index
        self._vectors = vectors
        self._videos = videos
        self._fps = fps
        self._chunks_size = chunks_size
        keys = [*vectors, "measured_timestamp", "next.reward", "next.terminated", "next.truncated", "next.success"]
        keys += ["is_intervention", "policy_version", *(dropped_column(key) for key in videos)]
        self._pending: dict[str, list[Any]] = {key: [] for key in keys}
        # Per camera: its encoder, the last frame (re-encoded for a dropped one), the statistics of what was encoded.
        self._encoders: dict[str, VideoEncoder] = {}
        self._last_images: dict[str, tuple[np.ndarray, Moments]] = {}
        self._image_stats: dict[str, Moments] = {}
        self._video_failure: tuple[str, str] | None = None  # (key, message) once an encoder failed
        self._videos_placed = False  # a failed save already renamed this episode's videos into place

    def __len__(self) -> int:
        """The frames added so far."""
        return len(self._pending["measured_timestamp"])

    def add(
        self,
        frame: dict[str, np.ndarray | None],
        *,
        reward: float,
        terminated: bool,
        truncated: bool,
        success: bool,
        is_intervention: bool,
        policy_version: int,
        measured_timestamp: float | None,
    ) -> None:
        """Check one step and buffer it (see `DatasetWriter.add_frame`); a refused step leaves the episode as it was."""
        episode = self.index
        self.check_recording()
        frame_index = len(self)
        if frame_index and (self._pending["next.terminated"][-1] or self._pending["next.truncated"][-1]):
            raise DatasetError(
                self.root, "frame after a terminated/truncated step; save_episode() first", episode=episode
            )
        for key in frame:
            if key not in self._vectors and key not in self._videos:
                declared = ", ".join([*self._vectors, *self._videos])
                raise DatasetError(self.root, f"not a feature of this dataset ({declared})", episode=episode, key=key)
        vectors = {key: self._checked_vector(frame.get(key), key) for key in self._vectors}
        images = {key: self._checked_image(frame, key) for key in self._videos}
        scalars = {
            "measured_timestamp": self._checked_timestamp(
                frame_index / self._fps if measured_timestamp is None else measured_timestamp
            ),
            "next.reward": self._checked_finite(reward, "next.reward"),
            "next.terminated": bool(terminated),
            "next.truncated": bool(truncated),
            "next.success": bool(success),
            "is_intervention": bool(is_intervention),
            "policy_version": int(policy_version),
            **{dropped_column(key): image is None for key, image in images.items()},
        }
        for key, image in images.items():
            self._encode(key, image)
        for key, value in {**vectors, **scalars}.items():
            self._pending[key].append(value)

    def check_recording(self, *, saving: bool = False) -> None:
        """Refuse to go on with an episode whose video is lost, or whose videos a failed save already finished."""
        if self._video_failure is not None:
            key, message = self._video_failure
            raise DatasetError(self.root, message, episode=self.index, key=key)
        if self._videos_placed and not saving:
            raise DatasetError(
                self.root,
                "a failed save_episode() already finished this episode's videos: save again or discard_episode()",
                episode=self.index,
            )

    def columns(self, task_index: int, start: int) -> dict[str, np.ndarray]:
        """Every column of the episode, its rows numbered from global index ``start``.

        ``next.done`` also marks the last frame, since the episode ends there.
        """
        pending = self._pending
        length = len(self)
        columns = {key: np.stack(pending[key]) for key in self._vectors}
        for key, dtype in step_columns(self._videos).items():
            if key in pending:
                columns[key] = np.asarray(pending[key], dtype=dtype)
        columns["frame_index"] = np.arange(length, dtype=np.int64)
        columns["timestamp"] = (columns["frame_index"] / self._fps).astype(np.float32)  # LeRobot's frame lookup
        columns["episode_index"] = np.full(length, self.index, dtype=np.int64)
        columns["index"] = np.arange(start, start + length, dtype=np.int64)
        columns["task_index"] = np.full(length, task_index, dtype=np.int64)
        done = columns["next.terminated"] | columns["next.truncated"]
        done[-1] = True
        columns["next.done"] = done
        return columns

    def video_row(self, columns: dict[str, np.ndarray]) -> dict[str, Any]:
        """The episodes-parquet video columns: this episode's own file per camera, from t = 0."""
        row: dict[str, Any] = {}
        length = len(columns["frame_index"])
        for key in self._videos:
            chunk, file = self.index // self._chunks_size, self.index % self._chunks_size
            row[f"videos/{key}/chunk_index"] = chunk
            row[f"videos/{key}/file_index"] = file
            row[f"videos/{key}/from_timestamp"] = 0.0
            row[f"videos/{key}/to_timestamp"] = length / self._fps
            row[f"videos/{key}/dropped_frames"] = int(columns[dropped_column(key)].sum())
        return row

    def image_stats(self) -> dict[str, Moments]:
        """Per camera, the statistics of every frame encoded (a dropped step's repeated frame included)."""
        return dict(self._image_stats)

    def place_videos(self) -> None:
        """Finish every camera's temp MP4 (fsynced) and rename it to its final name: step 2 of the commit protocol."""
        if self._videos_placed:
            return
        for key, encoder in self._encoders.items():
            try:
                encoder.finish()
            except EncoderError as err:
                self._fail_video(key, str(err), err.disk_full)
        for key, encoder in self._encoders.items():
            final = self.root / video_file(self.index, key, self._chunks_size)
            os.replace(encoder.tmp, final)
            fsync_dir(final.parent)
        self._videos_placed = True

    def discard(self) -> None:
        """Stop the encoders and delete this episode's video files: nothing of it stays on disk."""
        for encoder in self._encoders.values():
            encoder.abort()
        if self._videos_placed:  # renamed into place by a save that then failed: unreferenced, so remove now
            for key in self._videos:
                (self.root / video_file(self.index, key, self._chunks_size)).unlink(missing_ok=True)

    # per-step checks ---------------------------------------------------------------------------------------------
    def _checked_image(self, frame: dict[str, np.ndarray | None], key: str) -> np.ndarray | None:
        if key not in frame:
            raise DatasetError(
                self.root, "missing from the frame (pass None if the camera dropped it)", episode=self.index, key=key
            )
        image = frame[key]
        if image is None:
            return None
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.shape != self._videos[key]:
            raise DatasetError(
                self.root,
                f"{image.dtype} image of shape {image.shape}, the camera's is uint8 {self._videos[key]} (RGB)",
                episode=self.index,
                key=key,
            )
        return np.ascontiguousarray(image)

    def _checked_vector(self, value: Any, key: str) -> np.ndarray:
        if value is None:
            raise DatasetError(self.root, "missing from the frame", episode=self.index, key=key)
        try:
            with np.errstate(over="ignore"):
                array = np.array(value, dtype=np.float32)  # a copy: callers reuse their buffers
        except (TypeError, ValueError) as err:
            raise DatasetError(self.root, f"not numeric: {err}", episode=self.index, key=key) from err
        if array.shape != self._vectors[key]:
            raise DatasetError(
                self.root, f"shape {array.shape}, the feature's is {self._vectors[key]}", episode=self.index, key=key
            )
        bad = np.flatnonzero(~np.isfinite(array))
        if len(bad):
            raise DatasetError(
                self.root, f"NaN or inf at position {int(bad[0])} (in float32)", episode=self.index, key=key
            )
        return array

    def _checked_finite(self, value: float, key: str) -> float:
        with np.errstate(over="ignore"):
            value32 = np.float32(value)
        if not np.isfinite(value32):
            raise DatasetError(self.root, f"{value} is not finite in float32", episode=self.index, key=key)
        return float(value32)

    def _checked_timestamp(self, value: float) -> float:
        """The step's measured time (s since the episode start, float64): finite and after the previous step's."""
        stamp = float(value)
        if not np.isfinite(stamp):
            raise DatasetError(self.root, f"{value} is not finite", episode=self.index, key="measured_timestamp")
        frame_index = len(self)
        previous = self._pending["measured_timestamp"][-1] if frame_index else None
        if previous is not None and stamp <= previous:
            raise DatasetError(
                self.root,
                f"frame {frame_index} was measured at {stamp} s, not after frame {frame_index - 1}'s {previous} s: "
                "a clock went backwards or a step was recorded twice",
                episode=self.index,
                key="measured_timestamp",
            )
        return stamp

    # cameras -----------------------------------------------------------------------------------------------------
    def _encode(self, key: str, image: np.ndarray | None) -> None:
        """Stream one camera frame into its encoder (started at the episode's first frame)."""
        try:
            if key not in self._encoders:
                final = self.root / video_file(self.index, key, self._chunks_size)
                self._encoders[key] = VideoEncoder(
                    final.with_name(final.name + TEMP_SUFFIX), self._videos[key], self._fps
                )
            if image is not None:  # copied: the caller may reuse its buffer, and a dropped frame repeats this one
                self._last_images[key] = (image.copy(), Moments.of_image(image))
            if key not in self._last_images:  # dropped before the camera's first frame: black
                black = np.zeros(self._videos[key], np.uint8)
                self._last_images[key] = (black, Moments.of_image(black))
            held, moments = self._last_images[key]
            self._encoders[key].write(held)
            self._image_stats = merge_stats(self._image_stats, {key: moments})
        except EncoderError as err:
            self._fail_video(key, str(err), err.disk_full)
        except OSError as err:  # creating the temp file or starting ffmpeg
            self._fail_video(key, str(err), is_disk_full(err))

    def _fail_video(self, key: str, detail: str, disk_full: bool) -> NoReturn:
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
        raise DatasetError(self.root, message, episode=self.index, key=key)
