"""A simulated robot's camera as a ROS 2 camera driver: an MJCF camera rendered offscreen and published as rgb8.

Software EGL takes ~36 ms per 160×120 frame here: in the executor's thread that stalled physics past its
catch-up budget (simulated time slipped ~18 %). MuJoCo releases the GIL while rendering, so a thread rendering a
snapshot of the joint positions costs the 500 Hz physics ~6 ms at most. Frames are only rendered while somebody
subscribes, and are stamped with their capture time, as camera drivers stamp them. The arm bridge and the car
bridge both publish theirs this way.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import mujoco
from rclpy._rclpy_pybind11 import RCLError  # what publish raises once the context is shut down
from rclpy.node import Node
from sensor_msgs.msg import Image


class SceneCamera:
    """Renders MJCF camera ``camera`` of ``model`` at ``rate_hz`` in its own thread, from snapshots of ``data``'s
    joint positions, and publishes it on ``pub`` as a camera driver would.

    ``size`` is (height, width); ``frame_id`` the image's frame.
    """

    def __init__(
        self,
        node: Node,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        pub: Any,
        rate_hz: float,
        size: tuple[int, int],
        camera: str,
        frame_id: str,
    ) -> None:
        self.node, self.model, self.source, self.pub, self.period = node, model, data, pub, 1.0 / rate_hz
        height, width = size
        self.msg = Image(height=height, width=width, encoding="rgb8", is_bigendian=0, step=3 * width)
        self.msg.header.frame_id = frame_id
        self.camera = camera
        self.frames = 0
        self._size = size
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"scene-camera {camera}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        renderer = mujoco.Renderer(self.model, *self._size)  # the GL context belongs to this thread
        data = mujoco.MjData(self.model)
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                next_t += self.period
                if self.pub.get_subscription_count() > 0:
                    data.qpos[:] = self.source.qpos  # a snapshot: physics goes on meanwhile
                    stamp = self.node.get_clock().now().to_msg()  # capture time, as camera drivers stamp
                    mujoco.mj_kinematics(self.model, data)
                    renderer.update_scene(data, camera=self.camera)
                    self.msg.data = renderer.render().tobytes()
                    self.msg.header.stamp = stamp
                    try:
                        self.pub.publish(self.msg)
                    except RCLError:
                        if self.node.context.ok():
                            raise
                        return  # ROS shut down (SIGINT/SIGTERM) before the node closed this thread
                    self.frames += 1
                self._stop.wait(max(0.0, next_t - time.monotonic()))
        finally:
            renderer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
