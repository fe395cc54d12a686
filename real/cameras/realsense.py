"""An Intel RealSense depth+colour camera for policies: newest aligned frame, host-clock stamps, counters.

One background thread waits on librealsense's ``pipeline`` (a live camera, or a recording played
back through the same code), aligns depth to colour with ``rs.align``, maps the hardware timestamp
to the host clock (``clock.ClockMapper``), and pushes each frame into a ring buffer. A policy
calls ``latest()`` at its own rate and gets the newest frame plus its age, never a backlog.

Frames are checked on the way in, because a policy acting on a wrong image is worse than one
acting on an old one: a gap in frame numbers counts as dropped frames; a frame whose device time
is not after the previous one is refused (and counted); a depth and a colour frame further apart
than half a frame period are not paired. librealsense's pipeline fills every frameset with the
last frame of each stream, so in playback a depth frame often comes first with the previous
colour frame: only pairs taken at the same moment are used, each colour frame once.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
import pyrealsense2 as rs

from real.cameras.clock import ClockMapper
from real.cameras.ring import RingBuffer

# librealsense already puts these timestamp domains on the host's system clock (ms since the epoch).
_HOST_DOMAINS = (rs.timestamp_domain.system_time, rs.timestamp_domain.global_time)


class CameraError(RuntimeError):
    """The camera cannot start as configured; the message says what is there instead."""


class PlaybackStalled(CameraError):
    """A non-real-time playback stopped delivering framesets before its end.

    librealsense's non-real-time playback hangs now and then (librealsense issues #6340, #10312):
    the recording is not stopped, yet no frameset comes. Without this the camera thread would wait
    for ever and ``finished`` would never be set; playing the recording again is the remedy.
    """


@dataclasses.dataclass
class RealSenseConfig:
    """Which camera (or recording) and how to stream it."""

    serial: str = ""  # live camera by serial number; empty: the only (first) one connected
    playback_file: Path | None = None  # a librealsense .db3 recording instead of a live camera
    width: int = 640  # 0: whatever the camera/recording offers
    height: int = 480
    fps: int = 30
    align_depth_to_color: bool = True  # depth re-projected into the colour image (same pixels)
    playback_real_time: bool = True  # replay at the recorded rate (False: as fast as frames are read)
    playback_repeat: bool = False
    ring_size: int = 8
    host_clock: Literal["system", "monotonic"] = "system"  # system = the ROS clock
    clock_window_s: float = 2.0  # device time searched for the least transport latency
    clock_resync_after: int = 3  # refused (backwards) frames in a row before the mapping restarts
    stale_after_periods: float = 2.0  # a read older than this many frame periods counts as stale
    wait_timeout_ms: int = 100  # the thread's wait per try; bounds how long close() takes
    playback_stall_s: float = 5.0  # non-real-time playback: no frameset for this long, not ended = stalled


@dataclasses.dataclass(frozen=True)
class Intrinsics:
    """A stream's pinhole model and distortion, as librealsense reports it (pixels)."""

    width: int
    height: int
    fx: float
    fy: float
    ppx: float
    ppy: float
    model: str  # librealsense's name: brown_conrady, inverse_brown_conrady, kannala_brandt4, …
    coeffs: tuple[float, ...]

    @classmethod
    def from_rs(cls, i: rs.intrinsics) -> Intrinsics:
        return cls(i.width, i.height, i.fx, i.fy, i.ppx, i.ppy, i.model.name, tuple(float(c) for c in i.coeffs))

    def matrix(self) -> np.ndarray:
        """The 3x3 camera matrix K."""
        return np.array([[self.fx, 0.0, self.ppx], [0.0, self.fy, self.ppy], [0.0, 0.0, 1.0]])


