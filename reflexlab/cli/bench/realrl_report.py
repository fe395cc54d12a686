"""`bench realrl`'s report: mean ± std over training seeds, the issue's bars for the task, a table and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from reflexlab.bench import print_table

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ORDER = (
    "sft", "sft-longer", "awbc", "habc", "habc-unaware", "habc-select", "select", "select-head", "rl100-offline",
    "rl100-online", "rl100-head", "rl100-random-offline", "rl100-random-online", "rl100-random-head",
)  # fmt: skip
TWO_HOURS = 2.0


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    got = [v for v in values if v is not None]
    if not got:
        return None, None
    return float(np.mean(got)), float(np.std(got, ddof=1)) if len(got) > 1 else 0.0


def report(task: str, per_seed: dict[int, dict[str, Any]], episodes: int, out_dir: Path, talk: bool) -> dict[str, Any]:
    """The bench's metrics from each seed's figures; prints the table and writes the plot when ``talk``."""
    names = [n for n in ORDER if all(n in s["policies"] for s in per_seed.values())]
    policies: dict[str, Any] = {}
    for name in names:
        runs = [s["policies"][name] for s in per_seed.values()]
        success, success_std = _mean_std([r["success"] for r in runs])
        tts, tts_std = _mean_std([r["time_to_success_s"] for r in runs])
        policies[name] = {
            "success_mean": success,
            "success_std": success_std,
            "time_to_success_s_mean": tts,
            "time_to_success_s_std": tts_std,
            "per_seed": runs,
        }
        if "latency_p99_us" in runs[0]:
            policies[name]["latency_p99_us"] = max(r["latency_p99_us"] for r in runs)
    methods = sorted({m for s in per_seed.values() for m in s["rounds"]})
    rounds = {m: _rounds(m, [s["rounds"][m] for s in per_seed.values() if m in s["rounds"]]) for m in methods}
    metrics = {
        "task": task,
        "train_seeds": sorted(per_seed),
        "eval_episodes": episodes,
        "policies": policies,
        "rounds": rounds,
        "bars": bars(task, policies, rounds),
        "controls": controls(per_seed),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics["plot"] = str(plot(task, policies, rounds, out_dir / f"realrl_{task}.png"))
    if talk:
        _table(task, policies, rounds, metrics["bars"], metrics["controls"])
    return metrics


def _rounds(method: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-round figures averaged over seeds (rounds beyond the shortest seed's are left out)."""
    shortest = min(len(r["interventions_per_episode"]) for r in runs)
    per_round = np.array([r["interventions_per_episode"][:shortest] for r in runs])
    success = np.array([r["success_per_round"][:shortest] for r in runs])
    robot, robot_std = _mean_std([r["robot_time_h"] for r in runs])
    return {
        "interventions_per_episode_mean": per_round.mean(0).tolist(),
        "interventions_per_episode_std": per_round.std(0).tolist(),
        "rollout_success_mean": success.mean(0).tolist(),
        "robot_time_h_mean": robot,
        "robot_time_h_std": robot_std,
        "ope_accepted": [r["ope_accepted"] for r in runs],
        "ope_rejected": [r["ope_rejected"] for r in runs],
        "rounds_stopped_at_trust_region": [r.get("rounds_stopped_at_trust_region", 0) for r in runs],
        "per_seed": runs,
    }


def bars(task: str, policies: dict[str, Any], rounds: dict[str, Any]) -> dict[str, Any]:
    """The issue's bars that this run's policies and task can decide (pass/fail with the numbers behind it)."""
    out: dict[str, Any] = {}

    def success(name: str) -> float | None:
        return policies.get(name, {}).get("success_mean")

    if task == "panda-push-t" and "rl100" in rounds:
        final = success("rl100-online") if success("rl100-online") is not None else success("rl100-offline")
        if final is not None:
            out["rl100_success_ge_0.98"] = {"value": final, "pass": final >= 0.98}
        robot = rounds["rl100"]["robot_time_h_mean"]
        out["rl100_robot_time_le_2h"] = {"value": robot, "pass": robot is not None and robot <= TWO_HOURS}
        sft_t = policies.get("sft", {}).get("time_to_success_s_mean")
        rl_t = policies.get("rl100-online", policies.get("rl100-offline", {})).get("time_to_success_s_mean")
        if sft_t and rl_t:
            out["rl100_time_to_success_le_0.8x_sft"] = {"value": rl_t / sft_t, "pass": rl_t / sft_t <= 0.8}
        out |= _head_bars("head", policies.get("rl100-head"), final)
        out["rl100_no_accepted_round_worse_by_1se"] = _monotone(rounds["rl100"])
    out |= _head_bars("select_head", policies.get("select-head"), success("select"))
    for name in ("habc-select", "select"):  # critic-guided picks as BC targets: judged on HABC's bar over SFT
        picked, sft = success(name), success("sft")
        if task == "panda-peg-insert" and picked is not None and sft is not None:
            out[f"{name.replace('-', '_')}_minus_sft_ge_0.30"] = {"value": picked - sft, "pass": picked - sft >= 0.30}
    if task == "panda-peg-insert" and "habc" in rounds:
        habc, sft = success("habc"), success("sft")
        if habc is not None and sft is not None:
            out["habc_minus_sft_ge_0.30"] = {"value": habc - sft, "pass": habc - sft >= 0.30}
            out["sft_between_0.2_and_0.6"] = {"value": sft, "pass": 0.2 <= sft <= 0.6}
        if habc is not None and success("awbc") is not None:
            out["habc_above_awbc"] = {"value": habc - success("awbc"), "pass": habc > success("awbc")}
        if habc is not None and success("habc-unaware") is not None:
            gap = habc - success("habc-unaware")
            out["unaware_ablation_worse"] = {"value": gap, "pass": gap > 0}
        robot = rounds["habc"]["robot_time_h_mean"]
        out["habc_robot_time_le_2h"] = {"value": robot, "pass": robot is not None and robot <= TWO_HOURS}
        per_round = rounds["habc"]["interventions_per_episode_mean"]
        if len(per_round) >= 2:
            slope = float(np.polyfit(np.arange(len(per_round)), per_round, 1)[0])
            out["habc_interventions_falling"] = {"slope_per_round": slope, "pass": slope < 0}
    return out


