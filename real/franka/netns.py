"""Private Linux network namespaces, so that several simulated FR3s can serve the FCI's fixed ports.

The FCI listens on TCP 1337 (and the gripper on 1338) and libfranka cannot be pointed at another
port, so two simulated robots on one machine (parallel tests, a bench next to a test run) would
collide. Each gets its own named namespace (``ip netns add``) with only a loopback device; the
server runs in it (``ip netns exec``) and a client thread joins it with ``setns(2)``.

``setns`` moves only the calling *thread*: sockets it creates live in the namespace for their
whole life, whatever thread uses them later, and threads it starts inherit the namespace. So a
driver connected inside `entered` keeps talking to its simulated robot after the block exits,
while the rest of the process (ROS, other tests) stays on the host network. Needs root
(CAP_SYS_ADMIN), as ``ip netns`` does.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
import uuid
from collections.abc import Iterator

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def create(prefix: str = "reflexlab") -> str:
    """Create a fresh namespace with its loopback up; returns its name (unique per call)."""
    name = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
    except BaseException:
        delete(name)
        raise
    return name


def delete(name: str) -> None:
    """Remove a namespace (idempotent). Processes still inside keep it alive until they exit."""
    if os.path.exists(f"/run/netns/{name}"):
        _ip("netns", "delete", name)


@contextlib.contextmanager
def namespace(prefix: str = "reflexlab") -> Iterator[str]:
    """A namespace that exists for the duration of the block, deleted even on error."""
    name = create(prefix)
    try:
        yield name
    finally:
        delete(name)


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the block's network calls (in this thread) inside namespace ``name``; always switch back."""
    with open("/proc/thread-self/ns/net") as own, open(f"/run/netns/{name}") as target:
        _setns(target.fileno(), name)
        try:
            yield
        finally:
            _setns(own.fileno(), "the original namespace")


def exec_argv(name: str, argv: list[str]) -> list[str]:
    """The command line that runs ``argv`` inside namespace ``name``."""
    return ["ip", "netns", "exec", name, *argv]


def _setns(fd: int, what: str) -> None:
    if _libc.setns(fd, _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into {what} failed: {os.strerror(err)} (needs root / CAP_SYS_ADMIN)")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise OSError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()} (needs root / CAP_SYS_ADMIN)")
