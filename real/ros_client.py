"""What a robot's env needs of ROS 2, whatever the robot: the newest message of each stream with its age, and resets.

A robot's driver (or its sim-as-real bridge) runs the fast loops; the env runs at the policy's rate and needs only
the *newest* sample of each stream it reads, each with its receipt time, plus the simulator's reset handshake
(``/sim/reset`` with a seed, echoed on ``/sim/reset_done`` once done). rclpy runs in its own context and executor
thread here, so the env's loop never blocks on DDS and a client can live beside other rclpy users in one process.
`real.ros_arm.RosArm` and `real.car.ros_car.RosCar` are the robots' clients, `real.ros_camera.RosImageCamera` a
camera's.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Iterable

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)


class StaleStateError(RuntimeError):
    """A state stream the env needs is older than allowed; the message names the topic and its age."""


class RosClient:
    """A node in its own context and thread that keeps the newest message per topic.

    A subclass creates its subscriptions on ``self._node`` (each storing through `_store`, or its own callback) and
    publishers, then calls `_start`. ``driver`` names what should be publishing, for the error of a silent topic;
    ``sim_reset`` and ``sim_reset_done``, when given, the simulator's reset handshake (`request_sim_reset`).
    """

    def __init__(
        self,
        node_name: str,
        driver: str,
        domain_id: int | None = None,
        sim_reset: str | None = None,
        sim_reset_done: str | None = None,
    ) -> None:
        import rclpy
        from rclpy.context import Context
        from std_msgs.msg import Int64

        self.driver = driver
        self._lock = threading.Lock()
        self._latest: dict[str, object] = {}
        self._received: dict[str, float] = {}
        self._reset_done: int | None = None
        self._reset_done_topic = sim_reset_done
        self._context = Context()
        rclpy.init(context=self._context, domain_id=domain_id)
        self._node = rclpy.create_node(node_name, context=self._context)
        if sim_reset is not None and sim_reset_done is not None:  # a robot the simulator can reset
            self._node.create_subscription(Int64, sim_reset_done, self._on_reset_done, 10)
            self._reset_pub = self._node.create_publisher(Int64, sim_reset, 10)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        # An exception that unwinds past the owner must still stop the executor thread before the
        # interpreter exits, or rclpy's C++ side aborts the process ("terminate called …").
        atexit.register(self.close)

    def _start(self, thread_name: str) -> None:
        """Spin the node (every subscription and publisher made) in this client's thread."""
        from rclpy.experimental import EventsExecutor

        self._executor = EventsExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._thread = threading.Thread(target=self._spin, name=thread_name, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            while not self._stop.is_set() and self._context.ok():
                self._executor.spin_once(timeout_sec=0.02)
        except ExternalShutdownException:
            pass

    def _store(self, topic: str) -> Callable[[object], None]:
        def callback(msg: object) -> None:
            with self._lock:
                self._latest[topic] = msg
                self._received[topic] = time.monotonic()

        return callback

    def _on_reset_done(self, msg: object) -> None:
        with self._lock:
            self._reset_done = int(msg.data)  # type: ignore[attr-defined]

    def _newest(self, needed: Iterable[str], max_age_s: float | None) -> tuple[dict[str, object], dict[str, float]]:
        """The newest message and receipt time of every topic; `StaleStateError` naming a topic that never came, or
        one older than ``max_age_s``."""
        with self._lock:
            latest, received = dict(self._latest), dict(self._received)
        missing = [topic for topic in needed if topic not in latest]
        if missing:
            raise StaleStateError(f"never received {', '.join(missing)}")
        if max_age_s is not None:
            now = time.monotonic()
            for topic, at in received.items():
                if now - at > max_age_s:
                    raise StaleStateError(
                        f"{topic} is {(now - at) * 1e3:.0f} ms old (allowed {max_age_s * 1e3:.0f} ms): driver or "
                        "tracker stopped publishing"
                    )
        return latest, received

    def _wait_for(self, needed: list[str], timeout_s: float) -> None:
        """Block until every topic of ``needed`` has delivered once; the error names the silent ones."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                missing = [topic for topic in needed if topic not in self._latest]
            if not missing:
                return
            time.sleep(0.01)
        raise TimeoutError(
            f"no message on {', '.join(missing)} within {timeout_s:g} s: is {self.driver} running in this ROS domain?"
        )

    def request_sim_reset(self, seed: int, timeout_s: float = 10.0) -> None:
        """Ask the simulator to reset its scene (the sim's stand-in for a person) and wait until it has."""
        from std_msgs.msg import Int64

        with self._lock:
            self._reset_done = None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._reset_pub.publish(Int64(data=int(seed)))
            for _ in range(10):
                time.sleep(0.01)
                with self._lock:
                    if self._reset_done == seed:
                        self._received.clear()  # states from before the reset are not this episode's
                        self._latest.clear()
                        return
        raise TimeoutError(f"the simulator did not confirm the reset to seed {seed} on {self._reset_done_topic}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2.0)
            self._executor.shutdown()
        self._node.destroy_node()
        self._context.try_shutdown()

    def __enter__(self) -> RosClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