def controls(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Success differences on the same evaluation episodes, paired per training seed (mean ± std over seeds, and each
    seed's): RL-100 against its random-advantage control, stage by stage (a gain that does not beat the control is the
    scatter of moving the policy, not learning: `policies.rl.rl100.Rl100Config.advantage`), and every policy against
    ``sft-longer``, the SFT trained on for as many steps on the demonstrations alone (a gain that does not beat it
    was to be had without a robot)."""
    out: dict[str, Any] = {}
    pairs = [s["policies"] for s in per_seed.values()]

    def gap(name: str, baseline: str) -> dict[str, Any] | None:
        if not all(name in p and baseline in p for p in pairs):
            return None
        gaps = [p[name]["success"] - p[baseline]["success"] for p in pairs]
        mean, std = _mean_std(gaps)
        return {"mean": mean, "std": std, "per_seed": gaps}

    for stage in ("offline", "online", "head"):
        if (found := gap(f"rl100-{stage}", f"rl100-random-{stage}")) is not None:
            out[f"rl100_{stage}_minus_random_control"] = found
    for name in ORDER:
        if name not in ("sft", "sft-longer") and (found := gap(name, "sft-longer")) is not None:
            out[f"{name.replace('-', '_')}_minus_sft_longer"] = found
    return out


def _head_bars(prefix: str, head: dict[str, Any] | None, multistep: float | None) -> dict[str, Any]:
    """The served one-step head's bars: ≥ 0.97× the multi-step policy's success, onnxruntime p99 ≤ 1 ms."""
    if head is None:
        return {}
    out: dict[str, Any] = {}
    if multistep is not None:
        ratio = head["success_mean"] / multistep if multistep > 0 else None
        ok = head["success_mean"] >= 0.97 * multistep
        out[f"{prefix}_success_ge_0.97x_multistep"] = {"value": ratio, "head": head["success_mean"], "pass": ok}
    p99 = head.get("latency_p99_us")
    out[f"{prefix}_p99_le_1ms"] = {"value_us": p99, "pass": p99 is not None and p99 <= 1000.0}
    return out


def _monotone(rl100: dict[str, Any]) -> dict[str, Any]:
    """No round's rollout success below the previous round's by more than one standard error (every seed)."""
    worst = 0.0
    for run in rl100["per_seed"]:
        success, n = run["success_per_round"], run["episodes_per_round"]
        for i in range(1, len(success)):
            se = np.sqrt(max(success[i - 1] * (1 - success[i - 1]), 1e-12) / max(n[i - 1], 1))
            worst = max(worst, float((success[i - 1] - success[i]) / se))
    return {"worst_drop_in_se": worst, "pass": worst <= 1.0}


def plot(task: str, policies: dict[str, Any], rounds: dict[str, Any], out: Path) -> Path:
    """Success of every policy (mean ± std over seeds) and interventions per episode per round of each method."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(policies)
    means = [policies[n]["success_mean"] for n in names]
    stds = [policies[n]["success_std"] or 0.0 for n in names]
    left.bar(names, means, yerr=stds, capsize=4, color="tab:blue")
    left.set_ylim(0, 1.05)
    left.set_ylabel("success (evaluation, no person)")
    left.set_title(f"{task}: mean ± std over training seeds")
    left.tick_params(axis="x", rotation=30)
    for method, r in rounds.items():
        y = np.array(r["interventions_per_episode_mean"])
        right.errorbar(np.arange(len(y)), y, yerr=r["interventions_per_episode_std"], marker="o", label=method)
    right.set_xlabel("round (version deployed)")
    right.set_ylabel("interventions / episode")
    right.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _fmt(mean: float | None, std: float | None, digits: int = 3) -> str:
    return "-" if mean is None else f"{mean:.{digits}f} ± {std or 0.0:.{digits}f}"


def _table(
    task: str, policies: dict[str, Any], rounds: dict[str, Any], bar: dict[str, Any], control: dict[str, Any]
) -> None:
    rows = [
        (n, _fmt(p["success_mean"], p["success_std"]), _fmt(p["time_to_success_s_mean"], p["time_to_success_s_std"], 2))
        for n, p in policies.items()
    ]
    print_table(f"bench realrl: {task}", rows, ("policy", "success", "time to success (s)"))
    rows = [
        (
            m,
            " ".join(f"{v:.2f}" for v in r["interventions_per_episode_mean"]),
            _fmt(r["robot_time_h_mean"], r["robot_time_h_std"], 2),
            f"{sum(r['ope_accepted'])}/{sum(r['ope_rejected'])}",
            str(sum(r["rounds_stopped_at_trust_region"])),
        )
        for m, r in rounds.items()
    ]
    header = ("method", "interventions/episode per round", "robot time (h)", "OPE acc/rej", "rounds at trust region")
    print_table("rounds", rows, header)
    figures = [(k, str(v["pass"]), str({f: x for f, x in v.items() if f != "pass"})) for k, v in bar.items()]
    print_table("bars", figures, ("bar", "pass", "figures"))
    gaps = [(k, _fmt(v["mean"], v["std"])) for k, v in control.items()]
    if gaps:
        print_table("against the controls (paired per seed)", gaps, ("policy minus control", "success gap"))
