"""The MuJoCo arm bridge: a simulated Panda at an arm task (push-T, peg-insert) behind the same topics as the real arm.

Sim-as-real for the arm tasks: the real-robot `Env` (`real.env`), `reflexlab record` and every
real-world RL loop talk to this node exactly as they talk to `franka_node` on the robot
(`real.ros_arm.ArmTopics`): joint states and the end-effector pose at ``publish_rate_hz``,
tracked object poses at ``tracker_rate_hz`` (a camera tracker's rate), a rendered scene camera on
the topic the robot's RealSense node uses, end-effector targets in.
Each object the task's scene tracks (push-T: the block; peg-insert: the hole, with the task's tracker error)
is published on its tracker topic (`reflexlab.ros.topics.tracker_topic`).
Physics runs at the task's rate locked to the wall clock (`TaskEntry.realtime`, e.g. push-T's),
so a policy that is late, or a person that is slow, is late in the scene too. A watchdog holds
the arm where it is when targets stop for ``command_timeout_s``. ``/sim/reset`` (a seed) is the
simulator's stand-in for the person who resets the scene between episodes on a real robot.

Run it as ``reflexlab sim-bridge --task panda-push-t`` or ``ros2 run reflexlab arm_bridge``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import Image, JointState

import reflexlab.ros  # noqa: F401  (sets the ROS environment before rclpy loads)
from reflexlab.ros.common import node_main, run_node, state_qos
from reflexlab.ros.topics import ArmTopics
from sim.registry import get_task, sim_as_real_tasks
from sim.ros.realtime_bridge import RealtimeBridge

PARAMETERS: dict[str, object] = {
    "task": "panda-push-t",
    "seed": 0,
    "publish_rate_hz": 100.0,  # joint states and end-effector pose
    "tracker_rate_hz": 30.0,  # object poses, as a camera-based tracker would deliver them
    "command_timeout_s": 0.5,  # no target for this long: hold where the arm is
    "camera_rate_hz": 10.0,  # the scene camera (MJCF camera "side"), rendered offscreen; 0 = off
    "camera_width": 160,
    "camera_height": 120,
    "diagnostics_period_s": 1.0,
}
CAMERA = "side"
CAMERA_TOPIC = "/camera/color/image_raw"  # where camera_node (RealSense) publishes on the robot


class ArmBridge(RealtimeBridge):
    """Steps a task's real-time scene (`TaskEntry.realtime`, e.g. `RealtimePushT`) and speaks `ArmTopics`."""

    kind, hardware_id, silence = "sim arm", "franka-panda (sim)", "holding: no targets"

    def __init__(self, node_name: str = "arm_bridge", topics: ArmTopics | None = None, **kwargs: Any) -> None:
        super().__init__(node_name, **kwargs)
        for name, default in PARAMETERS.items():
            self.declare_parameter(name, default)
        p = {name: self.get_parameter(name).value for name in PARAMETERS}
        if p["task"] not in sim_as_real_tasks():
            raise ValueError(f"arm bridge task must be one of {tuple(sim_as_real_tasks())}, got {p['task']!r}")
        self.sim = get_task(p["task"]).realtime(int(p["seed"]))
        self.topics = t = topics or ArmTopics.tracking(self.sim.tracked_objects)
        self.publish_every = max(1, round(1.0 / (self.sim.dt * float(p["publish_rate_hz"]))))
        self.tracker_every = max(1, round(1.0 / (self.sim.dt * float(p["tracker_rate_hz"]))))
        qos = state_qos(best_effort=False)
        self._js_pub = self.create_publisher(JointState, t.joint_states, qos)
        self._ee_pub = self.create_publisher(PoseStamped, t.ee_pose, qos)
        self._tracker_pubs = {
            n: self.create_publisher(PoseStamped, t.objects[n], qos) for n in self.sim.tracked_objects
        }
        self.create_subscription(PoseStamped, t.ee_target, self._on_target, qos)
        self._js = JointState(name=list(self.sim.joint_names))
        self._ee = PoseStamped()
        self._tracked = {name: PoseStamped() for name in self.sim.tracked_objects}
        for msg in (self._ee, *self._tracked.values()):
            msg.header.frame_id = "base"
        self.targets = self.rejected = 0
        camera = None
        if float(p["camera_rate_hz"]) > 0:
            pub = self.create_publisher(Image, CAMERA_TOPIC, qos)
            size = (int(p["camera_height"]), int(p["camera_width"]))
            camera = (pub, float(p["camera_rate_hz"]), size, CAMERA, "camera_color_optical_frame")
        self._start_bridge(
            float(p["command_timeout_s"]), t.sim_reset, t.sim_reset_done, float(p["diagnostics_period_s"]), camera
        )
        self.get_logger().info(
            f"{p['task']}: physics {1 / self.sim.dt:g} Hz, arm state every {self.publish_every} step(s) on "
            f"{t.joint_states} + {t.ee_pose}, tracker on {', '.join(t.objects[n] for n in self.sim.tracked_objects)}, "
            f"targets on {t.ee_target}"
        )

    def _on_target(self, msg: PoseStamped) -> None:
        xyz = np.array([msg.pose.position.x, msg.pose.position.y, msg.pose.position.z])
        try:
            self.sim.set_tip_target(xyz)
        except ValueError as e:
            self.rejected += 1
            self.get_logger().warning(f"rejected target: {e}", throttle_duration_sec=1.0)
            return
        self.targets += 1
        self.watchdog.fed()

    def _on_silence(self) -> None:
        self.sim.hold()

    def _after_reset(self) -> None:
        self._publish_state(tracker=True)

    def _after_step(self, step: int) -> None:
        tracker = step % self.tracker_every == 0
        if tracker or step % self.publish_every == 0:
            self._publish_state(tracker)

    def _publish_state(self, tracker: bool) -> None:
        s = self.sim.state()
        stamp = self.get_clock().now().to_msg()
        js, ee = self._js, self._ee
        js.header.stamp = ee.header.stamp = stamp
        js.position, js.velocity, js.effort = s.joint_pos.tolist(), s.joint_vel.tolist(), s.joint_effort.tolist()
        _set_pose(ee, s.tip_pos, s.tip_quat)
        self._js_pub.publish(js)
        self._ee_pub.publish(ee)
        if tracker:
            for name, pose in self.sim.tracked_poses().items():
                msg = self._tracked[name]
                msg.header.stamp = stamp
                _set_pose(msg, pose[:3], pose[3:])
                self._tracker_pubs[name].publish(msg)

    def diagnostics(self) -> dict[str, float | int | str]:
        return {
            **super().diagnostics(),
            "targets": self.targets,
            "rejected_targets": self.rejected,
            "clipped_targets": self.sim.clipped_targets,
            "holds": self.watchdog.trips,
            **self.sim.diagnostics(),
        }


def _set_pose(msg: PoseStamped, position: np.ndarray, quat_wxyz: np.ndarray) -> None:
    p, q = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in position)
    q.w, q.x, q.y, q.z = (float(v) for v in quat_wxyz)


def run(
    task: str = "panda-push-t",
    seed: int = 0,
    publish_rate_hz: float = 100.0,
    tracker_rate_hz: float = 30.0,
    command_timeout_s: float = 0.5,
    seconds: float | None = None,
) -> dict:
    """Run until Ctrl-C (or ``seconds``); returns the final diagnostics. `reflexlab sim-bridge` calls this."""
    parameters = {
        "task": task,
        "seed": int(seed),
        "publish_rate_hz": float(publish_rate_hz),
        "tracker_rate_hz": float(tracker_rate_hz),
        "command_timeout_s": float(command_timeout_s),
    }
    return run_node(ArmBridge, parameters, seconds)


def main(argv: list[str] | None = None) -> None:
    """``ros2 run reflexlab arm_bridge --ros-args -p task:=panda-push-t``"""
    node_main(ArmBridge, argv, print_diagnostics=True)


if __name__ == "__main__":
    main()
