"""`reflexlab bench serve`: the policy node under load, cross-process, over real ROS 2.

For each rate, a fresh policy-node process serves the exported policy (at the model's control
rate, as deployed; or on every state with ``--inference-every-state``, the worst case) while this
process publishes IMU + JointState at that rate and receives the commands. A JointTrajectory
command carries the stamp of the state it answers, so the round trip (state published → command
received) is measured on one clock per state. Reported per rate: achieved command rate, round-trip
p50/p99/p99.9, deadline misses (a state whose command came later than one period, or never), CPU
use of the node process — and, in the same run, the same figures for a bare rclpy echo process
(same topics, QoS and executor; no validation, policy or safety): the floor this machine's DDS and
Python set, so the node's own cost reads as a difference rather than against a number measured on
another day.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from reflexlab.bench import cpu_steal_percent, cpu_times, machine, print_table, write_json
from reflexlab.cli.bench.common import BenchOptions
from reflexlab.cli.common import require

DEFAULT_SECONDS = {100: 60.0, 500: 20.0, 1000: 20.0}
WARMUP_S = 1.0


@dataclass(frozen=True)
class ServeBench(BenchOptions):
    """Policy node under a cross-process JointState load at each rate."""

    model: Path = Path("runs/demo/policy.onnx")
    """exported policy."""
    robot: str = "quadruped"
    """robot config name or YAML path."""
    rates: tuple[int, ...] = (100, 500, 1000)
    """state rates in Hz."""
    seconds: float | None = None
    """measured seconds per rate (default 60 s at 100 Hz, 20 s otherwise)."""
    inference_every_state: bool = False
    """evaluate the policy on every state instead of at the model's rate."""

    def run(self) -> dict[str, Any]:
        require(self.model, "an exported policy (reflexlab export, or make demo)")
        return bench_serve(
            self.model,
            self.robot,
            self.rates,
            self.seconds,
            self.quick,
            self.table,
            self.out_dir,
            inference_every_state=self.inference_every_state,
        )


