"""Plots a person would rather look at than read: training curves from TensorBoard logs."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CURVES = (
    ("Train/mean_reward", "mean episode reward"),
    ("Train/mean_episode_length", "mean episode length (steps)"),
    ("term/tracking_lin_vel", "lin. velocity tracking term"),
    ("Episode/fall_rate", "fall rate of finished episodes"),
    ("Policy/mean_std", "action std"),
    ("Loss/learning_rate", "learning rate"),
)


def read_scalars(run_dir: Path) -> dict[str, tuple[list[int], list[float]]]:
    """All scalar series of a run's TensorBoard event files (several when a run was resumed)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, dict[int, float]] = {}
    for event_file in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(event_file), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            series.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return {k: (sorted(v), [v[s] for s in sorted(v)]) for k, v in series.items()}


def plot_training_curves(run_dir: Path, out: Path | None = None) -> Path:
    """Write ``training_curves.png`` next to the logs and return its path."""
    out = out or Path(run_dir) / "training_curves.png"
    scalars = read_scalars(run_dir)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (tag, title) in zip(axes.flat, CURVES, strict=True):
        if tag in scalars:
            steps, values = scalars[tag]
            ax.plot(steps, values, lw=1.5)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    fig.suptitle(f"PPO training — {Path(run_dir).name}")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def plot_command_map(command_map: dict, out: Path) -> Path:
    """Per-command tracking error: one panel per commanded axis pair, colour = error, × = fell."""
    import numpy as np

    cmds = np.asarray(command_map["command"])
    lin = np.asarray(command_map["lin_vel_error"])
    yaw = np.asarray(command_map["yaw_rate_error"])
    fell = np.asarray(command_map["fell"], dtype=bool)
    panels = [(1, "vy (m/s)", lin, "lin. vel. error (m/s)"), (2, "yaw rate (rad/s)", yaw, "yaw-rate error (rad/s)")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (idx, label, err, title) in zip(axes, panels, strict=True):
        other = 3 - idx  # the axis held at zero in this panel
        sel = cmds[:, other] == 0
        sc = ax.scatter(cmds[sel, 0], cmds[sel, idx], c=err[sel], s=500, marker="s", cmap="viridis", vmin=0)
        ax.scatter(cmds[sel & fell, 0], cmds[sel & fell, idx], marker="x", c="red", s=120, label="fell")
        for x, y, e in zip(cmds[sel, 0], cmds[sel, idx], err[sel], strict=True):
            ax.annotate(f"{e:.2f}", (x, y), ha="center", va="center", fontsize=7, color="white")
        fig.colorbar(sc, ax=ax)
        ax.set_xlabel("vx (m/s)")
        ax.set_ylabel(label)
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
