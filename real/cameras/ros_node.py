"""The RealSense camera as a ROS 2 node: colour and aligned depth images with their CameraInfo.

Topics follow realsense-ros, so tools written for it work unchanged: ``~/color/image_raw``
(``rgb8``), ``~/aligned_depth_to_color/image_raw`` (``16UC1``, millimetres as REP 118 asks),
each with a ``camera_info`` beside it, and ``/diagnostics`` with the camera's counters. Header
stamps are the frames' capture times mapped from the camera's clock to the ROS (system) clock,
not their arrival times, so a subscriber can tell how old an image is.

Images are published from the camera thread the moment a frame is ready: waking the executor
first would only add latency, and only that thread ever publishes on these publishers.
"""

from __future__ import annotations

import array
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from real.cameras.realsense import CameraError, Frame, Intrinsics, RealSenseCamera, RealSenseConfig
from reflexlab.ros.common import diagnostics_msg, node_main

PARAMETERS: dict[str, object] = {
    "serial": "",  # live camera by serial; empty: the first connected
    "playback_file": "",  # a .db3 recording instead of a live camera
    "width": 640,
    "height": 480,
    "fps": 30,
    "playback_real_time": True,
    "playback_repeat": False,
    "frame_id": "camera_color_optical_frame",  # aligned depth lives in the colour camera's frame
    "diagnostics_period_s": 1.0,
}

# librealsense distortion models → ROS names. The Brown–Conrady family is what ROS calls plumb_bob
# (realsense-ros labels inverse_brown_conrady so too); Kannala–Brandt is ROS's equidistant.
_ROS_DISTORTION = {"kannala_brandt4": ("equidistant", 4)}
_PLUMB_BOB = ("plumb_bob", 5)


def camera_info(intr: Intrinsics, frame_id: str) -> CameraInfo:
    """CameraInfo (K, D, R = I, P) for an unrectified monocular stream."""
    msg = CameraInfo(width=intr.width, height=intr.height)
    msg.header.frame_id = frame_id
    msg.distortion_model, n = _ROS_DISTORTION.get(intr.model, _PLUMB_BOB)
    msg.d = [float(c) for c in intr.coeffs[:n]] + [0.0] * max(0, n - len(intr.coeffs))
    msg.k = intr.matrix().reshape(-1).tolist()
    msg.r = np.eye(3).reshape(-1).tolist()
    msg.p = np.hstack([intr.matrix(), np.zeros((3, 1))]).reshape(-1).tolist()
    return msg


class CameraNode(Node):
    """Streams one RealSense camera (or recording); see the module docstring."""

    def __init__(self, node_name: str = "camera", **kwargs: object) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        self.frame_id = str(p["frame_id"])
        qos = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)
        self.color_pub = self.create_publisher(Image, "~/color/image_raw", qos)
        self.color_info_pub = self.create_publisher(CameraInfo, "~/color/camera_info", qos)
        self.depth_pub = self.create_publisher(Image, "~/aligned_depth_to_color/image_raw", qos)
        self.depth_info_pub = self.create_publisher(CameraInfo, "~/aligned_depth_to_color/camera_info", qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        config = RealSenseConfig(
            serial=str(p["serial"]),
            playback_file=Path(p["playback_file"]) if p["playback_file"] else None,
            width=int(p["width"]),
            height=int(p["height"]),
            fps=int(p["fps"]),
            playback_real_time=bool(p["playback_real_time"]),
            playback_repeat=bool(p["playback_repeat"]),
            host_clock="system",  # the ROS clock
        )
        self.camera = RealSenseCamera(config).start()
        assert self.camera.color_intrinsics is not None
        self._info = camera_info(self.camera.color_intrinsics, self.frame_id)
        # Depth leaves in millimetres (16UC1); a camera whose depth unit is not 1 mm is rescaled.
        self._depth_to_mm = self.camera.depth_scale_m * 1e3
        # Publishing needs the CameraInfo, which needs the started camera: the first frame may come before
        # this line, and a callback attached at construction once killed the camera thread on it.
        self.camera.on_frame = self._publish
        self.create_timer(float(p["diagnostics_period_s"]), self._publish_diagnostics)

    def _publish(self, frame: Frame) -> None:
        sec, nanosec = divmod(frame.host_stamp_ns, 1_000_000_000)
        self._info.header.stamp.sec, self._info.header.stamp.nanosec = sec, nanosec
        depth = frame.depth
        if abs(self._depth_to_mm - 1.0) > 1e-6:
            depth = np.clip(np.round(depth * self._depth_to_mm), 0, 65535).astype(np.uint16)
        for pub, info_pub, pixels, encoding in (
            (self.color_pub, self.color_info_pub, frame.color, "rgb8"),
            (self.depth_pub, self.depth_info_pub, depth, "16UC1"),
        ):
            msg = Image(height=pixels.shape[0], width=pixels.shape[1], encoding=encoding, is_bigendian=0)
            msg.header = self._info.header
            msg.step = pixels.shape[1] * pixels.itemsize * (pixels.shape[2] if pixels.ndim == 3 else 1)
            msg.data = array.array("B", pixels.tobytes())  # an array.array skips rclpy's per-byte check
            pub.publish(msg)
            info_pub.publish(self._info)

    def _publish_diagnostics(self) -> None:
        stats = vars(self.camera.stats)
        bad = stats["frames_dropped"] or stats["timestamps_backwards"] or self.camera.error
        level = DiagnosticStatus.WARN if bad else DiagnosticStatus.OK
        message = str(self.camera.error) if self.camera.error else ("frames lost or refused" if bad else "ok")
        self.diag_pub.publish(diagnostics_msg(self, f"RealSense {self.camera.serial}", "", level, message, stats))

    def destroy_node(self) -> None:
        self.camera.close()  # stop publishing from the camera thread before the publishers go
        super().destroy_node()


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab camera_node --ros-args -p serial:=… | -p playback_file:=rec.db3``"""
    node_main(CameraNode, argv, name="camera_node", errors=(CameraError, FileNotFoundError))


if __name__ == "__main__":
    main()
