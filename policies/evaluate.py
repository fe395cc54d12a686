"""Evaluate a PPO run: load its latest checkpoint and hand the policy to its task's own evaluator.

The task supplies the evaluation (`TaskEntry.evaluate`: episodes, metrics, video), so this module
names no task; it checks the Spec, writes the JSON report and plots what the task returns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflexlab.config import update_dataclass
from sim.registry import get_task


@dataclass(frozen=True)
class EvalOptions:
    """An evaluation as a user asks for it: `reflexlab play`'s flags, so each default lives here once."""

    episodes: int = 32
    """number of seeded episodes (one robot each, run in parallel)."""
    episode_s: float | None = None
    """episode length in seconds (the task's by default)."""
    video: Path | None = None
    """write an MP4 of episode 0 (offscreen rendering)."""
    report: Path | None = None
    """JSON report path (default: RUN_DIR/eval.json, or eval_<checkpoint>.json for a generative checkpoint)."""
    command: tuple[float, float, float] | None = None
    """fixed (vx, vy, yaw_rate) for every episode; the profile's evaluation command otherwise."""
    command_map: bool = False
    """also evaluate a grid of commands and plot the per-command error map."""
    seed: int = 1000
    """evaluation seed of the first episode (distinct from training seeds)."""
    task: str | None = None
    """refuse the checkpoint unless its Spec matches this task's (names the differing field)."""


def evaluate_run(run_dir: Path, options: EvalOptions | None = None, progress: bool = True) -> dict[str, Any]:
    """Evaluate a run's latest checkpoint under its own task profile and write a JSON report.

    ``command`` and ``command_map`` are the locomotion tasks' options (`sim.tasks.quadruped.evaluate`).
    """
    from policies.actor import load_policy  # torch: imported when a run is evaluated, not when play parses flags

    o = options or EvalOptions()
    episodes, episode_s, video, report, seed, task = o.episodes, o.episode_s, o.video, o.report, o.seed, o.task
    expect = get_task(task).spec() if task else None
    policy = load_policy(run_dir, expect_spec=expect)
    entry = get_task(policy.info["task"])
    if entry.evaluate is None:
        raise ValueError(f"task {entry.name!r} supplies no evaluator for PPO policies")
    profile = policy.info["profile"]
    cfg = update_dataclass(entry.config(profile), policy.info["task_cfg"])
    result = entry.evaluate(
        entry,
        policy.act,
        policy.spec,
        f"checkpoint {policy.path.name}",
        cfg,
        profile,
        episodes,
        episode_s,
        seed,
        video=video,
        progress=progress,
        command=o.command,
        command_map=o.command_map,
    )
    command_map_data = result.pop("command_map", None)
    result.update(
        {
            "checkpoint": str(policy.path),
            "iteration": policy.iteration,
            "task": entry.name,
            "profile": profile,
            "seed": seed,
        }
    )
    out_dir = policy.path.parent
    if command_map_data is not None:
        from policies.report import plot_command_map

        result["command_map"] = command_map_data
        result["command_map_png"] = str(plot_command_map(command_map_data, out_dir / "command_map.png"))
    report = report or out_dir / "eval.json"
    summary = {k: v for k, v in result.items() if k not in ("per_episode", "command_map")}
    result["summary"] = summary
    Path(report).write_text(json.dumps(result, indent=2))
    result["report"] = str(report)
    return result
