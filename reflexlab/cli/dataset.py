"""`reflexlab dataset upgrade|info`: migrate an episode dataset of an older format, or say what a dataset folder holds.

Reading a dataset needs pyarrow, imported inside the commands, so that `reflexlab --help` stays fast.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro


@dataclass(frozen=True)
class Upgrade:
    """Migrate a dataset written before format 2 (issue 21) in place, keeping the original beside it.

    Prints one JSON line (what changed, where the backup is) and a sentence on stderr. A dataset already at the
    current format is left alone ("nothing to do", exit 0); one a writer has open, or not written by reflexlab, is
    refused (exit 2).
    """

    path: tyro.conf.Positional[Path]
    """the dataset folder (the one holding meta/info.json)."""
    keep_backup: bool = True
    """keep the original at PATH.format1-backup (off: delete it once the upgraded dataset is in place)."""

    def run(self) -> None:
        from reflexlab.dataset.upgrade import NothingToUpgradeError, upgrade_dataset

        try:
            report = upgrade_dataset(self.path, keep_backup=self.keep_backup)
        except NothingToUpgradeError as err:
            print(json.dumps({"root": str(self.path.resolve()), "upgraded": False, "reason": str(err)}))
            print(f"reflexlab: {err}", file=sys.stderr)
            return
        print(json.dumps(report.to_json()))
        kept = f"the original is kept at {report.backup}" if report.backup else "the original was deleted"
        renamed = ", ".join(f"{a} -> {b}" for a, b in report.renamed.items())
        cameras = f"cameras {', '.join(report.cameras)} (videos kept as they were, statistics added)"
        print(
            f"upgraded {report.root} to format 2: {report.episodes} episodes, {report.frames} frames, "
            f"{cameras if report.cameras else 'no camera'}; renamed {renamed}; timestamp is now frame_index / fps "
            f"(the recorded times, up to {report.max_timestamp_drift_s:.4g} s off it, are measured_timestamp); {kept}",
            file=sys.stderr,
        )


@dataclass(frozen=True)
class Info:
    """Say what a dataset folder holds, from its meta files alone (no data file is read): format, fps, features,
    episodes, tasks."""

    path: tyro.conf.Positional[Path]
    """the dataset folder."""

    def run(self) -> None:
        print("\n".join(describe(self.path)))


Command = Annotated[Upgrade, tyro.conf.subcommand("upgrade")] | Annotated[Info, tyro.conf.subcommand("info")]


def dataset(command: tyro.conf.OmitSubcommandPrefixes[Command]) -> None:
    """Episode datasets: upgrade one written by an older reflexlab, or describe one."""
    command.run()


def describe(root: Path) -> list[str]:
    """The lines `dataset info` prints: read from info.json and tasks.parquet, which are small."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from reflexlab.dataset import FORMAT_VERSION, INFO_PATH, TASKS_PATH, DatasetError
    from reflexlab.dataset.upgrade import dataset_format

    try:
        info: dict[str, Any] = json.loads((root / INFO_PATH).read_text())
        tasks = pq.read_table(root / TASKS_PATH)
    except (OSError, ValueError, pa.ArrowException) as err:
        raise DatasetError(root, f"not a dataset, or not readable: {err}") from err
    stored = dataset_format(info)
    if stored is None:
        kind = "written by another tool (LeRobot's layout; reflexlab reads it as it is)"
    elif stored == FORMAT_VERSION:
        kind = f"reflexlab format {stored}, written by reflexlab {info['reflexlab_version']}"
    else:
        kind = f"reflexlab format {stored}: upgrade it with `reflexlab dataset upgrade {root}`"
    # the task strings: tasks.parquet's string column (ours names it "task", LeRobot leaves its pandas index unnamed)
    column = next((f.name for f in tasks.schema if pa.types.is_string(f.type)), None)
    total_tasks = int(info.get("total_tasks", 0))
    names = tasks.column(column).to_pylist()[:total_tasks] if column else []
    lines = [
        f"{root}: {kind}",
        f"robot {info.get('robot_type')}, {info.get('fps')} fps, {info.get('total_episodes')} episodes, "
        f"{info.get('total_frames')} frames",
        "features:",
    ]
    lines += [f"  {key}  {f.get('dtype')} {f.get('shape')}" for key, f in info.get("features", {}).items()]
    lines += ["tasks:", *(f"  {i}  {task}" for i, task in enumerate(names))]
    return lines
