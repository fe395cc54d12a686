"""A deterministic synthetic RealSense recording, written by librealsense's own recorder.

Why: the camera layer must be tested through librealsense's real ``pipeline`` (playback, syncer,
``align``), and no camera is attached here. A ``software_device`` with a depth (z16) and a colour
(rgb8) sensor, real intrinsics, extrinsics and depth units, fed frames of a known scene, gives a
``.db3`` recording that ``config.enable_device_from_file`` plays back exactly like a file recorded
from a D4xx.

The scene is two fronto-parallel planes in the depth camera's frame: a background at
``background_m`` and a rectangle at ``foreground_m`` that slides sideways frame by frame. Both
images are rendered from that one scene (the colour image through the colour camera's intrinsics
and its offset from the depth camera), so depth aligned to colour can be checked pixel by pixel:
red colour pixels must carry the rectangle's depth. Green encodes the column plus the frame number
and blue the frame number, so consecutive frames differ everywhere.

The recorder stamps each frame with the host time at which it arrived, and real-time playback
replays those arrival times: a recording meant for real-time playback must be written at the
frame rate (``paced=True``); one read as fast as possible need not be.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pyrealsense2 as rs

# Device clock at the first frame: hardware timestamps are milliseconds since the camera booted.
FIRST_TIMESTAMP_MS = 12_345.0


@dataclasses.dataclass(frozen=True)
class SyntheticScene:
    """The scene, cameras and fault schedule of one synthetic recording."""

    width: int = 64
    height: int = 48
    fps: int = 30
    frames: int = 30
    depth_units_m: float = 0.001
    background_m: float = 1.5
    foreground_m: float = 0.8
    # The colour camera sits this far along +x of the depth camera (a D435 has ~15 mm).
    baseline_m: float = 0.015
    # Frame indices never emitted (a gap in the frame numbers, as a lost USB packet leaves).
    drop: tuple[int, ...] = ()
    # Frame index whose timestamp goes back in time by ``backwards_ms`` (a clock glitch).
    backwards_at: int | None = None
    backwards_ms: float = 50.0

    @property
    def period_ms(self) -> float:
        return 1000.0 / self.fps

    def intrinsics(self, stream: rs.stream) -> rs.intrinsics:
        """Pinhole intrinsics, slightly different per stream so that alignment has work to do."""
        i = rs.intrinsics()
        i.width, i.height = self.width, self.height
        f = (0.9 if stream == rs.stream.depth else 1.0) * self.width
        i.fx, i.fy = f, f
        i.ppx, i.ppy = (self.width - 1) / 2 + (1.0 if stream == rs.stream.depth else 0.0), (self.height - 1) / 2
        i.model = rs.distortion.brown_conrady
        i.coeffs = [0.0] * 5
        return i

    def depth_to_color(self) -> rs.extrinsics:
        e = rs.extrinsics()
        e.rotation = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        e.translation = [self.baseline_m, 0.0, 0.0]
        return e

    def rectangle(self, n: int) -> tuple[float, float, float, float]:
        """(x0, x1, y0, y1) of the foreground rectangle in metres, depth camera frame, at frame ``n``."""
        half_w = 0.25 * self.foreground_m  # about a quarter of the image wide
        half_h = 0.2 * self.foreground_m
        swing = 0.15 * self.foreground_m
        x = swing * np.sin(2 * np.pi * n / max(self.frames, 2))
        return x - half_w, x + half_w, -half_h, half_h

    def timestamp_ms(self, n: int) -> float:
        ts = FIRST_TIMESTAMP_MS + n * self.period_ms
        return ts - self.backwards_ms if n == self.backwards_at else ts

    def _foreground(self, n: int, stream: rs.stream) -> np.ndarray:
        """Which pixels of ``stream`` see the rectangle (a ray through the pixel centre hits it)."""
        i = self.intrinsics(stream)
        x0, x1, y0, y1 = self.rectangle(n)
        shift = self.baseline_m if stream == rs.stream.color else 0.0
        u = (np.arange(self.width) - i.ppx) / i.fx * self.foreground_m - shift
        v = (np.arange(self.height) - i.ppy) / i.fy * self.foreground_m
        return ((v >= y0) & (v <= y1))[:, None] & ((u >= x0) & (u <= x1))[None, :]

    def depth(self, n: int) -> np.ndarray:
        """HxW uint16 depth in device units."""
        fg = self._foreground(n, rs.stream.depth)
        metres = np.where(fg, self.foreground_m, self.background_m)
        return np.round(metres / self.depth_units_m).astype(np.uint16)

    def color(self, n: int) -> np.ndarray:
        """HxWx3 uint8 RGB: red where the rectangle is seen, a moving gradient elsewhere."""
        img = np.empty((self.height, self.width, 3), np.uint8)
        img[..., 0] = np.where(self.color_foreground(n), 255, 0)
        img[..., 1] = ((np.arange(self.width) * 3 + n * 7) % 200)[None, :]
        img[..., 2] = n % 256
        return img

    def color_foreground(self, n: int) -> np.ndarray:
        """HxW bool: colour pixels on the rectangle (where aligned depth must be ``foreground_m``)."""
        return self._foreground(n, rs.stream.color)


def write_recording(path: Path, scene: SyntheticScene = SyntheticScene(), paced: bool = False) -> Path:
    """Record ``scene`` to ``path`` (``.db3``) through a software device and librealsense's recorder.

    ``paced`` feeds frames at the frame rate, so the recording plays back in real time as a camera
    would; otherwise frames go in as fast as possible (only non-real-time playback reads those).
    """
    path = Path(path)
    if path.suffix != ".db3":
        raise ValueError(f"librealsense 2.59 records only .db3 files, got {path.name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    dev = rs.software_device()
    dev.register_info(rs.camera_info.name, "reflexlab synthetic D4xx")
    dev.register_info(rs.camera_info.serial_number, "000000000000")
    depth_sensor, color_sensor = dev.add_sensor("Stereo Module"), dev.add_sensor("RGB Camera")
    depth_sensor.add_read_only_option(rs.option.depth_units, scene.depth_units_m)
    profiles = {}
    for uid, (sensor, stream, fmt, bpp) in enumerate(
        [(depth_sensor, rs.stream.depth, rs.format.z16, 2), (color_sensor, rs.stream.color, rs.format.rgb8, 3)]
    ):
        vs = rs.video_stream()
        vs.type, vs.index, vs.uid = stream, 0, uid
        vs.width, vs.height, vs.fps, vs.bpp, vs.fmt = scene.width, scene.height, scene.fps, bpp, fmt
        vs.intrinsics = scene.intrinsics(stream)
        profiles[stream] = sensor.add_video_stream(vs).as_video_stream_profile()
    profiles[rs.stream.depth].register_extrinsics_to(profiles[rs.stream.color], scene.depth_to_color())

    recorder = rs.recorder(str(path), dev)
    sensors = ((depth_sensor, rs.stream.depth), (color_sensor, rs.stream.color))
    for sensor, stream in sensors:
        sensor.open(profiles[stream])
        sensor.start(lambda _frame: None)  # the recorder taps the sensors; frames need a sink
    t0 = time.monotonic()
    try:
        for n in range(scene.frames):
            if paced:
                time.sleep(max(0.0, t0 + n / scene.fps - time.monotonic()))
            if n in scene.drop:
                continue
            for sensor, stream in sensors:
                pixels = scene.depth(n) if stream == rs.stream.depth else scene.color(n)
                frame = rs.software_video_frame()
                frame.pixels = pixels
                frame.bpp = pixels.itemsize * (pixels.shape[2] if pixels.ndim == 3 else 1)
                frame.stride = frame.bpp * scene.width
                frame.timestamp = scene.timestamp_ms(n)
                frame.domain = rs.timestamp_domain.hardware_clock
                frame.frame_number = n
                frame.profile = profiles[stream]
                if stream == rs.stream.depth:
                    frame.depth_units = scene.depth_units_m
                sensor.on_video_frame(frame)
    finally:
        for sensor, _ in sensors:
            sensor.stop()
            sensor.close()
        del recorder  # the file is complete once the recorder is destroyed
    return path
