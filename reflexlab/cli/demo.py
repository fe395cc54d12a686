"""`reflexlab demo`, the main job: train quadruped-walk, evaluate, export and walk it over ROS 2, in one command.

It chains the other verbs' library calls (`train`, `play`, `export`, the sim-to-sim walk of `bench
sim2sim`) and prints the README's summary table, so it is the one place they are shown working together.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from reflexlab.bench import print_table
from reflexlab.cli.train import train


def demo(
    run_dir: Path = Path("runs/demo"),
    quick: bool = False,
    minutes: float = 10.0,
    num_envs: int = 256,
    profile: str = "fast",
) -> None:
    """The main job: train quadruped-walk headless, evaluate it, export ONNX, print a summary.

    Args:
        run_dir: where checkpoints, logs, video, report and policy.onnx go.
        quick: a CI-sized budget (about a minute of training); the result will not walk well.
        minutes: training budget in wall-clock minutes for the full run.
        num_envs: parallel robots.
        profile: task profile; `--profile full --minutes 30` is the omnidirectional, randomised run.
    """
    from policies.evaluate import EvalOptions, evaluate_run
    from reflexlab.cli.export import export_checkpoint

    t0 = time.monotonic()
    if quick:
        train(run_dir=run_dir, num_envs=64, iterations=10, profile=profile)
    else:
        train(run_dir=run_dir, num_envs=num_envs, iterations=100_000, profile=profile, time_budget_s=minutes * 60)
    ev = evaluate_run(
        run_dir,
        EvalOptions(
            episodes=8 if quick else 32,
            episode_s=5.0 if quick else None,
            video=run_dir / "rollout.mp4",
            command_map=profile != "fast" and not quick,
        ),
    )
    onnx_path = run_dir / "policy.onnx"
    ex = export_checkpoint(run_dir, onnx_path, num_obs=200 if quick else 1000)
    # The whole deployment path: the exported file served by the ROS 2 policy node (safety filter
    # on) driving the MuJoCo sim bridge in real time, at the evaluation command.
    from reflexlab.cli.bench.sim2sim import walk_over_ros

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # the demo never talks to the LAN
    command = tuple(ev["per_episode"]["command"][0])
    walk_s = 3.0 if quick else 10.0
    ros = walk_over_ros(onnx_path, command=command, seconds=walk_s)
    play_speed = ev["summary"]["distance_m"] / ev["summary"]["episode_s"]
    s = ev["summary"]
    lines = [
        ("task / profile", f"{s['task']} / {s['profile']} (iteration {s['iteration']})"),
        ("episodes", f"{s['episodes']} × {s['episode_s']:.0f} s, {_describe_commands(ev['per_episode']['command'])}"),
        ("no-fall rate", f"{s['no_fall_rate']:.1%}"),
        ("velocity tracking error", f"{s['lin_vel_error_m_s']:.3f} m/s (yaw {s['yaw_rate_error_rad_s']:.3f} rad/s)"),
        ("distance walked", f"{s['distance_m']:.2f} m per episode"),
        ("gait", f"stepping {s['stepping_hz']:.2f} Hz, foot slip in contact {s['slip_m_s']:.3f} m/s"),
        ("export parity", f"max abs error {ex['max_abs_error']:.2e} over {ex['num_obs']} observations"),
        (
            "ROS 2 sim-to-sim",
            f"{ros.distance_m:.2f} m in {walk_s:.0f} s ({ros.distance_m / walk_s:.2f} m/s; play "
            f"{play_speed:.2f} m/s), {'fell' if ros.fell else 'no fall'}, "
            f"velocity error {ros.lin_vel_error_m_s:.3f} m/s",
        ),
        (
            "policy node",
            f"{ros.policy['mean_rate_hz']:.0f} Hz (asked {ros.policy['rate_hz']:.0f}), step latency p50/p99 "
            f"{ros.policy['latency_p50_us']:.0f}/{ros.policy['latency_p99_us']:.0f} µs, "
            f"{ros.policy['deadline_misses']} deadline misses, bridge real-time factor "
            f"{ros.bridge['real_time_factor']:.3f}",
        ),
        ("artefacts", f"{onnx_path}, {run_dir / 'rollout.mp4'}, {ev['report']}, {run_dir / 'training_curves.png'}"),
        ("wall time", f"{(time.monotonic() - t0) / 60:.1f} min"),
    ]
    print_table("reflexlab demo — summary", [(k, v) for k, v in lines], ("", ""))


def _describe_commands(commands: list[list[float]]) -> str:
    """The evaluation commands in words: the one command, or how many were sampled."""
    if all(c == commands[0] for c in commands):
        vx, vy, yaw = commands[0]
        return f"command vx={vx:g} m/s, vy={vy:g} m/s, yaw rate={yaw:g} rad/s"
    return f"{len(commands)} commands sampled from the profile's ranges"