@dataclasses.dataclass(frozen=True)
class Frame:
    """One aligned depth+colour pair."""

    color: np.ndarray  # HxWx3 uint8 RGB
    depth: np.ndarray  # HxW uint16 device units (× depth_scale = metres); in colour pixels when aligned
    host_stamp_ns: int  # capture time on the host clock (mapped from the device clock)
    device_stamp_ms: float  # the colour frame's timestamp as the camera reported it
    timestamp_domain: str  # hardware_clock, system_time or global_time
    frame_number: int  # the colour frame's number
    depth_frame_number: int
    received_ns: int  # when the frameset reached this process (host clock)


class Latest(NamedTuple):
    frame: Frame
    age_s: float  # host clock now − the frame's capture stamp


@dataclasses.dataclass
class CameraStats:
    """Counters since start; plain ints, read without locking (each is written by one thread)."""

    frames_received: int = 0  # frames accepted into the ring
    frames_dropped: int = 0  # colour frame-number gaps
    depth_frames_dropped: int = 0
    timestamps_backwards: int = 0  # frames refused because their device time went back
    clock_resets: int = 0  # the device clock jumped back and stayed there; the mapping started over
    stream_restarts: int = 0  # frame numbers started again (looping playback, camera reset)
    unpaired: int = 0  # framesets lacking depth or colour, or whose two were not taken together (skipped)
    stale_reads: int = 0  # latest() calls that returned a frame older than stale_after_periods


