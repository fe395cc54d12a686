"""The strict config loader: every mistake is refused, naming the file and the full dotted key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from reflexlab.config import ConfigError, from_dict, load_yaml


@dataclass(frozen=True)
class Joint:
    name: str
    limit: float = 1.0


@dataclass(frozen=True)
class Safety:
    stale_after_periods: float = 3.0
    stale_mode: Literal["hold", "damp"] = "hold"
    max_command: tuple[float, float, float] = (1.0, 0.5, 1.0)

    def __post_init__(self) -> None:
        if self.stale_after_periods <= 0:
            raise ValueError(f"stale_after_periods: must be positive, got {self.stale_after_periods}")


@dataclass(frozen=True)
class Stick:
    kind: Literal["stick"] = "stick"
    deadzone: float | tuple[float, ...] = 0.1


@dataclass(frozen=True)
class Keys:
    kind: Literal["keys"] = "keys"
    keys: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Robot:
    robot: str
    joints: tuple[Joint, ...] = ()
    rate_hz: int = 100
    enabled: bool = True
    host: str | None = None
    safety: Safety = field(default_factory=Safety)
    device: Stick | Keys = field(default_factory=Stick)
    path: Path | None = None


class RobotError(ConfigError):
    pass


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"robot": "a", "safety": {"stale_after_periods": "x"}}, "safety.stale_after_periods: expected float, got 'x'"),
        ({"robot": "a", "joints": [{"name": "j0"}, {"name": 3}]}, r"joints\[1\].name: expected str, got 3"),
        (
            {"robot": "a", "joints": [{"name": "j0", "limt": 1}]},
            r"joints\[0\].limt: unknown key; valid keys: name, limit",
        ),
        (
            {"robot": "a", "safety": {"stale_mod": "hold"}},
            r"safety.stale_mod: unknown key.*\(did you mean 'stale_mode'\?\)",
        ),
        ({"robot": "a", "safety": {"stale_mode": "freeze"}}, "safety.stale_mode: 'freeze' is not one of hold, damp"),
        ({"robot": "a", "safety": {"max_command": [1, 2]}}, "safety.max_command: expected 3 values, got 2"),
        ({"robot": "a", "safety": {"stale_after_periods": -1}}, "safety.stale_after_periods: must be positive"),
        ({"robot": "a", "safety": [1]}, "safety: expected a mapping, got list"),
        ({"robot": "a", "rate_hz": 2.5}, "rate_hz: expected int, got 2.5"),
        ({"robot": "a", "rate_hz": True}, "rate_hz: expected int, got True"),
        ({"robot": "a", "enabled": "yes"}, "enabled: expected bool, got 'yes'"),
        ({"robot": "a", "host": 1}, "host: expected str, got 1"),
        ({"robot": "a", "joints": [{}]}, r"joints\[0\].name: missing; joints\[0\] lacks the key 'name'"),
        ({}, "robot: missing; the config lacks the key 'robot'"),
        ({"robot": "a", "device": {"kind": "pedal"}}, "device.kind: 'pedal' is not one of stick, keys"),
        ({"robot": "a", "device": {"kind": "keys", "keys": {"w": 1}}}, "device.keys.w: expected str, got 1"),
        ({"robot": "a", "device": {"kind": "stick", "deadzone": [0.1, "x"]}}, r"device.deadzone\[1\]: expected float"),
        ({"robot": "a", "device": {"kind": "stick", "deadzone": {}}}, "device.deadzone: expected float or a list"),
        ({"robot": "a", "path": "/tmp/x"}, "path: unknown key"),
    ],
)
def test_errors_name_the_dotted_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}"):
        from_dict(Robot, data, extra={"path": None})


def test_values_are_converted_and_tagged_unions_pick_their_class() -> None:
    data = {
        "robot": "a",
        "joints": [{"name": "j0", "limit": 2}],
        "safety": {"max_command": [1, 2, 3]},
        "device": {"kind": "keys", "keys": {"w": "+y"}},
    }
    robot = from_dict(Robot, data)
    assert robot.joints == (Joint("j0", 2.0),) and isinstance(robot.joints[0].limit, float)
    assert robot.safety.max_command == (1.0, 2.0, 3.0)
    assert robot.device == Keys(keys={"w": "+y"})
    assert from_dict(Robot, {"robot": "a", "safety": None}).safety == Safety(), "an empty section keeps its defaults"


def test_files_are_named_and_the_callers_error_class_is_raised(tmp_path: Path) -> None:
    path = tmp_path / "robot.yaml"
    path.write_text("robot: a\nnote: for people\nsafety:\n  stale_after_periods: x\n")
    with pytest.raises(RobotError, match=rf"^robot config {path}: safety.stale_after_periods: expected float, got 'x'"):
        load_yaml(Robot, path, what="robot config", error=RobotError, ignore=("note",))

    path.write_text("robot: a\nrate_hz: 50\n")
    robot = load_yaml(Robot, path, overrides={"host": "h"}, extra={"path": path})
    assert (robot.rate_hz, robot.host, robot.path) == (50, "h", path)
    with pytest.raises(ConfigError, match=rf"^config {path}: host: expected str, got 1"):
        load_yaml(Robot, path, overrides={"host": 1})


@pytest.mark.parametrize(
    ("content", "message"),
    [("robot: [unclosed", "is not valid YAML"), ("- a list", "must be a mapping, got list"), ("", "robot: missing")],
)
def test_broken_files_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "robot.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_yaml(Robot, path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(Robot, tmp_path / "nope.yaml")
