"""FrankaConfig: the shipped file loads, and every mistake is refused naming its dotted key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from real.franka.config import DEFAULT_PATH, FrankaConfig, FrankaConfigError


def _write(tmp_path: Path, edit) -> Path:
    d = yaml.safe_load(DEFAULT_PATH.read_text())
    edit(d)
    p = tmp_path / "franka.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def test_shipped_config_loads_and_overrides() -> None:
    c = FrankaConfig.load(host="127.0.0.1", mode="cartesian_impedance")
    assert c.host == "127.0.0.1" and c.mode == "cartesian_impedance"
    assert c.path == DEFAULT_PATH and c.safety.automatic_error_recovery is True
    assert FrankaConfig.load() == FrankaConfig(path=DEFAULT_PATH), "the file and the dataclass defaults agree"


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda d: d["safety"].update(comand_timeout_s=1.0), "safety.comand_timeout_s"),
        (lambda d: d["safety"]["collision"].update(upper_force=[1, 2, 3]), "safety.collision.upper_force"),
        (lambda d: d["impedance"].update(joint_stiffness=[1, 2, "x", 4, 5, 6, 7]), r"impedance.joint_stiffness\[2\]"),
        (lambda d: d.update(mode="position"), "mode"),
        (lambda d: d["safety"].update(automatic_error_recovery="yes"), "safety.automatic_error_recovery"),
        (lambda d: d["safety"].update(workspace_min=[0.9, 0, 0]), "safety.workspace_min"),
        (lambda d: d["safety"].update(max_joint_torque=[100] * 7), "safety.max_joint_torque"),
        (lambda d: d["safety"].update(command_timeout_s=0), "safety.command_timeout_s"),
        (lambda d: d.update(loop_priority=1.5), "loop_priority"),
    ],
)
def test_bad_key_is_named(tmp_path: Path, edit, key: str) -> None:
    p = _write(tmp_path, edit)
    with pytest.raises(FrankaConfigError, match=key) as e:
        FrankaConfig.load(p)
    assert str(p) in str(e.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FrankaConfigError, match="does not exist"):
        FrankaConfig.load(tmp_path / "nope.yaml")