class RealSenseCamera:
    """A started camera (a context manager); see the module docstring."""

    def __init__(self, config: RealSenseConfig, on_frame: Callable[[Frame], None] | None = None) -> None:
        """``on_frame`` is called on the camera thread with each accepted frame (keep it short).

        It is a plain attribute, ``on_frame``, that may be set while streaming: a callback that needs
        what ``start()`` reads from the camera (intrinsics, depth scale) is attached after it returns,
        since the first frame can arrive before ``start()``'s caller gets control back.
        """
        self.config = config
        self.stats = CameraStats()
        self.ring: RingBuffer[Frame] = RingBuffer(config.ring_size)
        self.color_intrinsics: Intrinsics | None = None
        self.depth_intrinsics: Intrinsics | None = None  # of the depth image handed out (colour's when aligned)
        self.depth_scale_m: float = 0.0
        self.serial = ""
        self.period_s = 1.0 / config.fps if config.fps else 0.0
        self._now_ns = time.time_ns if config.host_clock == "system" else time.monotonic_ns
        self.on_frame = on_frame
        self._pipeline: rs.pipeline | None = None
        self._align = rs.align(rs.stream.color) if config.align_depth_to_color else None
        self._mappers: dict[rs.timestamp_domain, ClockMapper] = {}
        self._last_color = self._last_depth = -1
        self._last_used_color = -1
        self._stop = threading.Event()
        self.finished = threading.Event()  # set when a non-repeating playback has ended
        self._new_frame = threading.Condition()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # what stopped the camera thread, if anything

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> RealSenseCamera:
        cfg = self.config
        rs_config = rs.config()
        if cfg.playback_file is not None:
            path = Path(cfg.playback_file)
            if not path.is_file():
                raise FileNotFoundError(f"RealSense recording {path} does not exist")
            rs_config.enable_device_from_file(str(path), repeat_playback=cfg.playback_repeat)
        else:
            self.serial = _choose_serial(cfg.serial)
            rs_config.enable_device(self.serial)
        rs_config.enable_stream(rs.stream.depth, cfg.width, cfg.height, rs.format.z16, cfg.fps)
        rs_config.enable_stream(rs.stream.color, cfg.width, cfg.height, rs.format.rgb8, cfg.fps)
        pipeline = rs.pipeline()
        if not rs_config.can_resolve(pipeline):
            try:  # can_resolve says False for a file that is no recording at all; opening it says why
                offered = ", ".join(_offered_profiles(cfg.playback_file, self.serial)) or "nothing"
            except RuntimeError as e:
                raise CameraError(f"cannot read {self._source()}: {e}") from e
            wanted = f"depth z16 + color rgb8 {cfg.width}x{cfg.height}@{cfg.fps} (0 = any)"
            raise CameraError(f"{self._source()} cannot stream {wanted}; it offers: {offered}")
        try:
            profile = rs_config.resolve(pipeline)
            if cfg.playback_file is not None:
                profile.get_device().as_playback().set_real_time(cfg.playback_real_time)
            profile = pipeline.start(rs_config)
        except RuntimeError as e:
            raise CameraError(f"cannot start {self._source()}: {e}") from e
        self._pipeline = pipeline
        color = profile.get_stream(rs.stream.color).as_video_stream_profile()
        depth = profile.get_stream(rs.stream.depth).as_video_stream_profile()
        self.color_intrinsics = Intrinsics.from_rs(color.get_intrinsics())
        self.depth_intrinsics = self.color_intrinsics if self._align else Intrinsics.from_rs(depth.get_intrinsics())
        self.depth_scale_m = profile.get_device().first_depth_sensor().get_depth_scale()
        self.period_s = 1.0 / color.fps()
        self.serial = self.serial or profile.get_device().get_info(rs.camera_info.serial_number)
        self._thread = threading.Thread(target=self._run, name="realsense", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._pipeline is not None:
            self._pipeline.stop()
            self._pipeline = None

    def __enter__(self) -> RealSenseCamera:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------------

    def now_ns(self) -> int:
        """The host clock the stamps are on."""
        return self._now_ns()

    def latest(self) -> Latest | None:
        """The newest frame and its age (None before the first frame)."""
        frame = self.ring.latest()
        if frame is None:
            return None
        age_s = (self._now_ns() - frame.host_stamp_ns) * 1e-9
        if age_s > self.config.stale_after_periods * self.period_s:
            self.stats.stale_reads += 1
        return Latest(frame, age_s)

    def wait_for_frame(self, newer_than: int = -1, timeout_s: float = 5.0) -> Frame:
        """Block until a frame with number above ``newer_than`` is in the ring; TimeoutError otherwise."""

        def ready() -> bool:
            frame = self.ring.latest()
            return frame is not None and frame.frame_number > newer_than

        with self._new_frame:
            if not self._new_frame.wait_for(lambda: ready() or self.finished.is_set(), timeout_s) or not ready():
                why = f"{timeout_s:g} s passed"
                if self.finished.is_set():
                    why = f"the camera thread stopped: {self.error}" if self.error else "the recording ended"
                raise TimeoutError(f"no frame newer than {newer_than} from {self._source()}: {why}")
        return self.ring.latest()  # type: ignore[return-value]

    # -- the camera thread -----------------------------------------------------------------------

    def _run(self) -> None:
        assert self._pipeline is not None
        cfg = self.config
        # Only a non-real-time playback is owed frames continuously: a live camera or a real-time
        # replay may legitimately go quiet (unplugged, a gap in the recording), and says so by its stats.
        watch_stall = cfg.playback_file is not None and not cfg.playback_real_time
        framesets, last_frameset = 0, time.monotonic()
        try:
            while not self._stop.is_set():
                ok, frames = self._pipeline.try_wait_for_frames(cfg.wait_timeout_ms)
                received_ns = self._now_ns()
                if ok:
                    framesets, last_frameset = framesets + 1, time.monotonic()
                    self._take(frames, received_ns)
                    del frames  # back to librealsense's frame pool before waiting again
                elif self._playback_ended():
                    break
                elif watch_stall and time.monotonic() - last_frameset > cfg.playback_stall_s:
                    raise PlaybackStalled(
                        f"non-real-time playback of {cfg.playback_file} stalled: no frameset for "
                        f"{cfg.playback_stall_s:g} s after {framesets}, and the recording has not ended "
                        f"(librealsense's non-real-time playback hang; {self.stats}): play it again"
                    )
        except Exception as e:  # surfaced through .error; the thread must not die silently
            self.error = e
        finally:
            self.finished.set()
            with self._new_frame:
                self._new_frame.notify_all()

    def _playback_ended(self) -> bool:
        if self.config.playback_file is None or self.config.playback_repeat:
            return False
        playback = self._pipeline.get_active_profile().get_device().as_playback()
        return playback.current_status() == rs.playback_status.stopped

    def _take(self, frames: rs.composite_frame, received_ns: int) -> None:
        color, depth = frames.get_color_frame(), frames.get_depth_frame()
        stats = self.stats
        if not color or not depth:  # the syncer let one stream through alone: no pair to take, but counted
            stats.unpaired += 1
            return
        c_num, d_num = color.get_frame_number(), depth.get_frame_number()
        if c_num < self._last_color:
            # The frame counter restarted (a looping recording, a camera reset): so did its clock.
            stats.stream_restarts += 1
            self._last_color = self._last_depth = self._last_used_color = -1
            self._mappers.clear()
        if d_num > self._last_depth:
            if self._last_depth >= 0:
                stats.depth_frames_dropped += d_num - self._last_depth - 1
            self._last_depth = d_num
        if c_num > self._last_color:
            if self._last_color >= 0:
                stats.frames_dropped += c_num - self._last_color - 1
            self._last_color = c_num
        if c_num <= self._last_used_color:
            return  # this colour frame was used (or refused) already
        c_ms = color.get_timestamp()
        if abs(depth.get_timestamp() - c_ms) > 500.0 * self.period_s:
            stats.unpaired += 1
            return
        self._last_used_color = c_num
        domain = color.get_frame_timestamp_domain()
        if domain not in self._mappers:
            on_host = domain in _HOST_DOMAINS and self.config.host_clock == "system"
            self._mappers[domain] = ClockMapper(
                self.config.clock_window_s, self.config.clock_resync_after, fixed_offset_ns=0 if on_host else None
            )
        mapped = self._mappers[domain].map(c_ms, received_ns)
        if not mapped.accepted:
            stats.timestamps_backwards += 1
            return
        stats.clock_resets += mapped.reset
        if self._align is not None:
            depth = self._align.process(frames).get_depth_frame()
        frame = Frame(
            color=np.asanyarray(color.get_data()).copy(),
            depth=np.asanyarray(depth.get_data()).copy(),
            host_stamp_ns=mapped.host_ns,
            device_stamp_ms=c_ms,
            timestamp_domain=domain.name,
            frame_number=c_num,
            depth_frame_number=d_num,
            received_ns=received_ns,
        )
        self.ring.push(frame)
        stats.frames_received += 1
        with self._new_frame:
            self._new_frame.notify_all()
        on_frame = self.on_frame  # read once: another thread may set it
        if on_frame is not None:
            on_frame(frame)

    def _source(self) -> str:
        if self.config.playback_file is not None:
            return f"recording {self.config.playback_file}"
        return f"RealSense {self.serial or '(any)'}"


def connected_serials() -> list[str]:
    return [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]


def _choose_serial(serial: str) -> str:
    serials = connected_serials()
    if not serials:
        raise CameraError(
            "no RealSense camera is connected (check the USB 3 cable and the udev rules, "
            "or set playback_file to play a recording)"
        )
    if serial and serial not in serials:
        raise CameraError(f"no RealSense camera with serial {serial}; connected: {', '.join(serials)}")
    return serial or serials[0]


def _offered_profiles(playback_file: Path | None, serial: str) -> list[str]:
    """The depth/colour video profiles a recording or camera offers, e.g. ``color rgb8 640x480@30``."""
    ctx = rs.context()
    if playback_file is not None:
        device = ctx.load_device(str(playback_file))
    else:
        device = next(d for d in ctx.query_devices() if d.get_info(rs.camera_info.serial_number) == serial)
    offered = set()
    for sensor in device.query_sensors():
        for p in sensor.get_stream_profiles():
            if p.stream_type() in (rs.stream.depth, rs.stream.color) and p.is_video_stream_profile():
                v = p.as_video_stream_profile()
                offered.add(f"{p.stream_name().lower()} {p.format().name} {v.width()}x{v.height()}@{p.fps()}")
    return sorted(offered)
