"""L0: crash-safe file writes (temp file, fsync, rename, directory fsync) and telling a full disk apart; stdlib only.

A process can die at any instant (SIGKILL, power cut), so a file that others read is never edited in place: the new
contents go to a temp file next to it, which is fsynced and renamed over the old one. rename(2) is atomic, so a
reader sees the old or the new file, never half of one; the fsync of the folder makes the rename itself survive a
power cut.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

TEMP_SUFFIX = ".tmp"  # appended to the target's name: recovery code finds (and removes) leftovers by it
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable: without this, a power cut can forget the rename."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_parent(path: Path) -> None:
    """Create the folder ``path`` goes in, durably (the grandparent is fsynced), if it does not exist yet."""
    if not path.parent.exists():
        path.parent.mkdir(parents=True)
        fsync_dir(path.parent.parent)


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Write ``path`` via a fsynced temp file and rename(2): readers see the old or the new file, never half of one.

    ``write`` is given the temp path (in the same folder, so the rename cannot cross filesystems) and writes the
    whole new contents there. A failed write removes its temp file: after a full disk, that is the space the caller
    frees first.
    """
    make_parent(path)
    tmp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_atomically(path: Path, value: Any) -> None:
    """`replace_atomically` for a JSON document, indented so that people can read and diff it."""
    replace_atomically(path, lambda tmp: tmp.write_text(json.dumps(value, indent=4) + "\n"))


def is_disk_full(err: OSError) -> bool:
    """Whether ``err`` means no space (or quota, or file size limit) was left.

    pyarrow's IO errors carry the errno only in their message, hence the second test.
    """
    return err.errno in DISK_FULL_ERRNOS or any(os.strerror(code) in str(err) for code in DISK_FULL_ERRNOS)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks (checkpoints and exported models name their source by it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
