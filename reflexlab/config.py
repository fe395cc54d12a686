"""Rebuild typed dataclass configs from the plain dicts stored in checkpoints and JSON."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def update_dataclass(obj: T, values: dict[str, Any]) -> T:
    """Return a copy of dataclass ``obj`` with ``values`` applied recursively.

    Lists become tuples where the field held a tuple (JSON has no tuples); unknown keys are an
    error, so a checkpoint from a newer config schema is not silently half-applied.
    """
    changes = {}
    names = {f.name for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
    for key, value in values.items():
        if key not in names:
            raise ValueError(f"{type(obj).__name__} has no field {key!r}")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            changes[key] = update_dataclass(current, value)
        elif isinstance(current, tuple) and isinstance(value, list):
            changes[key] = tuple(value)
        else:
            changes[key] = value
    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