def bench_serve(
    model: Path,
    robot: str = "quadruped",
    rates: tuple[int, ...] = (100, 500, 1000),
    seconds: float | None = None,
    quick: bool = False,
    table: bool = True,
    out_dir: Path = Path("runs/bench"),
    inference_every_state: bool = False,
) -> dict[str, Any]:
    """Run the load at each rate against the node and against the bare echo; see the module docstring.

    ``inference_every_state`` evaluates the policy on every state (the worst case) instead of at
    the model's control rate (how the node is deployed: 50 Hz for the quadruped).
    """
    import reflexlab.ros  # noqa: F401
    from reflexlab.robot import resolve_robot_config

    out_dir.mkdir(parents=True, exist_ok=True)
    # The same robot, but commands as JointTrajectory: it carries the answered state's stamp.
    cfg = yaml.safe_load(resolve_robot_config(robot).read_text())
    cfg.setdefault("command", {})["type"] = "joint_trajectory"
    robot_file = Path(tempfile.mkdtemp(prefix="reflexlab-bench-")) / "robot.yaml"
    robot_file.write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, ROS_DOMAIN_ID=os.environ.get("ROS_DOMAIN_ID", str(100 + os.getpid() % 100)))
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.update({k: env[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")})
    metrics: dict[str, Any] = {}
    latencies: dict[int, np.ndarray] = {}
    rows = []
    cpu_before = cpu_times()
    for rate in rates:
        duration = seconds or (3.0 if quick else DEFAULT_SECONDS.get(rate, 20.0))
        node_cmd = [
            sys.executable, "-m", "deploy.ros.policy_node", "--ros-args",
            "-p", f"model_path:={Path(model).resolve()}", "-p", f"robot_config:={robot_file}",
            "-p", f"rate_hz:={float(rate)}",
            "-p", f"policy_rate_hz:={float(rate) if inference_every_state else 0.0}",
            "--log-level", "warn",
        ]  # fmt: skip
        # The floor of this machine in the same run: a bare rclpy echo (same topics, QoS and
        # executor, no validation, policy or safety) answering each joint state at once.
        echo_cmd = [sys.executable, "-m", "reflexlab.cli.bench.echo", str(robot_file)]
        echo = _measure(echo_cmd, cfg, rate, min(duration, 10.0), env, out_dir / f"serve_echo_{rate}hz.log")
        res = _measure(node_cmd, cfg, rate, duration, env, out_dir / f"serve_node_{rate}hz.log")
        latencies[rate] = res.pop("latencies_us")
        echo.pop("latencies_us")
        metrics.update({f"rate_{rate}_{k}": v for k, v in res.items()})
        metrics.update(
            {f"rate_{rate}_echo_{k}": echo[k] for k in ("latency_p50_us", "latency_p99_us", "latency_p999_us")}
        )
        metrics[f"rate_{rate}_echo_deadline_miss_fraction"] = echo["deadline_miss_fraction"]
        rows.append(
            (
                f"{rate} Hz",
                f"{res['achieved_hz']:.1f}",
                f"{res['latency_p50_us']:.0f} / {res['latency_p99_us']:.0f} / {res['latency_p999_us']:.0f}",
                f"{echo['latency_p50_us']:.0f} / {echo['latency_p99_us']:.0f} / {echo['latency_p999_us']:.0f}",
                f"{res['deadline_miss_fraction']:.2%} ({res['deadline_misses']}); "
                f"echo {echo['deadline_miss_fraction']:.2%}",
                f"{res['node_cpu_percent']:.0f}%",
                f"{res['node_peak_rss_mb']:.0f} MB",
                f"{res['seconds']:.0f} s",
            )
        )
    # The user's own serving command, `reflexlab serve`, loaded at the first rate: its memory is the bar
    # (a robot computer runs it beside everything else; before the layers issue it carried libtorch).
    cli_cmd = [
        sys.executable, "-m", "reflexlab.cli", "serve", "--model", str(Path(model).resolve()),
        "--robot", str(robot_file), "--rate", str(float(rates[0])),
        "--policy-rate", str(float(rates[0]) if inference_every_state else 0.0),
    ]  # fmt: skip
    cli = _measure(cli_cmd, cfg, rates[0], 3.0, env, out_dir / "serve_cli.log")
    metrics.update({f"serve_cli_{k}": cli[k] for k in ("node_rss_mb", "node_peak_rss_mb", "achieved_hz")})
    plot = _plot(latencies, out_dir / "serve_latency.png")
    metrics.update(
        {
            "cpu_steal_percent": cpu_steal_percent(cpu_before, cpu_times()),
            "machine": machine(),
            "config": {
                "model": str(model),
                "robot": robot,
                "rates": list(rates),
                "inference_every_state": inference_every_state,
            },
        }
    )
    if table:
        print_table(
            "bench serve — policy node under a JointState load (cross-process, FastDDS, EventsExecutor)",
            rows,
            (
                "rate",
                "achieved Hz",
                "round trip p50/p99/p99.9 µs",
                "bare echo (floor) µs",
                "deadline misses",
                "node CPU",
                "node peak RSS",
                "measured",
            ),
        )
        print(
            f"`reflexlab serve` at {rates[0]} Hz: peak RSS {cli['node_peak_rss_mb']:.0f} MB "
            f"(now {cli['node_rss_mb']:.0f} MB), {cli['achieved_hz']:.1f} Hz"
        )
        print(f"CPU steal (hypervisor) over the run: {metrics['cpu_steal_percent']:.1f} %")
        print(f"latency histogram: {plot}")
    write_json(metrics, out_dir, "serve")
    return metrics


def _measure(cmd: list[str], cfg: dict, rate: int, duration: float, env: dict, log_path: Path) -> dict[str, Any]:
    """Start ``cmd`` (a node answering joint states), load it at ``rate`` and stop it with SIGINT."""
    import psutil

    from reflexlab.ros.common import clean_shared_memory

    clean_shared_memory()  # zombie segments from earlier killed runs slow DDS down
    with log_path.open("w") as log:  # a file, not a pipe: a full pipe would stall the node
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        return _load(cfg, rate, duration, psutil.Process(proc.pid), proc, log_path)
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _load(
    cfg: dict, rate: int, duration: float, node_proc: Any, proc: subprocess.Popen, log_path: Path
) -> dict[str, Any]:
    """Publish states at ``rate`` for WARMUP_S + ``duration`` and collect the answering commands."""
    import rclpy
    from sensor_msgs.msg import Imu, JointState
    from trajectory_msgs.msg import JointTrajectory

    from reflexlab.ros.common import spin, stamp_ns, state_qos, wait_until

    rclpy.init()
    node = rclpy.create_node("serve_load")
    try:
        qos = state_qos(cfg.get("best_effort", True))
        topics = cfg.get("topics", {})
        js_pub = node.create_publisher(JointState, topics.get("joint_states", "/joint_states"), qos)
        imu_pub = node.create_publisher(Imu, topics.get("imu", "/imu"), qos)
        names = list(cfg["joints"]["names"])
        default = (np.asarray(cfg["joints"]["lower"]) + np.asarray(cfg["joints"]["upper"])) / 2
        rng = np.random.default_rng(0)
        received: dict[int, int] = {}  # state stamp ns -> receive time ns

        def on_command(msg: JointTrajectory) -> None:
            received.setdefault(stamp_ns(msg.header.stamp), time.time_ns())

        sub = node.create_subscription(JointTrajectory, topics.get("joint_command", "/joint_commands"), on_command, qos)

        def sub_matched() -> bool:
            return sub.get_publisher_count() > 0

        sent: list[int] = []
        js = JointState(name=names)
        imu = Imu()
        imu.orientation.w = 1.0

        def publish() -> None:
            imu.header.stamp.sec, imu.header.stamp.nanosec = divmod(time.time_ns(), 1_000_000_000)
            imu_pub.publish(imu)
            js.position = (default + 0.01 * rng.standard_normal(len(names))).tolist()
            js.velocity = (0.1 * rng.standard_normal(len(names))).tolist()
            now = time.time_ns()  # the round trip starts when the joint state leaves
            js.header.stamp.sec, js.header.stamp.nanosec = divmod(now, 1_000_000_000)
            js_pub.publish(js)
            sent.append(now)

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"policy node exited ({proc.returncode}): {log_path.read_text()[-2000:]}")
            return js_pub.get_subscription_count() > 0 and imu_pub.get_subscription_count() > 0 and sub_matched()

        wait_until([node], ready, "the policy node to subscribe", timeout_s=30.0)
        timer = node.create_timer(1.0 / rate, publish)
        # wait until commands come back (the node is active and armed), then warm up
        wait_until([node], lambda: len(received) > 0, "the first command from the policy node", timeout_s=30.0)
        t0 = time.monotonic()
        spin([node], until=lambda: time.monotonic() - t0 >= WARMUP_S)
        first = len(sent)
        cpu0, wall0 = node_proc.cpu_times(), time.monotonic()
        spin([node], until=lambda: time.monotonic() - wall0 >= duration)
        cpu1, wall1 = node_proc.cpu_times(), time.monotonic()
        rss_mb, peak_rss_mb = _rss_mb(node_proc.pid)
        node.destroy_timer(timer)
        last = len(sent)
        t_end = time.monotonic()
        spin([node], until=lambda: time.monotonic() - t_end >= 0.2)  # let in-flight commands land
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    window = sent[first:last]
    lat = np.array([received[s] - s for s in window if s in received], dtype=np.float64) / 1e3
    got = [received[s] for s in window if s in received]
    period_us = 1e6 / rate
    missed = len(window) - lat.size + int((lat > period_us).sum())
    span = (max(got) - min(got)) / 1e9 if len(got) > 1 else math.nan
    p50, p99, p999 = np.percentile(lat, [50, 99, 99.9]) if lat.size else (math.nan,) * 3
    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (wall1 - wall0)
    return {
        "seconds": wall1 - wall0,
        "states_sent": len(window),
        "sent_hz": (len(window) - 1) / ((window[-1] - window[0]) / 1e9) if len(window) > 1 else math.nan,
        "commands_received": lat.size,
        "achieved_hz": (len(got) - 1) / span if span and span > 0 else math.nan,
        "latency_p50_us": float(p50),
        "latency_p99_us": float(p99),
        "latency_p999_us": float(p999),
        "latency_max_us": float(lat.max()) if lat.size else math.nan,
        "deadline_misses": missed,
        "deadline_miss_fraction": missed / max(len(window), 1),
        "node_cpu_percent": 100.0 * cpu,
        "node_rss_mb": rss_mb,
        "node_peak_rss_mb": peak_rss_mb,
        "latencies_us": lat,
    }


def _rss_mb(pid: int) -> tuple[float, float]:
    """(resident, peak resident) memory of process ``pid`` in MiB, as the kernel counts them (VmRSS, VmHWM)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def _plot(latencies: dict[int, np.ndarray], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    finite = [v for v in latencies.values() if v.size]
    hi = max((float(v.max()) for v in finite), default=1e3)
    bins = np.logspace(np.log10(20), np.log10(max(hi, 1e3) * 1.1), 80)
    for rate, values in latencies.items():
        if values.size:
            ax.hist(
                values,
                bins=bins,
                histtype="step",
                linewidth=1.5,
                label=f"{rate} Hz (p99 {np.percentile(values, 99):.0f} µs)",
            )
        ax.axvline(1e6 / rate, linestyle=":", linewidth=0.8, color="grey")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("round trip: JointState published → command received (µs); dotted: one period")
    ax.set_ylabel("states")
    ax.set_title("policy node round-trip latency")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
