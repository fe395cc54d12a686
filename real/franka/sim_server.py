"""A simulated FR3 (franka-sim) in its own network namespace, for tests and benchmarks.

franka-sim speaks the real FCI protocol, so the production driver (real pylibfranka, real
libfranka) runs against it unchanged. It lives in a separate venv (``.venv-franka-sim``, made by
``make setup``) because it pins numpy 1.26 and mujoco < 3.3, and it loads our own FR3 model
(`fr3.xml`) so it never tries to download one. Both enforcement flags are on by default, so a
command the real robot would reject raises the real libfranka reflex here too.

Usage::

    with franka_sim() as sim, sim.client():
        driver = FrankaDriver(FrankaConfig.load(host=sim.host)).start()
    # the driver keeps talking to the sim (its sockets live in the sim's namespace)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from real.franka import netns

FR3_MJCF = Path(__file__).resolve().with_name("fr3.xml")
FCI_PORT = 1337
_REPO = Path(__file__).resolve().parents[2]


class FrankaSimError(RuntimeError):
    """franka-sim is missing or did not come up; the message carries its log's tail."""


@dataclass(frozen=True)
class FrankaSim:
    """A running simulated FR3: connect to ``host`` from inside `client()`."""

    namespace: str
    process: subprocess.Popen
    log_path: Path
    host: str = "127.0.0.1"

    def client(self) -> contextlib.AbstractContextManager[None]:
        """Enter the sim's network namespace in this thread (connect the driver inside it)."""
        return netns.entered(self.namespace)

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-limit:]
        except OSError as e:
            return f"<could not read {self.log_path}: {e}>"


def franka_sim_executable() -> Path:
    """``run-franka-sim-server`` from ``$REFLEXLAB_FRANKA_SIM``, the repository's ``.venv-franka-sim`` or PATH."""
    candidates = [os.environ.get("REFLEXLAB_FRANKA_SIM"), _REPO / ".venv-franka-sim/bin/run-franka-sim-server"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    found = shutil.which("run-franka-sim-server")
    if found:
        return Path(found)
    raise FrankaSimError(
        "franka-sim is not installed: run `make setup` (creates .venv-franka-sim) "
        "or set REFLEXLAB_FRANKA_SIM to a run-franka-sim-server executable"
    )


@contextlib.contextmanager
def franka_sim(
    enforce: bool = True,
    mjcf: Path = FR3_MJCF,
    startup_timeout_s: float = 60.0,
    realtime_priority: int | None = 10,
) -> Iterator[FrankaSim]:
    """Start franka-sim in a fresh namespace, wait until it accepts the FCI, tear it all down after.

    ``realtime_priority`` runs the server under SCHED_FIFO, as the real robot's controller is a
    real-time system: at normal priority on a busy machine franka-sim itself publishes states at
    only ~800 Hz (measured), capping any client below the 1 kHz it is meant to test. ``None``
    runs it at normal priority. The namespace is deleted and the server stopped (SIGINT, then
    SIGKILL) however the block ends.
    """
    exe = franka_sim_executable()
    flags = ["--enforce-comm-constraints", "--enforce-motion-limits"] if enforce else []
    with netns.namespace("reflexlab-franka") as ns, tempfile.TemporaryDirectory(prefix="franka-sim-") as tmp:
        log_path = Path(tmp) / "server.log"
        env = dict(os.environ, FR3_MJCF=str(mjcf), PYTHONUNBUFFERED="1")
        rt = ["chrt", "--fifo", str(realtime_priority)] if realtime_priority else []
        with log_path.open("w") as log:
            process = subprocess.Popen(
                [*rt, *netns.exec_argv(ns, [str(exe), "--no-gripper", *flags])],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # its own process group: stopped as a whole, never hit by our signals
            )
        sim = FrankaSim(namespace=ns, process=process, log_path=log_path)
        try:
            _wait_until_listening(sim, startup_timeout_s)
            yield sim
        finally:
            _stop(process)


def _wait_until_listening(sim: FrankaSim, timeout_s: float) -> None:
    """Poll the FCI port from inside the namespace until it accepts a connection (no fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    with sim.client():
        while True:
            if sim.process.poll() is not None:
                raise FrankaSimError(
                    f"franka-sim exited with code {sim.process.returncode} before listening\n{sim.log_tail()}"
                )
            try:
                with socket.create_connection((sim.host, FCI_PORT), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise FrankaSimError(
                        f"franka-sim did not listen on {sim.host}:{FCI_PORT} within {timeout_s:g} s\n{sim.log_tail()}"
                    ) from None
                time.sleep(0.05)


def _stop(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)  # franka-sim's clean shutdown path
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5.0)
