"""`reflexlab bench sim2sim`: the MuJoCo bridge and the policy node walk the robot over ROS 2 in real time.

This is the whole deployment path without hardware — exported ONNX, robot config, policy node
with its safety filter, DDS, a robot that only speaks topics — and its result is compared with
in-process evaluation (`reflexlab play`) of the same policy at the same command.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reflexlab.bench import machine, print_table, write_json
from reflexlab.cli.bench.common import BenchOptions
from reflexlab.cli.common import require


@dataclass(frozen=True)
class Sim2SimBench(BenchOptions):
    """Walk over ROS 2 vs in-process play."""

    run_dir: Path = Path("runs/demo")
    """trained run, exported to RUN_DIR/policy.onnx if needed."""
    seconds: float | None = None
    """walk length (default 10 s; 3 s with --quick)."""

    def run(self) -> dict[str, Any]:
        require(self.run_dir, "a trained run (make demo)")
        seconds = self.seconds or (3.0 if self.quick else 10.0)
        metrics = compare_with_play(self.run_dir, seconds=seconds, episodes=2 if self.quick else 8)
        if self.table:
            print_table(
                "bench sim2sim — walk over ROS 2 vs in-process play", list(metrics.items()), ("metric", "value")
            )
        metrics.update({"machine": machine(), "config": {"run_dir": str(self.run_dir)}})
        write_json(metrics, self.out_dir, "sim2sim")
        return metrics


@dataclass
class WalkResult:
    distance_m: float
    mean_forward_speed_m_s: float
    lin_vel_error_m_s: float
    fell: bool
    policy: dict[str, Any]  # the policy node's diagnostics at the end
    bridge: dict[str, Any]  # the bridge's diagnostics at the end


def walk_over_ros(
    model: Path,
    command: tuple[float, float, float] = (0.5, 0.0, 0.0),
    seconds: float = 10.0,
    robot: str = "quadruped",
    task: str = "quadruped-walk",
    rate_hz: float | None = None,
) -> WalkResult:
    """Bridge + policy node in this process (one EventsExecutor), a Twist publisher for the command.

    The node runs at the bridge's physics rate by default (a command per physics step).
    """
    import rclpy
    from geometry_msgs.msg import Twist
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    import reflexlab.ros  # noqa: F401
    from deploy.ros.policy_node import PolicyNode
    from reflexlab.ros.common import spin, wait_until
    from sim.ros.sim_bridge import SimBridge
    from sim.tasks.quadruped.evaluate import TRACKING_WARMUP_S

    own_context = not rclpy.ok()
    if own_context:
        rclpy.init()
    try:
        bridge = SimBridge(parameter_overrides=[Parameter("task", value=task), Parameter("robot_config", value=robot)])
        rate = rate_hz or 1.0 / bridge.sim.dt
        node = PolicyNode(
            parameter_overrides=[
                Parameter("model_path", value=str(model)),
                Parameter("robot_config", value=robot),
                Parameter("rate_hz", value=float(rate)),
                Parameter("autostart", value=False),
            ]
        )
        teleop = rclpy.create_node("velocity_command")
        pub = teleop.create_publisher(Twist, bridge.robot_cfg.topics.velocity_command, 10)
        twist = Twist()
        twist.linear.x, twist.linear.y, twist.angular.z = command
        teleop.create_timer(0.05, lambda: pub.publish(twist))
        try:
            if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                raise RuntimeError(f"policy node refused to configure: {node.error}")
            # wait for discovery and the first command, never a fixed sleep
            wait_until(
                [bridge, node, teleop],
                lambda: node.ctl._command_t > -math.inf and bridge._js_pub.get_subscription_count() > 0,
                what="the policy node to match the bridge and receive the velocity command",
            )
            bridge.reset()  # start standing, like a reset episode
            node.trigger_activate()
            t1 = time.monotonic()
            spin([bridge, node, teleop], until=lambda: time.monotonic() - t1 >= seconds)
            policy_diag, bridge_diag = node.diagnostics(), bridge.diagnostics()
            traj = bridge.trajectory()
            fell = bridge.sim.fallen
        finally:
            for n in (node, bridge, teleop):
                n.destroy_node()
    finally:
        if own_context:
            rclpy.try_shutdown()
    warm = traj[:, 0] >= TRACKING_WARMUP_S
    err = np.linalg.norm(traj[warm, 4:6] - np.asarray(command[:2]), axis=1)
    return WalkResult(
        distance_m=float(np.linalg.norm(traj[-1, 1:3] - traj[0, 1:3])),
        mean_forward_speed_m_s=float(traj[warm, 4].mean()),
        lin_vel_error_m_s=float(err.mean()),
        fell=fell,
        policy=policy_diag,
        bridge=bridge_diag,
    )


def compare_with_play(
    run_dir: Path,
    command: tuple[float, float, float] = (0.5, 0.0, 0.0),
    seconds: float = 10.0,
    episodes: int = 8,
) -> dict[str, Any]:
    """The sim-to-sim walk next to `reflexlab play` of the same run (same command and duration)."""
    from policies.evaluate import EvalOptions, evaluate_run
    from reflexlab.cli.export import export_checkpoint

    os.environ.setdefault("MUJOCO_GL", "egl")
    model = run_dir / "policy.onnx"
    if not model.exists():
        export_checkpoint(run_dir, model)
    options = EvalOptions(episodes, seconds, command=command, report=run_dir / "eval_sim2sim_play.json")
    play = evaluate_run(run_dir, options)["summary"]
    ros = walk_over_ros(model, command=command, seconds=seconds)
    play_speed = play["distance_m"] / seconds
    return {
        "command_vx_m_s": command[0],
        "seconds": seconds,
        "play_distance_m": play["distance_m"],
        "ros_distance_m": ros.distance_m,
        "distance_ratio": ros.distance_m / max(play["distance_m"], 1e-9),
        "play_lin_vel_error_m_s": play["lin_vel_error_m_s"],
        "ros_lin_vel_error_m_s": ros.lin_vel_error_m_s,
        "play_mean_speed_m_s": play_speed,
        "ros_mean_speed_m_s": ros.distance_m / seconds,  # as play's: distance over the episode
        "ros_forward_speed_after_warmup_m_s": ros.mean_forward_speed_m_s,
        "play_no_fall_rate": play["no_fall_rate"],
        "ros_fell": int(ros.fell),
        "ros_mean_rate_hz": ros.policy["mean_rate_hz"],
        "ros_latency_p99_us": ros.policy["latency_p99_us"],
        "ros_deadline_misses": ros.policy["deadline_misses"],
        "ros_real_time_factor": ros.bridge["real_time_factor"],
        **{f"ros_{k.replace('.', '_')}": v for k, v in ros.policy.items() if k.startswith("intervention.")},
    }
