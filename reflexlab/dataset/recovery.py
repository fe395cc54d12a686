"""Opening a dataset for writing after a crash: the writer's lock, and removal of what a crashed save left behind.

A writer opening a dataset takes an exclusive lock (it must never delete a live writer's temp files), then
recovers: removes ``.tmp`` files and unreferenced data and video files, truncates orphan rows and re-publishes the
meta files from the committed state (step 5 of the protocol in `reflexlab.dataset.writer`), so that other tools,
which know nothing of commit points, see a clean dataset.
"""

from __future__ import annotations

import fcntl
import re
import time
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from reflexlab.dataset.layout import LOCK_NAME, DatasetError, FileId
from reflexlab.dataset.meta import write_parquet
from reflexlab.io import TEMP_SUFFIX

LOCK_GRACE_S = 1.0
"""How long a busy lock is retried: a killed writer's forked child releases it within milliseconds."""
_DATA_FILE = re.compile(r"chunk-(\d+)/file-(\d+)\.parquet$")


def lock_dataset(root: Path) -> IO[bytes]:
    """One writer per dataset: recovery deletes temp files and truncates the last data file, which would destroy a
    live writer's save in progress. The kernel drops a flock when its process dies, so a crash leaves no stale lock.

    A child the writer was forking (ffmpeg, started by ``subprocess`` with a ``preexec_fn``) shares the lock until it
    closes its inherited files just before ``exec``, so a writer killed at that instant holds it a moment longer: a
    rerun straight after ``kill -9`` found it held in 6 of 100 tries. A busy lock is retried for `LOCK_GRACE_S`
    before it is called another writer's."""
    handle = open(root / LOCK_NAME, "ab")  # noqa: SIM115 - held open for the writer's lifetime
    deadline = time.monotonic() + LOCK_GRACE_S
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() > deadline:
                handle.close()
                raise DatasetError(root, "another DatasetWriter has this dataset open") from None
            time.sleep(0.01)


def remove_temp_files(root: Path) -> None:
    for folder in (root / "meta", root / "data", root / "videos"):
        for path in folder.rglob(f"*{TEMP_SUFFIX}"):
            path.unlink()


def data_files(root: Path) -> dict[FileId, Path]:
    files = {}
    for path in (root / "data").glob("chunk-*/file-*.parquet"):
        match = _DATA_FILE.search(path.as_posix())
        if match:
            files[int(match[1]), int(match[2])] = path
    return files


def video_files(root: Path) -> list[Path]:
    return list((root / "videos").glob("*/chunk-*/file-*.mp4"))


def recover_files(
    root: Path, committed_videos: set[Path], current: FileId, committed_rows: int, schema: pa.Schema
) -> tuple[pa.Table, int]:
    """Remove what a crash left past the commit point, so tools that ignore our commit rules see clean data.

    ``committed_videos``: the committed episodes' video files; any other MP4 is a crashed save's. ``current``: the
    data file of the last committed episode, whose first ``committed_rows`` rows are committed; rows past them are
    truncated and later files removed. Returns the current file's committed rows (in ``schema``) and its size.
    """
    for path in video_files(root):
        if path not in committed_videos:
            path.unlink()
    file_table, file_bytes = schema.empty_table(), 0
    for file_id, path in data_files(root).items():
        if file_id > current or committed_rows == 0:
            path.unlink()
        elif file_id == current:
            table = pq.read_table(path)
            if table.num_rows > committed_rows:
                table = table.slice(0, committed_rows)
                write_parquet(path, table)
            file_table = _conform(root, table, schema, current)
            file_bytes = path.stat().st_size
    return file_table, file_bytes


def _conform(root: Path, table: pa.Table, schema: pa.Schema, file_id: FileId) -> pa.Table:
    """The stored rows in the writer's schema (a file written by another tool may type its vectors loosely)."""
    try:
        return table.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise DatasetError(root, f"cannot append to data file {file_id}: {err}") from err
