"""`reflexlab bench franka`: the driver's 1 kHz loop under a policy-like target stream, against franka-sim.

A policy does not command every millisecond: it sends a target every 10–100 ms from another
thread. The bench streams a smooth Cartesian figure-eight inside the workspace box at
``target_rate_hz`` (20 Hz by default) into a Cartesian-impedance driver while franka-sim (both
enforcement flags on, so any discontinuity is a real reflex) simulates the FR3, and reports how
well the loop held 1 kHz beside the rate franka-sim itself published at (the loop answers the
states it is sent, so that rate is its ceiling), how many commands reached the robot in time,
and how closely the arm followed the stream.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from real.franka.config import DEFAULT_PATH, FrankaConfig
from real.franka.driver import FrankaDriver
from real.franka.sim_server import franka_sim
from reflexlab.bench import cpu_steal_percent, cpu_times, machine, write_json

# Figure-eight (a 1:2 Lissajous curve in the y-z plane) around a point well inside the default box.
CENTER = np.array([0.5, 0.0, 0.5])
AMPLITUDE = np.array([0.0, 0.15, 0.08])  # m
PERIOD_S = 8.0


def figure_eight(t: float) -> np.ndarray:
    w = 2.0 * np.pi / PERIOD_S
    return CENTER + AMPLITUDE * np.array([0.0, np.sin(w * t), np.sin(2.0 * w * t)])


def bench_franka(
    duration_s: float = 30.0,
    target_rate_hz: float = 20.0,
    config_path: str = str(DEFAULT_PATH),
    settle_s: float = 2.0,
) -> dict:
    """Run the stream for ``duration_s`` and return flat metrics (units in the names)."""
    config = replace(FrankaConfig.load(config_path), mode="cartesian_impedance")
    errors_mm: list[float] = []
    cpu_before = cpu_times()
    with franka_sim() as sim:
        config = replace(config, host=sim.host)
        with sim.client():
            driver = FrankaDriver(config).start()
        try:
            quat = driver.state().quaternion_wxyz  # keep the start orientation
            period = 1.0 / target_rate_hz
            t0 = time.monotonic()
            next_t = t0
            while (t := time.monotonic() - t0) < duration_s and driver.running:
                driver.set_ee_target(figure_eight(t), quat)
                if t > settle_s:  # after the move from the start pose onto the curve
                    # the reference lags the stream by design; compare with where the stream was
                    lag = 2.0 * config.impedance.interpolation_time_s
                    errors_mm.append(1e3 * float(np.linalg.norm(driver.state().position - figure_eight(t - lag))))
                next_t += period
                time.sleep(max(0.0, next_t - time.monotonic()))
        finally:
            driver.stop()
            sim_rates = _publish_rates(sim.log_path.read_text(errors="replace"))
    stats = driver.stats()
    cpu_after = cpu_times()
    errors = np.asarray(errors_mm) if errors_mm else np.zeros(1)
    metrics = {k: v for k, v in stats.items() if k not in ("last_error", "reflex_kinds", "targets", "cycles")}
    metrics.update(
        duration_s=duration_s,
        target_rate_hz=target_rate_hz,
        cycles=stats["cycles"],
        targets=stats["targets"],
        # what franka-sim itself published: the loop can only answer the states it is sent
        sim_publish_rate_hz_mean=float(np.mean(sim_rates)) if sim_rates else 0.0,
        tracking_error_mm_mean=float(errors.mean()),
        tracking_error_mm_max=float(errors.max()),
        reflex_kinds=stats["reflex_kinds"],
        last_error=stats["last_error"],
        # time the hypervisor gave our vCPUs to other guests: franka-sim and the loop both lose it
        cpu_steal_percent=cpu_steal_percent(cpu_before, cpu_after),
        machine=machine(),
        config={"mode": config.mode, "interpolation_time_s": config.impedance.interpolation_time_s},
    )
    return metrics


def run_bench_franka(
    seconds: float | None = None, quick: bool = False, table: bool = True, out_dir: Path = Path("runs/bench")
) -> dict:
    """`reflexlab bench franka`: 30 s (``--quick``: 5 s) of the stream; table, ``franka.json``, flat metrics."""
    metrics = bench_franka(duration_s=seconds or (5.0 if quick else 30.0), settle_s=1.0 if quick else 2.0)
    metrics["last_error"] = str(metrics["last_error"] or "")
    metrics["loop_rate_bar_met"] = bool(metrics["loop_rate_hz_mean"] >= 950.0 and metrics["reflexes"] == 0)
    if table:
        print_table(metrics)
    write_json(metrics, out_dir, "franka")
    return metrics


def print_table(metrics: dict) -> None:
    """The human-readable half of the report (the JSON line is the caller's)."""
    rows = [
        ("loop rate (mean)", f"{metrics['loop_rate_hz_mean']:.1f} Hz"),
        ("franka-sim publish rate (mean)", f"{metrics['sim_publish_rate_hz_mean']:.1f} Hz"),
        ("cycle time p50 / p99 / max", _us(metrics, "p50", "p99", "max")),
        ("compute time p99", f"{metrics['compute_time_p99_us']:.0f} µs"),
        (
            "command success rate min / mean",
            f"{metrics['command_success_rate_min']:.3f} / {metrics['command_success_rate_mean']:.4f}",
        ),
        ("reflexes / recoveries", f"{metrics['reflexes']} / {metrics['recoveries']} {metrics['reflex_kinds']}"),
        ("workspace clips / timeouts", f"{metrics['workspace_clips']} / {metrics['timeouts']}"),
        (
            "tracking error mean / max",
            f"{metrics['tracking_error_mm_mean']:.1f} / {metrics['tracking_error_mm_max']:.1f} mm",
        ),
        ("targets", f"{metrics['targets']} at {metrics['target_rate_hz']:g} Hz over {metrics['duration_s']:g} s"),
        ("loop thread priority", str(metrics["loop_priority"] or "normal")),
        ("CPU steal (hypervisor)", f"{metrics['cpu_steal_percent']:.1f} %"),
    ]
    width = max(len(name) for name, _ in rows)
    print("franka driver vs franka-sim (enforcement on)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    if metrics["last_error"]:
        print(f"  last error: {metrics['last_error']}")


def _publish_rates(log: str) -> list[float]:
    """franka-sim's per-second state publish rates (its own stats lines), without the partial first and last."""
    rates = [float(x) for x in re.findall(r"State Update Stats - Freq: ([0-9.]+)Hz", log)]
    return rates[1:-1] if len(rates) > 2 else rates


def _us(metrics: dict, *which: str) -> str:
    return " / ".join(f"{metrics[f'cycle_time_{w}_us']:.0f}" for w in which) + " µs"
