"""The folder of versioned policies where a real-world RL learner publishes and the actor picks up.

Actor (robot side: env, policy, recorder) and learner (critics, updates, export) meet only through the dataset folder
and this one, so they can run on two machines over a shared or synced folder (NFS, rsync, Syncthing)::

    <store>/v000003.onnx            the exported policy: Spec and self-description in its metadata
    <store>/v000003.json            its commit record, written LAST: version, round, size and sha256 of the .onnx,
                                    export parity error and the tolerance it passed, the Spec, when
    <store>/v000004.rejected.json   a version the learner refused to deploy (parity, non-finite weights), and why
    <store>/finished.json           the learner is done: an actor stops at its next episode boundary
    <store>/wanted.json             how many committed episodes the learner wants in the dataset so far: a paced
                                    actor holds the robot between episodes once it has them (none: no limit)

Publishing writes the ONNX (temp file, fsync, rename), then the record the same way: the record's rename is the
commit point. A reader takes a version only when its record exists and the .onnx has the recorded size and sha256,
so a copy half-synced in any order is invisible until it is complete, and a learner killed mid-publish leaves only
debris that no reader takes (the next publish uses a new number). Versions only grow; a version number is never
reused, rejected ones included, so ``policy_version`` in a dataset names one file forever.

Torch-free: the actor imports this on the robot.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from deploy.artifact import spec_of
from deploy.step_actor import StepActor
from reflexlab.errors import UserFacingError
from reflexlab.io import file_sha256, replace_atomically, write_json_atomically
from reflexlab.spec import Spec, SpecMismatchError

_NAME = re.compile(r"v(\d{6})(\.rejected)?\.json$")
RECORD_FORMAT = 1
FINISHED = "finished.json"  # written by a learner that has deployed its last version
WANTED = "wanted.json"  # the dataset size the learner waits for: the actor collects no further


class PolicyStoreError(ValueError, UserFacingError):
    """A store, version or file that must not be deployed; the message names the file and why."""


@dataclass(frozen=True)
class PolicyVersion:
    """One committed version: its number, its ONNX file and its commit record."""

    version: int
    path: Path
    record: dict[str, Any]

    @property
    def round(self) -> int:
        return int(self.record["round"])


class PolicyStore:
    """The versioned policy folder at ``root`` (created on first publish)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    # learner side --------------------------------------------------------------------------------------------------
    def publish(
        self, onnx_file: Path, *, round: int, parity_error: float, tolerance: float, info: dict[str, Any] | None = None
    ) -> PolicyVersion:
        """Deploy ``onnx_file`` as the next version, or record it as rejected and raise `PolicyStoreError`.

        ``parity_error``: the export check's max |onnxruntime − torch| on recorded observations; a version over
        ``tolerance`` (or non-finite) is never deployed and the actor keeps the last good one. ``info``: anything
        else worth keeping with the version (losses, OPE estimate, dataset episodes it was trained on).
        """
        version = self._next_version()
        record = {
            "format": RECORD_FORMAT,
            "version": version,
            "round": int(round),
            "parity_error": float(parity_error),
            "tolerance": float(tolerance),
            "created_unix_ns": time.time_ns(),
            **(info or {}),
        }
        if not (math.isfinite(parity_error) and parity_error <= tolerance):
            self.reject(version, f"export parity error {parity_error:.3g} over the tolerance {tolerance:.3g}", record)
        try:
            spec = spec_of(Path(onnx_file))
        except Exception as err:  # a file onnx cannot parse: named, never deployed
            self.reject(version, f"{onnx_file} is not a readable reflexlab ONNX file: {err}", record)
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.onnx_path(version)
        replace_atomically(target, lambda tmp: shutil.copyfile(onnx_file, tmp))
        record |= {"onnx": target.name, "bytes": target.stat().st_size, "sha256": file_sha256(target)}
        record["spec"] = spec.to_dict()
        write_json_atomically(self._record_path(version), record)  # the commit point
        return PolicyVersion(version, target, record)

    def reject(self, version: int, reason: str, record: dict[str, Any] | None = None) -> NoReturn:
        """Record that ``version`` will never be deployed, and raise `PolicyStoreError` saying why."""
        self.root.mkdir(parents=True, exist_ok=True)
        rejected = {**(record or {"version": version}), "rejected": reason}
        write_json_atomically(self.root / f"v{version:06d}.rejected.json", rejected)
        raise PolicyStoreError(f"policy store {self.root}: version {version} rejected, not deployed: {reason}")

    def finish(self, info: dict[str, Any]) -> None:
        """Say that the learner has deployed its last version: an actor stops once it sees this (between episodes)."""
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomically(self.root / FINISHED, {"finished_unix_ns": time.time_ns(), **info})

    def reopen(self) -> None:
        """Take back `finish`: a learner (re)started for more rounds."""
        (self.root / FINISHED).unlink(missing_ok=True)

    def want(self, episodes: int | None) -> None:
        """Ask the actor for a dataset of ``episodes`` committed episodes and no more (None: collect without limit).

        Rounds of RL-100 and HABC train on a fixed budget of robot time: an actor that kept collecting with the old
        version while the learner trains would spend robot time the method never accounts for (and, in the
        simulator, hundreds of episodes per round)."""
        if episodes is None:
            (self.root / WANTED).unlink(missing_ok=True)
            return
        self.root.mkdir(parents=True, exist_ok=True)
        write_json_atomically(self.root / WANTED, {"episodes": int(episodes)})

    def wanted(self) -> int | None:
        """The dataset size the learner asked for (`want`), or None for no limit."""
        try:
            return int(json.loads((self.root / WANTED).read_text())["episodes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # actor side ----------------------------------------------------------------------------------------------------
    def finished(self) -> dict[str, Any] | None:
        """The learner's closing word (`finish`), or None while it is still at work."""
        try:
            return json.loads((self.root / FINISHED).read_text())
        except (OSError, ValueError):
            return None

    def versions(self, after: int = 0) -> list[PolicyVersion]:
        """The committed versions newer than ``after``, oldest first (records whose file is not (yet) complete are
        left out; only these files are hashed, so an actor polling for the next version reads only new files)."""
        found = (self._verified(version, path) for version, path in self._records() if version > after)
        return [version for version in found if version is not None]

    def rejected(self) -> dict[int, str]:
        """Version -> why it was refused."""
        out = {}
        for path in sorted(self.root.glob("v*.rejected.json")) if self.root.is_dir() else []:
            out[int(_NAME.fullmatch(path.name)[1])] = json.loads(path.read_text())["rejected"]  # type: ignore[index]
        return out

    def latest(self, spec: Spec | None = None, after: int = -1) -> PolicyVersion | None:
        """The newest committed version newer than ``after``, or None.

        ``spec``: the robot's; a newest version for another robot or task raises `PolicyStoreError` naming the file
        and the field (the store is one task's: deploying past it would hide a learner configured for another).
        """
        newest = None
        for version, record_path in reversed(self._records()):
            if version <= after:
                return None
            newest = self._verified(version, record_path)
            if newest is not None:
                break
        if newest is None:
            return None
        if spec is not None:
            try:
                stored = Spec.from_dict(newest.record["spec"])
                spec.task_interface().check_compatible(stored.task_interface(), context=f"policy {newest.path}")
            except SpecMismatchError as err:
                raise PolicyStoreError(f"{newest.path} is for another robot or task: {err}") from err
        return newest

    # internals -----------------------------------------------------------------------------------------------------
    def onnx_path(self, version: int) -> Path:
        return self.root / f"v{version:06d}.onnx"

    def _record_path(self, version: int) -> Path:
        return self.root / f"v{version:06d}.json"

    def _records(self) -> list[tuple[int, Path]]:
        """(version, record file) of every commit record, oldest first, whole or not."""
        paths = sorted(self.root.glob("v*.json")) if self.root.is_dir() else []
        matches = ((_NAME.fullmatch(path.name), path) for path in paths)
        return [(int(m[1]), path) for m, path in matches if m is not None and not m[2]]

    def _next_version(self) -> int:
        """One past every number ever used, committed or rejected or half-published (so none is ever reused)."""
        names = (re.match(r"v(\d{6})", path.name) for path in self.root.glob("v*")) if self.root.is_dir() else ()
        return max((int(m[1]) for m in names if m is not None), default=0) + 1

    def _verified(self, version: int, record_path: Path) -> PolicyVersion | None:
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            return None  # a record being synced: taken once it is whole
        path = self.onnx_path(version)
        whole = path.is_file() and path.stat().st_size == record.get("bytes")
        if not (whole and file_sha256(path) == record.get("sha256")):
            return None
        return PolicyVersion(version, path, record)


class PolicyFollower:
    """The actor's view of the store: a `StepActor` on the newest deployable version, swapped only between episodes.

    A version that cannot be deployed (another robot's or task's Spec, a file onnxruntime refuses, a generator with
    cameras the actor does not record) is skipped once, its reason kept in `skipped`, and the actor goes on with the
    last good one: a learner's mistake never stops the robot. ``version`` 0 is the initial policy (no learner
    version yet), ``initial`` its file, if any; ``cameras`` the cameras the actor records, which a policy may read.
    """

    def __init__(
        self,
        store: PolicyStore,
        robot_spec: Spec,
        *,
        seed: int = 0,
        initial: Path | None = None,
        cameras: tuple[str, ...] = (),
    ) -> None:
        self.store = store
        self.cameras = cameras
        self.robot_spec = robot_spec
        self.seed = seed
        self.max_noise_size: int | None = None  # the recorder's policy.noise column: a version drawing more is skipped
        self.version = 0
        self.actor: StepActor | None = None if initial is None else StepActor(initial, robot_spec, seed=seed)
        self.skipped: dict[int, str] = {}

    def refresh(self) -> PolicyVersion | None:
        """Deploy the newest version newer than the current one; returns it, or None when nothing changed."""
        candidates = [v for v in self.store.versions(after=self.version) if v.version not in self.skipped]
        for candidate in reversed(candidates):
            try:
                self.robot_spec.task_interface().check_compatible(
                    Spec.from_dict(candidate.record["spec"]).task_interface(), context=f"policy {candidate.path}"
                )
                actor = StepActor(candidate.path, self.robot_spec, seed=self.seed + candidate.version)
                unfed = [c for c in actor.cameras if c not in self.cameras]
                if unfed:
                    have = ", ".join(self.cameras) or "none"
                    raise ValueError(f"it reads camera(s) {unfed} and this actor records {have}")
                if self.max_noise_size is not None and actor.noise_size > self.max_noise_size:
                    raise ValueError(
                        f"it draws {actor.noise_size} noise values per chunk and the dataset's policy.noise column "
                        f"holds {self.max_noise_size}"
                    )
            except Exception as err:  # whatever the file's fault, the robot keeps the last good policy
                self.skipped[candidate.version] = f"{candidate.path}: {type(err).__name__}: {err}"
                continue
            self.actor, self.version = actor, candidate.version
            return candidate
        return None
