"""Robot configs: loaded with clear errors, and a model the robot cannot run is refused by field."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from reflexlab.robot import RobotConfig, RobotConfigError
from reflexlab.spec import ObsTerm, SpecMismatchError
from sim.registry import get_task

SPEC = get_task("quadruped-walk").spec()
ROBOT = RobotConfig.load("quadruped")


def test_the_quadruped_config_accepts_the_task_spec_and_is_at_least_as_tight() -> None:
    ROBOT.check_model(SPEC)
    limits = ROBOT.safety_limits(SPEC)
    assert limits.names == SPEC.action.names
    assert all(lo >= a for lo, a in zip(limits.lower, SPEC.action.lower, strict=True))
    assert limits.max_rate <= SPEC.action.max_rate


def _edited(tmp_path: Path, edit) -> Path:
    d = yaml.safe_load(Path(ROBOT.path).read_text())
    edit(d)
    p = tmp_path / "robot.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.update(robot="another-robot"), "robot"),
        (lambda d: d["joints"]["names"].reverse(), "action.names"),
        (lambda d: d["joints"]["upper"].__setitem__(4, 1.0), "action.upper[4] (FL_thigh_joint)"),
        (lambda d: d["joints"]["lower"].__setitem__(0, -0.1), "action.lower[0] (FR_hip_joint)"),
    ],
)
def test_a_model_for_another_robot_is_refused_naming_the_field(tmp_path: Path, edit, field: str) -> None:
    robot = RobotConfig.load(_edited(tmp_path, edit))
    with pytest.raises(SpecMismatchError) as e:
        robot.check_model(SPEC)
    assert e.value.field == field
    assert field in str(e.value)


def test_an_observation_the_node_cannot_produce_is_refused() -> None:
    group = SPEC.policy_obs
    odd = replace(group, terms=(*group.terms, ObsTerm("lidar_scan", 360, "m")))
    spec = replace(SPEC, observation_groups=(odd, *SPEC.observation_groups[1:]))
    with pytest.raises(SpecMismatchError, match="lidar_scan") as e:
        ROBOT.check_model(spec)
    assert e.value.field == "observation_groups.policy.terms[7].name"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("robot: [unclosed", "not valid YAML"),
        ("- a list", "must be a mapping"),
        ("robot: x\n", "lacks the key 'joints'"),
    ],
)
def test_broken_config_files_say_what_is_wrong(tmp_path: Path, content: str, message: str) -> None:
    p = tmp_path / "robot.yaml"
    p.write_text(content)
    with pytest.raises(RobotConfigError, match=message):
        RobotConfig.load(p)


def test_unknown_keys_and_missing_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(RobotConfigError, match="stale_mod"):
        RobotConfig.load(_edited(tmp_path, lambda d: d["safety"].update(stale_mod="hold")))
    with pytest.raises(RobotConfigError, match=r"command\.type"):
        RobotConfig.load(_edited(tmp_path, lambda d: d["command"].update(type="twist")))
    with pytest.raises(RobotConfigError, match="does not exist"):
        RobotConfig.load(tmp_path / "nope.yaml")
    with pytest.raises(RobotConfigError, match="no robot config named 'hexapod'"):
        RobotConfig.load("hexapod")
