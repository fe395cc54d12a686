"""The `Spec`: the one description of a policy's interface.

Sim tasks, real robots and exported ONNX models each carry a Spec. Whoever connects two of them
(resume a checkpoint on a task, serve a model on a robot) compares the Specs first and refuses
with the *name of the field* that differs, because a silently mismatched joint order or control
rate is how a robot gets hurt.

The Spec is plain data (dataclasses of str/int/float/tuples) so it serialises to JSON for ONNX
``metadata_props`` and checkpoints without pulling torch or ROS into the core.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from reflexlab.errors import UserFacingError

SPEC_VERSION = 1

ACTION_KINDS = ("joint_position", "joint_torque", "ee_position", "ee_twist", "steering_throttle")


class SpecMismatchError(ValueError, UserFacingError):
    """Two Specs that must agree do not; ``field`` names the first differing field."""

    def __init__(self, field_path: str, ours: Any, theirs: Any, context: str = "") -> None:
        self.field = field_path
        self.ours = ours
        self.theirs = theirs
        where = f" ({context})" if context else ""
        super().__init__(f"Spec mismatch{where}: field '{field_path}' is {theirs!r}, expected {ours!r}")


@dataclass(frozen=True)
class ObsTerm:
    """One named slice of an observation group, in physical units.

    ``scale`` is the fixed factor the policy multiplies this term by before its network; exported
    models bake it in, so a robot feeds physical units and never re-implements the scaling.
    """

    name: str
    size: int
    units: str
    scale: float = 1.0


@dataclass(frozen=True)
class ObsGroup:
    """An ordered group of observation terms, concatenated into one flat vector."""

    name: str
    terms: tuple[ObsTerm, ...]

    @property
    def size(self) -> int:
        return sum(t.size for t in self.terms)

    def slices(self) -> dict[str, slice]:
        """Where each term lies in the flat vector, so callers never hand-count offsets."""
        out, start = {}, 0
        for t in self.terms:
            out[t.name] = slice(start, start + t.size)
            start += t.size
        return out

    def scales(self) -> list[float]:
        """The per-element scale vector of the group."""
        return [t.scale for t in self.terms for _ in range(t.size)]


@dataclass(frozen=True)
class ImageInput:
    """One camera a generator reads: RGB frames, uint8, channel-first (3, height, width), no scaling by the caller.

    An exported generator takes it as the ONNX input ``image.<name>``, shaped (batch,
    observation_horizon, 3, height, width), oldest frame first, like ``obs``; datasets record it as the
    video feature ``observation.images.<name>`` (resized to height × width for training).
    """

    name: str
    height: int
    width: int

    def __post_init__(self) -> None:
        if min(self.height, self.width) < 1:
            raise ValueError(f"image {self.name!r}: height and width must be >= 1, got {self.height}x{self.width}")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (3, self.height, self.width)


@dataclass(frozen=True)
class ActionSpec:
    """The action space: one name per dimension and how a raw policy output reaches the robot.

    For ``joint_position``: target[i] = offset[i] + scale * action[i], clipped to
    [lower[i], upper[i]] (joint limits, rad), changing by at most ``max_rate`` (units/s).
    """

    kind: str
    names: tuple[str, ...]
    scale: float
    offset: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    max_rate: float = math.inf

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}; known: {', '.join(ACTION_KINDS)}")
        n = len(self.names)
        for name in ("offset", "lower", "upper"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"action.{name} has {len(getattr(self, name))} entries for {n} action names")

    @property
    def size(self) -> int:
        return len(self.names)

    def to_targets(self, action: Any) -> Any:
        """Targets in the action's physical units: offset + scale * action (limits are the safety filter's job)."""
        import numpy as np

        return np.asarray(self.offset, dtype=np.float64) + self.scale * np.asarray(action, dtype=np.float64)


@dataclass(frozen=True)
class Spec:
    """A policy's complete interface. ``policy_obs`` is what the actor (and an exported model) reads.

    Action-chunk policies (generators) read the last ``observation_horizon`` policy observations
    (oldest first) and predict ``action_chunk`` actions, one per control step, whose index 0 is
    aligned with the oldest observation; index ``observation_horizon - 1`` is the current step. A
    controller may execute at most ``execution_horizon`` of them from there before it must re-plan
    (Diffusion Policy executes all of them; the policy node re-plans every step by default, see
    `reflexlab.chunking`). A plain policy has all three at 1.

    ``images``: the cameras a generator reads beside ``policy_obs`` (see `ImageInput`), in the order of
    its ONNX inputs; empty for state-only models, and then left out of the serialised Spec, so every
    Spec written before cameras existed reads (and compares) exactly as before.
    """

    robot: str
    task: str
    observation_groups: tuple[ObsGroup, ...]
    policy_group: str
    action: ActionSpec
    control_rate_hz: float
    physics_rate_hz: float
    action_chunk: int = 1
    execution_horizon: int = 1
    observation_horizon: int = 1
    version: int = SPEC_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    images: tuple[ImageInput, ...] = ()

    def __post_init__(self) -> None:
        names = [i.name for i in self.images]
        if len(set(names)) != len(names):
            raise ValueError(f"images name a camera twice: {names}")
        first = self.observation_horizon - 1
        if min(self.action_chunk, self.execution_horizon, self.observation_horizon) < 1:
            raise ValueError("action_chunk, execution_horizon and observation_horizon must be >= 1")
        if first + self.execution_horizon > self.action_chunk:
            raise ValueError(
                f"execution_horizon {self.execution_horizon} starting at index {first} (observation_horizon - 1) "
                f"runs past action_chunk {self.action_chunk}"
            )

    def task_interface(self) -> Spec:
        """The task's own Spec under a chunk policy's: horizons back to 1, no camera inputs.

        What a robot's Spec says: how a policy reads its history and plans its chunks is the policy's business, so a
        robot compares this part only (`check_compatible` on both sides' task interface).
        """
        return dataclasses.replace(self, observation_horizon=1, action_chunk=1, execution_horizon=1, images=())

    @property
    def is_generator(self) -> bool:
        """True for action-chunk models: their ONNX file also takes ``noise`` and outputs ``action_chunk``."""
        return self.action_chunk > 1 or self.observation_horizon > 1

    def group(self, name: str) -> ObsGroup:
        for g in self.observation_groups:
            if g.name == name:
                return g
        known = ", ".join(g.name for g in self.observation_groups)
        raise KeyError(f"no observation group {name!r} in the Spec; groups: {known}")

    @property
    def policy_obs(self) -> ObsGroup:
        return self.group(self.policy_group)

    # --- serialisation -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (lists, not tuples), exactly what a stored Spec loads back as."""
        d = dataclasses.asdict(self)
        # JSON has no infinity; keep it explicit rather than emitting the non-standard token.
        if math.isinf(d["action"]["max_rate"]):
            d["action"]["max_rate"] = None
        if not d["images"]:
            del d["images"]
        return json.loads(json.dumps(d))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        try:
            groups = tuple(
                ObsGroup(g["name"], tuple(ObsTerm(**t) for t in g["terms"])) for g in d["observation_groups"]
            )
            a = dict(d["action"])
            a["max_rate"] = math.inf if a.get("max_rate") is None else a["max_rate"]
            for k in ("names", "offset", "lower", "upper"):
                a[k] = tuple(a[k])
            images = tuple(ImageInput(**i) for i in d.get("images", ()))
            rest = {k: v for k, v in d.items() if k not in ("observation_groups", "action", "images")}
            return cls(observation_groups=groups, action=ActionSpec(**a), images=images, **rest)
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a valid reflexlab Spec: {e}") from e

    @classmethod
    def from_json(cls, text: str) -> Spec:
        return cls.from_dict(json.loads(text))

    # --- comparison ----------------------------------------------------------------------------
    def check_compatible(self, other: Spec, context: str = "") -> None:
        """Raise `SpecMismatchError` naming the first field where ``other`` differs from ``self``.

        Everything that changes what the policy reads or what its output means must match;
        ``extra`` (free-form notes such as training budgets) is ignored.
        """
        ours, theirs = self.to_dict(), other.to_dict()
        ours.pop("extra"), theirs.pop("extra")
        path = _first_difference(ours, theirs, "")
        if path is not None:
            raise SpecMismatchError(path, _get(ours, path), _get(theirs, path), context)


def _first_difference(a: Any, b: Any, prefix: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            p = f"{prefix}.{k}" if prefix else k
            if k not in a or k not in b:
                return p
            sub = _first_difference(a[k], b[k], p)
            if sub is not None:
                return sub
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return prefix
        if all(not isinstance(x, (dict, list, tuple)) for x in (*a, *b)):
            return None if _close_seq(a, b) else prefix
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            sub = _first_difference(x, y, f"{prefix}[{i}]")
            if sub is not None:
                return sub
        return None
    return None if _close(a, b) else prefix


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
        except (TypeError, ValueError):
            return False
    return a == b


def _close_seq(a: Any, b: Any) -> bool:
    return all(_close(x, y) for x, y in zip(a, b, strict=True))


def _get(d: Any, path: str) -> Any:
    cur = d
    for part in path.replace("[", ".[").split("."):
        if not part:
            continue
        cur = cur[int(part[1:-1])] if part.startswith("[") else cur.get(part) if isinstance(cur, dict) else None
    return cur
