"""The repository as a ROS 2 ament_python package: colcon builds it the way a robot workspace does,
and every launch file is valid against what was installed (no `launch`/`launch_ros` on PyPI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deploy.launch_check import LaunchError, check_launch_file, declared_parameters

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "reflexlab"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``colcon build`` of a copy of the checkout (tracked and new files), as in a robot workspace."""
    ws = tmp_path_factory.mktemp("ws")
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    src = ws / "src" / PACKAGE
    for f in files:
        if (REPO / f).is_file():
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / f, src / f)
    colcon = Path(sys.executable).with_name("colcon")
    result = subprocess.run(
        [str(colcon), "build", "--base-paths", "src", "--packages-select", PACKAGE],
        cwd=ws, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return ws / "install" / PACKAGE


@pytest.fixture(scope="module")
def share_dir(workspace: Path):
    """Package → share directory as the ament index of the built workspace resolves it."""
    from ament_index_python.packages import get_package_share_directory

    old = os.environ.get("AMENT_PREFIX_PATH", "")
    os.environ["AMENT_PREFIX_PATH"] = f"{workspace}{os.pathsep}{old}"
    yield get_package_share_directory
    os.environ["AMENT_PREFIX_PATH"] = old


@pytest.fixture(scope="module")
def declared() -> dict[str, dict[str, type]]:
    """What each executable's node really declares (instances, not a list kept by hand)."""
    import rclpy

    from deploy.ros.policy_node import PolicyNode
    from deploy.ros.record_node import RecordNode
    from real.cameras.ros_node import PARAMETERS as CAMERA_PARAMETERS
    from real.franka.ros_node import PARAMETERS as FRANKA_PARAMETERS
    from sim.ros.arm_bridge import ArmBridge
    from sim.ros.sim_bridge import SimBridge

    rclpy.init()
    try:
        nodes = (
            ("policy_node", PolicyNode),
            ("sim_bridge", SimBridge),
            ("arm_bridge", ArmBridge),
            ("record_node", RecordNode),
        )
        # Hardware nodes open their device in __init__; they declare exactly their PARAMETERS table.
        out = {
            exe: {name: type(value) for name, value in table.items()}
            for exe, table in (("camera_node", CAMERA_PARAMETERS), ("franka_node", FRANKA_PARAMETERS))
        }
        for exe, cls in nodes:
            node = cls()
            out[exe] = declared_parameters(node)
            node.destroy_node()
        return out
    finally:
        rclpy.try_shutdown()


def test_colcon_installs_index_marker_executables_and_share_files(workspace: Path, share_dir) -> None:
    share = Path(share_dir(PACKAGE))
    assert share == workspace / "share" / PACKAGE
    files = ("package.xml", "launch/serve.launch.xml", "launch/sim.launch.xml", "launch/sim_robot.launch.xml",
             "launch/robot.launch.xml", "config/robots/quadruped.yaml", "config/robots/franka.yaml",
             "config/teleop/gamepad.yaml")  # fmt: skip
    for f in files:
        assert (share / f).is_file(), f
    for exe in ("policy_node", "sim_bridge", "arm_bridge", "record_node", "camera_node", "franka_node"):
        assert os.access(workspace / "lib" / PACKAGE / exe, os.X_OK), exe


def test_installed_policy_node_runs_like_ros2_run_and_refuses_a_missing_model(workspace: Path, tmp_path: Path) -> None:
    env = dict(os.environ, AMENT_PREFIX_PATH=f"{workspace}{os.pathsep}{sys.prefix}")
    result = subprocess.run(
        [str(workspace / "lib" / PACKAGE / "policy_node"), "--ros-args", "-p", f"model_path:={tmp_path / 'x.onnx'}"],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert "does not exist" in result.stderr + result.stdout


@pytest.mark.parametrize("launch_file", sorted((REPO / "launch").glob("*.launch.xml")), ids=lambda p: p.name)
def test_every_launch_file_is_valid_against_the_installed_package(launch_file: Path, share_dir, declared) -> None:
    installed = Path(share_dir(PACKAGE)) / "launch" / launch_file.name
    nodes = check_launch_file(installed, declared, args={"model": "/robot/policy.onnx"}, share_dir=share_dir)
    assert nodes, "a launch file that starts no node"
    for node in nodes:
        assert node.package == PACKAGE
        assert node.parameter_files and all(f.is_file() for f in node.parameter_files)


def test_the_checker_catches_what_ros2_launch_would_trip_over(tmp_path: Path, share_dir, declared) -> None:
    def check(body: str) -> None:
        f = tmp_path / "x.launch.xml"
        f.write_text(f"<launch>{body}</launch>")
        check_launch_file(f, declared, share_dir=share_dir)

    params = tmp_path / "p.yaml"
    params.write_text("policy:\n  ros__parameters:\n    rate_hz: 1000\n")
    cases = {
        '<node pkg="reflexlab" exec="no_such_exec" name="x"/>': "does not exist",
        '<node pkg="no_such_pkg" exec="policy_node" name="x"/>': "not installed",
        '<node pkg="reflexlab" exec="policy_node" name="policy"><param name="rate" value="1.0"/></node>': "rate",
        f'<node pkg="reflexlab" exec="policy_node" name="policy"><param from="{params}"/></node>': "is a int",
        '<node pkg="reflexlab" exec="policy_node" name="p"><param from="/nope.yaml"/></node>': "does not exist",
        '<arg name="model"/>': "required launch argument 'model'",
        '<node pkg="reflexlab" exec="policy_node" name="p"><param name="model_path" value="$(var m)"/></node>': "var m",
        "<group/>": "not one this checker understands",
    }
    for body, message in cases.items():
        with pytest.raises(LaunchError, match=message.replace("(", r"\(").replace(")", r"\)")):
            check(body)
