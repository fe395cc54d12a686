"""What `reflexlab bench distill` reports: the issue's bars, flat JSON metrics, the tables and the plot.

Kept apart from the pipeline (`distill`) because it is pure arithmetic and printing over the rows
the pipeline collects — {policy@steps: {metric: one value per training seed}} — and is tested on
its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from reflexlab.bench import print_table

# The bars. "Clearly beats" the 1-step teacher: +0.1 mean max coverage (the published gap
# is ~0.8: DDIM 1 step scores 0). "Keeps both modes" (does not collapse): overall the rarer way
# round is ≥ 25 % of the samples, and both ways appear (each ≥ 5 % of the samples) at ≥ 80 % as
# many of the expert's two-sided states as for the 100-step teacher. Relative, because a teacher
# that has learnt the task commits to one way at some of those states itself (0.75 of them here).
BAR_RATIO, BAR_GAIN, BAR_P99_US, BAR_SPEEDUP = 0.95, 0.1, 1000.0, 30.0
BAR_BOTH_MODES_STATES, BAR_MINORITY_MODE = 0.8, 0.25


def bars(
    rows: dict[str, dict[str, list[float]]], teacher: str, students: tuple[str, ...], sampling: tuple[int, ...]
) -> dict[str, bool]:
    """Each bar of the issue, per student, as met / not met (means over training seeds)."""
    ref, one = rows[f"{teacher}@{max(sampling)}"], rows[f"{teacher}@1"]
    out: dict[str, bool] = {}
    for m in students:
        r = rows[f"{m}@1"]
        for metric in ("mean_max_coverage", "success_rate"):
            t, v = _compared(ref, r, metric)
            out[f"{m}: {metric} >= {BAR_RATIO:.0%} of teacher@{max(sampling)}"] = t > 0 and v >= BAR_RATIO * t
        gain = float(np.mean(r["mean_max_coverage"]) - np.mean(one["mean_max_coverage"]))
        out[f"{m}: mean max coverage >= teacher@1 + {BAR_GAIN}"] = gain >= BAR_GAIN
        if "latency_p99_us" in r:
            out[f"{m}: latency p99 <= {BAR_P99_US:.0f} us"] = r["latency_p99_us"][0] <= BAR_P99_US
            out[f"{m}: teacher@{max(sampling)} / student latency >= {BAR_SPEEDUP:.0f}x"] = (
                ref["latency_p50_us"][0] / r["latency_p50_us"][0] >= BAR_SPEEDUP
            )
        if "mode_ccw_fraction" in r:
            minority = min(r["mode_ccw_fraction"][0], r["mode_cw_fraction"][0])
            both = BAR_BOTH_MODES_STATES * ref["states_with_both_modes_fraction"][0]
            out[f"{m}: both modes kept"] = (
                r["states_with_both_modes_fraction"][0] >= both and minority >= BAR_MINORITY_MODE
            )
    return out


def _compared(ref: dict[str, list[float]], row: dict[str, list[float]], metric: str) -> tuple[float, float]:
    """(teacher, student) means of ``metric`` as the ratio bars judge it: on the bar episodes when both have them."""
    key = f"bar_{metric}" if f"bar_{metric}" in ref and f"bar_{metric}" in row else metric
    return float(np.mean(ref[key])), float(np.mean(row[key]))


def flatten_metrics(
    rows: dict[str, dict[str, list[float]]], teacher: str, students: tuple[str, ...], sampling: tuple[int, ...]
) -> dict[str, Any]:
    """One number per key for the JSON line: each row's means (and stds over training seeds), the students'
    ratios to teacher@max and gains over teacher@1, and the latency ratios."""
    out: dict[str, Any] = {}
    for name, r in rows.items():
        key = name.replace("@", "_").replace("-", "_")
        for metric, values in r.items():
            out[f"{key}_{metric}"] = float(np.mean(values))
            if len(values) > 1:
                out[f"{key}_{metric}_std"] = float(np.std(values))
    ref = f"{teacher}@{max(sampling)}"
    one = f"{teacher}@1"
    for m in students:
        s = f"{m}@1"
        for metric in ("mean_max_coverage", "success_rate"):
            t, v = _compared(rows[ref], rows[s], metric)
            out[f"{m}_{metric}_ratio_to_teacher{max(sampling)}"] = v / t if t else None
            out[f"{m}_{metric}_gain_over_teacher1"] = float(np.mean(rows[s][metric]) - np.mean(rows[one][metric]))
        if "latency_p50_us" in rows[s]:
            out[f"latency_ratio_teacher{max(sampling)}_to_{m}"] = float(
                rows[ref]["latency_p50_us"][0] / rows[s]["latency_p50_us"][0]
            )
    return out


def print_tables(
    rows: dict[str, dict[str, list[float]]], train_seeds: tuple[int, ...], horizons: tuple[int, ...], bar_episodes: int
) -> None:
    """The human tables: each policy at its chosen Ta, then every policy at every Ta."""

    def ms(v: list[float], sem: list[float], fmt: str = "{:.3f}") -> str:
        """Mean ± std over training seeds, or ± the episodes' standard error for one seed."""
        spread = np.std(v) if len(v) > 1 else sem[0]
        return fmt.format(np.mean(v)) + f" ± {fmt.format(spread)}" + ("" if len(v) > 1 else " (sem)")

    table = []
    for name, r in rows.items():
        modes = f"{r['mode_ccw_fraction'][0]:.2f}/{r['mode_cw_fraction'][0]:.2f}" if "mode_ccw_fraction" in r else "-"
        table.append(
            (
                name,
                f"{r['execution_horizon'][0]:.0f}",
                ms(r["mean_max_coverage"], r["mean_max_coverage_sem"]),
                ms(r["success_rate"], r["success_rate_sem"]),
                f"{r.get('latency_p50_us', [float('nan')])[0]:.0f}",
                f"{r.get('latency_p99_us', [float('nan')])[0]:.0f}",
                modes,
                *(
                    (
                        ms(r["bar_mean_max_coverage"], r["bar_mean_max_coverage_sem"]),
                        ms(r["bar_success_rate"], r["bar_success_rate_sem"], "{:.3f}"),
                    )
                    if "bar_success_rate" in r
                    else ("-", "-")
                ),
            )
        )
    print_table(
        f"bench distill — policy@sampling steps at its best Ta; scores over {len(train_seeds)} training seed(s)",
        table,
        (
            "policy",
            "Ta",
            "mean max coverage",
            "success (cov ≥ 0.95)",
            "p50 µs",
            "p99 µs",
            "modes ccw/cw",
            f"coverage, {bar_episodes} bar episodes",
            f"success, {bar_episodes} bar episodes",
        ),
    )
    print_table(
        "bench distill — mean max coverage / success rate at each execution horizon (Ta)",
        [
            (
                name,
                *(
                    f"{np.mean(r[f'ta{ta}_mean_max_coverage']):.3f} / {np.mean(r[f'ta{ta}_success_rate']):.2f}"
                    for ta in horizons
                ),
            )
            for name, r in rows.items()
        ],
        ("policy", *(f"Ta={ta}" for ta in horizons)),
    )


def plot_scores(rows: dict[str, dict[str, list[float]]], path: Path) -> None:
    """Scores and latency side by side, one bar per policy (``distill.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    cov = [np.mean(rows[n]["mean_max_coverage"]) for n in names]
    err = [np.std(rows[n]["mean_max_coverage"]) for n in names]
    a.bar(names, cov, yerr=err, color="tab:blue", alpha=0.8, label="mean max coverage")
    a.bar(
        names,
        [np.mean(rows[n]["success_rate"]) for n in names],
        color="tab:green",
        alpha=0.6,
        width=0.4,
        label="success rate",
    )
    a.set_ylim(0, 1.05)
    a.legend()
    a.set_title("task performance")
    lat = [rows[n].get("latency_p50_us", [np.nan])[0] for n in names]
    b.bar(names, lat, color="tab:orange")
    b.set_yscale("log")
    b.set_ylabel("onnxruntime p50 latency (µs, batch 1, 1 thread)")
    b.set_title("latency")
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
