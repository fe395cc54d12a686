"""Round bookkeeping of real-world RL: how each deployed version did, read back from the dataset alone.

The dataset is the record (every step carries ``policy_version``), so a learner restarted after a crash, or a person
reading a run a year later, gets the same numbers: nothing here keeps state of its own. The round log
(``rounds.jsonl``, one JSON object per round, appended atomically) and its plot (``rounds.png``: success and
interventions per episode over robot time) are written from these numbers.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import matplotlib
import numpy as np

from policies.rl.credit import segments
from reflexlab.dataset import Dataset

matplotlib.use("Agg")
import matplotlib.pyplot as plt


@dataclass(frozen=True)
class VersionStats:
    """The episodes one policy version ran (robot time = steps × control period)."""

    version: int
    episodes: int
    success_rate: float
    interventions_per_episode: float  # takeovers (a person's segments) per episode
    intervention_step_share: float
    mean_episode_s: float
    mean_time_to_success_s: float | None  # over successful episodes; None without one
    robot_time_s: float


@dataclass(frozen=True)
class RoundOutcome:
    """What one learner round's update produced, whatever the method.

    Attributes:
        checkpoint: the policy to deploy; None when the update produced nothing deployable (e.g. RL-100's offline
            evaluation accepted no candidate): the actor keeps the deployed version and collects more with it.
        numbers: the update's figures for the round log (critic losses, weights, OPE estimates, ...).
        stage: which step of the method this round was (``habc``; RL-100's ``offline``, ``online``, ``distill``).
        reason: why nothing was deployed, when ``checkpoint`` is None.
        sampling_steps: the sampler steps to export the checkpoint with (1 for a one-step head); None: the
            learner's default.
    """

    checkpoint: Path | None
    numbers: dict[str, Any]
    stage: str
    reason: str = ""
    sampling_steps: int | None = None


class RoundUpdate(Protocol):
    """A method's learner round: from the dataset so far and the deployed checkpoint, the next one (or none)."""

    def __call__(self, dataset: Path, checkpoint: Path, out: Path, round_: int) -> RoundOutcome: ...


def version_stats(dataset: Dataset) -> dict[int, VersionStats]:
    """Per version, in version order, the statistics of the committed episodes it ran."""
    period = 1.0 / dataset.fps
    runs: dict[int, list[tuple[int, bool, int, int]]] = {}  # version -> (steps, success, takeovers, person steps)
    for i in range(dataset.num_episodes):
        steps = dataset.episode(i)
        version = int(steps["policy_version"][0])
        person = np.asarray(steps["is_intervention"], dtype=bool)
        takeovers = sum(1 for start, _ in segments(person) if person[start])
        success = bool(np.asarray(steps["next.success"]).any())
        runs.setdefault(version, []).append((len(person), success, takeovers, int(person.sum())))
    stats = {}
    for version in sorted(runs):
        lengths = np.array([r[0] for r in runs[version]])
        success = np.array([r[1] for r in runs[version]])
        stats[version] = VersionStats(
            version=version,
            episodes=len(lengths),
            success_rate=float(success.mean()),
            interventions_per_episode=float(np.mean([r[2] for r in runs[version]])),
            intervention_step_share=float(sum(r[3] for r in runs[version]) / lengths.sum()),
            mean_episode_s=float(lengths.mean() * period),
            mean_time_to_success_s=float(lengths[success].mean() * period) if success.any() else None,
            robot_time_s=float(lengths.sum() * period),
        )
    return stats


def ended_under_intervention(dataset: Dataset, version: int) -> list[int]:
    """Episodes of ``version`` whose person never handed back (the last step was theirs and not a success).

    Nothing is wrong with their data: the policy's steps before the takeover are labelled 0 (`policies.rl.credit`)
    and the person's are demonstrations. They are named in the round log because on a robot they mean a person held
    the deadman to the time limit, or a device that stuck in the intervening state."""
    found = []
    for i in range(dataset.num_episodes):
        steps = dataset.episode(i)
        if int(steps["policy_version"][0]) != version:
            continue
        if bool(np.asarray(steps["is_intervention"])[-1]) and not bool(np.asarray(steps["next.success"]).any()):
            found.append(i)
    return found


def append_round(log: Path, row: dict[str, Any]) -> None:
    """Append one round's row to the JSONL log; the line is written and fsynced whole or not at all."""
    line = json.dumps(row, default=_plain) + "\n"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_rounds(log: Path) -> list[dict[str, Any]]:
    """The rows of a round log (a torn last line, from a crash mid-write, is left out)."""
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def plot_rounds(stats: dict[int, VersionStats], out: Path) -> Path:
    """Success rate and interventions per episode of each version, over the robot time used up to its end."""
    versions = sorted(stats)
    hours = np.cumsum([stats[v].robot_time_s for v in versions]) / 3600.0
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(hours, [stats[v].success_rate for v in versions], "o-")
    top.set_ylabel("success rate")
    top.set_ylim(-0.05, 1.05)
    bottom.plot(hours, [stats[v].interventions_per_episode for v in versions], "o-", color="tab:red")
    bottom.set_ylabel("interventions / episode")
    bottom.set_xlabel("robot time used (h)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    for v, h, s in zip(versions, hours, (stats[v].success_rate for v in versions), strict=True):
        top.annotate(f"v{v}", (h, s), textcoords="offset points", xytext=(3, 4), fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, VersionStats):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot log {type(value).__name__}")
