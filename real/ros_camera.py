"""A camera behind a ROS 2 `sensor_msgs/Image` topic, as recording sees cameras: the newest frame and its age.

On the robot `camera_node` publishes the RealSense stream (stamped with the camera's hardware
capture time mapped to the ROS clock); in sim-as-real the arm bridge publishes its rendered scene
on the same topic. Either way the recorder stores the newest frame at each control step with its
age (now − capture stamp), exactly as it does for a RealSense opened in-process.
"""

from __future__ import annotations

import time
from collections import deque
from typing import NamedTuple

import numpy as np

from real.ros_client import RosClient
from reflexlab.ros.common import rgb_pixels
from reflexlab.ros.common import stamp_ns as ros_stamp_ns


class RosFrame(NamedTuple):
    color: np.ndarray  # (H, W, 3) uint8 RGB
    stamp_ns: int  # the message's header stamp (capture time, ROS clock)


class RosLatest(NamedTuple):
    frame: RosFrame
    age_s: float


class RosImageCamera(RosClient):
    """Subscribes to an rgb8 (or bgr8) image topic in its own rclpy context and keeps the newest frame.

    Args:
        topic: the image topic.
        fps: the rate assumed until frames have arrived; then the period is the median spacing of the last
            stamps (a frame older than a few periods counts as dropped when recorded).
    """

    def __init__(self, topic: str, fps: float = 30.0) -> None:
        from sensor_msgs.msg import Image

        from reflexlab.ros.common import state_qos

        super().__init__("reflexlab_camera_client", f"a camera driver publishing {topic}")
        self.topic, self._nominal_period = topic, 1.0 / fps
        self.rejected = 0
        self._stamps: deque[int] = deque(maxlen=16)
        self._frame: RosFrame | None = None
        self._node.create_subscription(Image, topic, self._on_image, state_qos(best_effort=True))
        self._start(f"ros-camera {topic}")

    def _on_image(self, msg: object) -> None:
        try:
            pixels = rgb_pixels(msg)
        except ValueError:
            self.rejected += 1  # a depth or mono topic is not a colour camera
            return
        stamp_ns = ros_stamp_ns(msg.header.stamp)  # type: ignore[attr-defined]
        with self._lock:
            self._frame = RosFrame(np.ascontiguousarray(pixels), stamp_ns)
            self._stamps.append(stamp_ns)

    @property
    def period_s(self) -> float:
        """The camera's frame period as measured from its stamps (the nominal one until 3 frames arrived)."""
        with self._lock:
            stamps = np.array(self._stamps)
        gaps = np.diff(stamps)
        gaps = gaps[gaps > 0]
        return float(np.median(gaps)) * 1e-9 if len(gaps) >= 2 else self._nominal_period

    def latest(self) -> RosLatest | None:
        with self._lock:
            frame = self._frame
        return None if frame is None else RosLatest(frame, (time.time_ns() - frame.stamp_ns) * 1e-9)

    def wait_for_frame(self, timeout_s: float = 10.0) -> RosFrame:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            latest = self.latest()
            if latest is not None:
                return latest.frame
            time.sleep(0.01)
        raise TimeoutError(f"no rgb8 image on {self.topic} within {timeout_s:g} s (rejected {self.rejected})")
