"""The meta files (tasks, episodes, stats, info) and their publication, info.json last: the commit point.

Also `write_parquet`, the atomic write that every Parquet file of a dataset, meta or data, goes through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from reflexlab.dataset.layout import (
    EPISODE_COLUMNS,
    EPISODES_PATH,
    INFO_PATH,
    STATS_PATH,
    TASKS_PATH,
    DatasetError,
    video_columns,
    videos_of,
)
from reflexlab.dataset.stats import Moments, stats_json
from reflexlab.io import replace_atomically, write_json_atomically


def write_parquet(path: Path, table: pa.Table) -> None:
    """Replace ``path`` by ``table``: Parquet cannot be appended in place (its footer sits at the end)."""
    replace_atomically(path, lambda tmp: pq.write_table(table, tmp))


# tasks.parquet as pandas writes a frame indexed by task (what LeRobot reads ``ds[i]["task"]`` from), spelled out in
# Arrow's documented pandas metadata so that writing it needs no pandas.
_TASKS_PANDAS_METADATA = json.dumps(
    {
        "index_columns": ["task"],
        "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64"},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object"},
        ],
    }
)


def _tasks_table(tasks: list[str]) -> pa.Table:
    """tasks.parquet: a task's index is its place in ``tasks``, which only ever grows at the end."""
    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    return table.replace_schema_metadata({"pandas": _TASKS_PANDAS_METADATA})


def episodes_table(root: Path, episodes: list[dict[str, Any]], videos: dict[str, tuple[int, ...]]) -> pa.Table:
    """The episodes parquet; metadata columns are typed by their values, and a type clash names its key."""
    kinds = {**EPISODE_COLUMNS, **video_columns(videos)}
    columns = {name: pa.array([e[name] for e in episodes], kind) for name, kind in kinds.items()}
    extra = dict.fromkeys(k for e in episodes for k in e if k not in kinds)
    for key in extra:
        try:
            columns[key] = pa.array([e.get(key) for e in episodes])
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            raise DatasetError(
                root, f"metadata values of clashing types: {err}", episode=len(episodes) - 1, key=key
            ) from err
    return pa.table(columns)


def publish_meta(
    root: Path, info: dict[str, Any], tasks: list[str], episodes: pa.Table, stats: dict[str, Moments]
) -> None:
    """Publish the meta files, info.json last: its rename is the commit point (see `reflexlab.dataset.writer`)."""
    write_parquet(root / TASKS_PATH, _tasks_table(tasks))
    write_parquet(root / EPISODES_PATH, episodes)
    write_json_atomically(root / STATS_PATH, stats_json(stats, videos_of(info["features"])))
    write_json_atomically(root / INFO_PATH, info)
