"""Typed dataclass configs from plain data: the one strict YAML loader, and checkpoint config rebuilds.

Config files (robots, the Franka driver, teleop set-ups) are edited by hand next to a moving robot,
so loading is strict: an unknown key, a wrong type, a wrong length or a missing required key is an
error, never a silent default (a misspelt ``comand_timeout_s`` falling back to its default removes a
safety net unnoticed). Every error names the file and the full dotted key (``safety.collision.upper_force``,
``joints.names[3]``, ``device.buttons.deadman``) so the fix is one look away.

Field types understood: ``bool``, ``int``, ``float`` (an int is accepted), ``str``, ``Literal[...]``,
``X | None`` and other unions, ``tuple[X, ...]`` and fixed-length ``tuple[X, Y]`` (from YAML lists),
``dict[str, X]``, nested dataclasses, and unions of dataclasses told apart by their ``kind: Literal[...]``
field (``device: {kind: gamepad, ...}``). A dataclass's own ``__post_init__`` checks run as it is built:
a ValueError they raise is reported at that dataclass's key, and a message that starts with a relative key
(``deadzone: needs six values``) is joined onto it (``device.calibration.deadzone: needs six values``).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml

T = TypeVar("T")

#: The field that tells the dataclasses of a union apart.
TAG = "kind"


class ConfigError(ValueError):
    """A config that cannot be loaded; the message names the file (when there is one) and the dotted key."""


def read_yaml(path: str | Path, *, what: str = "config", error: type[Exception] = ConfigError) -> Any:
    """Parse the YAML file ``path``; a missing file or broken YAML raises ``error`` naming ``what`` and the path."""
    p = Path(path)
    if not p.is_file():
        raise error(f"{what} {p} does not exist")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise error(f"{what} {p} is not valid YAML: {e}") from e


def load_yaml(
    cls: type[T],
    path: str | Path,
    *,
    what: str = "config",
    error: type[ConfigError] = ConfigError,
    ignore: tuple[str, ...] = (),
    overrides: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> T:
    """Read the YAML file ``path`` into dataclass ``cls``, strictly (see the module docstring).

    Args:
        what: how messages name the file (``robot config <path>: safety.stale_mod: unknown key…``).
        error: the `ConfigError` subclass raised, so that each caller catches its own.
        ignore: top-level keys dropped before loading (written in the file for people, not code).
        overrides: top-level values replacing the file's; checked as strictly as the file.
        extra: constructor arguments that do not come from the file (its path); the file may not set them.
    """
    p = Path(path)
    data = read_yaml(p, what=what, error=error)
    data = {} if data is None else data  # an empty file: every key at its default
    if not isinstance(data, dict):
        raise error(f"{what} {p} must be a mapping, got {type(data).__name__}")
    data = {k: v for k, v in data.items() if k not in ignore}
    try:
        return from_dict(cls, {**data, **(overrides or {})}, extra=extra)
    except ConfigError as e:
        raise error(f"{what} {p}: {e}") from None


def from_dict(cls: type[T], data: Any, *, extra: Mapping[str, Any] | None = None) -> T:
    """Build dataclass ``cls`` from parsed YAML/JSON, strictly; a `ConfigError` names the dotted key.

    ``extra``: constructor arguments given by the caller rather than ``data`` (which may not set them).
    """
    return _build(cls, data, "", extra or {})


def _build(cls: type[T], data: Any, key: str, extra: Mapping[str, Any]) -> T:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{_at(key)}expected a mapping, got {type(data).__name__}")
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name not in extra]  # type: ignore[arg-type]
    names = [f.name for f in fields]
    for name in data:
        if name not in names:
            close = difflib.get_close_matches(str(name), names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{_join(key, name)}: unknown key; valid keys: {', '.join(names)}{hint}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields:
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name], _join(key, f.name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{_join(key, f.name)}: missing; {key or 'the config'} lacks the key {f.name!r}")
    try:
        return cls(**values, **extra)
    except ValueError as e:  # the dataclass's own checks
        raise ConfigError(_placed(key, str(e))) from None


def _convert(hint: Any, value: Any, key: str) -> Any:
    """``value`` checked against type ``hint`` and converted (lists → tuples, ints → floats)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return _convert_union(args, value, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, args))}")
        return value
    if dataclasses.is_dataclass(hint):
        # ``None``: a section whose keys are all commented out (``frame:``) keeps every default.
        return _build(hint, {} if value is None else value, key, {})  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        if args[-1:] == (Ellipsis,):
            args = args[:1] * len(value)
        elif len(args) != len(value):
            raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)}")
        return tuple(_convert(t, v, f"{key}[{i}]") for i, (t, v) in enumerate(zip(args, value, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {str(k): _convert(args[1], v, _join(key, k)) for k, v in value.items()}
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected float, got {value!r}")
        return float(value)
    if hint in (int, str, bool):
        if type(value) is not hint:  # not isinstance: True is an int, and 1 is no bool
            raise ConfigError(f"{key}: expected {hint.__name__}, got {value!r}")
        return value
    raise TypeError(f"{key}: config fields of type {hint} are not supported")


def _convert_union(args: tuple[Any, ...], value: Any, key: str) -> Any:
    options = [a for a in args if a is not type(None)]
    if value is None and len(options) < len(args):
        return None
    if len(options) > 1 and all(dataclasses.is_dataclass(a) for a in options):
        kinds = {typing.get_args(typing.get_type_hints(a)[TAG])[0]: a for a in options}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping with {TAG}: {' | '.join(kinds)}, got {value!r}")
        if value.get(TAG) not in kinds:
            raise ConfigError(f"{_join(key, TAG)}: {value.get(TAG)!r} is not one of {', '.join(kinds)}")
        return _build(kinds[value[TAG]], value, key, {})
    # Only the options of the value's shape (list, mapping or scalar) can take it, so the error
    # reported is the one of the option the author meant, e.g. a bad item in a list.
    fitting = [a for a in options if _shape(a) == _shape_of(value)]
    if not fitting:
        raise ConfigError(f"{key}: expected {' or '.join(_describe(a) for a in options)}, got {value!r}")
    errors = []
    for option in fitting:
        try:
            return _convert(option, value, key)
        except ConfigError as e:
            errors.append(e)
    raise errors[0]


def _shape(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is tuple:
        return "list"
    return "mapping" if origin is dict or dataclasses.is_dataclass(hint) else "scalar"


def _shape_of(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "list"
    return "mapping" if isinstance(value, Mapping) else "scalar"


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return "one of " + ", ".join(map(str, typing.get_args(hint)))
    return {"list": "a list", "mapping": "a mapping"}.get(_shape(hint), getattr(hint, "__name__", str(hint)))


def _join(key: str, name: Any) -> str:
    return f"{key}.{name}" if key else str(name)


def _at(key: str) -> str:
    return f"{key}: " if key else ""


def _placed(key: str, message: str) -> str:
    """A dataclass check's ``message``, placed at the dataclass's ``key``.

    Checks name their field relative to their own dataclass (``deadzone: needs six values``), since
    they do not know where it sits in a file; that relative key is joined onto ``key``.
    """
    first = message.split(maxsplit=1)[0] if message else ""
    return _join(key, message) if key and first.endswith(":") else f"{_at(key)}{message}"


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
