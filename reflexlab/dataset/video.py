"""Camera features: each episode's frames streamed through ffmpeg into an MP4 while the episode records.

Camera features (``videos=`` of `DatasetWriter`, LeRobot's ``dtype: "video"``) are (H, W, 3) uint8 RGB frames,
encoded while the episode records: each frame goes straight into an ffmpeg process that writes a temporary MP4, so a
long episode never sits in RAM. h264/yuv420p because every player, browser, PyAV and torchcodec decode it; GOP 2 (as
LeRobot) because training reads frames at random. yuv420p is lossy and halves chroma resolution, so depth images
(which need exact 16-bit values) are not supported: that would need a lossless codec (FFV1 gray16le in MKV, or PNG
files), which LeRobot's video path does not read. A camera frame that did not arrive is given as ``None``: the
previous frame is encoded again (video frame i stays step i) and the step's ``camera.<name>.is_dropped`` column
says so; the episodes parquet counts them per episode in ``videos/KEY/dropped_frames``. `Dataset.video_frames` reads
frames by step. LeRobot instead looks a step's frame up at ``from_timestamp + timestamp``, which agrees because the
``timestamp`` column is exactly frame_index / fps (the reader refuses one more than 1e-4 s, LeRobot's tolerance,
off). stats.json holds each camera's per-channel statistics (`reflexlab.dataset.stats`), which LeRobot's
normaliser uses.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np

from reflexlab.dataset.layout import VIDEO_PIX_FMT
from reflexlab.io import DISK_FULL_ERRNOS, is_disk_full, make_parent

# CRF 18 is near visually lossless, "veryfast" keeps up with cameras, GOP 2 for random access (see above).
_X264_ARGS = ("-c:v", "libx264", "-preset", "veryfast", "-crf", "18", "-g", "2", "-pix_fmt", VIDEO_PIX_FMT)


class EncoderError(Exception):
    """A camera's encoder failed; ``disk_full`` when it could not write its output for lack of space."""

    def __init__(self, detail: str, disk_full: bool) -> None:
        super().__init__(detail)
        self.disk_full = disk_full


class VideoEncoder:
    """One camera's frames of the episode being recorded, streamed through ffmpeg into a temporary MP4.

    The writer creates the temp file and passes ffmpeg only its descriptor (as ``/dev/fd/N``; Linux, like the
    flock): an encoder orphaned by a killed recorder then writes into that inode, which recovery unlinks, and can
    never re-create a temp file after the next writer cleaned up. ffmpeg runs in its own process group, so a Ctrl-C
    aimed at the recorder does not kill the encoder of an episode that is about to be saved. Its stderr goes to a
    memory file (no pipe to drain, no disk needed to report a full disk).
    """

    def __init__(self, tmp: Path, shape: tuple[int, ...], fps: float) -> None:
        import imageio_ffmpeg  # the ffmpeg binary; only camera datasets need it

        make_parent(tmp)
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
        """Flush the encoder and fsync the temp file; raises `EncoderError` when the MP4 could not be finished."""
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):  # flushing into a dead ffmpeg; its exit status below says why
            self._process.stdin.close()
        if self._process.wait() != 0:
            raise self._failure()
        try:
            os.fsync(self._out)
        except OSError as err:
            raise EncoderError(f"fsync of {self.tmp.name}: {err}", is_disk_full(err)) from err
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

    def _failure(self) -> EncoderError:
        status = self._process.wait()
        lines = os.pread(self._log, 8192, 0).decode(errors="replace").strip().splitlines() or ["no message"]
        full = [line for line in lines if any(os.strerror(code) in line for code in DISK_FULL_ERRNOS)]
        disk_full = status == -signal.SIGXFSZ or bool(full)
        return EncoderError(f"ffmpeg exited with status {status}: {(full or lines)[0]}", disk_full)

    def _close_files(self) -> None:
        for fd in (self._out, self._log):
            if fd >= 0:
                os.close(fd)
        self._out = self._log = -1


def decode_frames(path: Path, height: int, width: int, start: int, count: int) -> Iterator[np.ndarray]:
    """Frames ``start`` .. ``start + count`` of an MP4 as (H, W, 3) uint8 RGB, one at a time (a minute of 640x480 at
    30 fps is 1.6 GB decoded). Raises OSError or RuntimeError when the file cannot be decoded or has another size;
    yields fewer frames when the file ends early (the caller counts them)."""
    import imageio_ffmpeg  # only camera datasets need ffmpeg

    # -nostdin: ffmpeg 9 otherwise prints "Press [q] to stop" into the middle of the stream line
    # that imageio-ffmpeg parses for the frame size, and a short file then fails to open at random.
    reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24", input_params=["-nostdin"])
    try:
        meta = next(reader)
        if tuple(meta["size"]) != (width, height):
            raise OSError(f"{path.name} is {meta['size']} pixels, the feature is {(width, height)}")
        for raw in itertools.islice(reader, start, start + count):
            yield np.frombuffer(raw, np.uint8).reshape(height, width, 3)
    finally:
        reader.close()
