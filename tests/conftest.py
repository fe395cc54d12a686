"""Shared fixtures: one tiny trained run per test worker, reused by play/export/resume tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
# ROS 2 isolation (DESIGN.md): a DDS domain per test session and worker, discovery on this host only,
# so parallel workers and concurrent sessions never hear each other and nothing leaves the machine.
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
os.environ["ROS_DOMAIN_ID"] = str(20 + (os.getppid() % 35) * 2 + _worker % 2)
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["AMENT_PREFIX_PATH"] = os.environ.get("AMENT_PREFIX_PATH") or sys.prefix  # as reflexlab.ros sets it


def tiny_train(run_dir: Path, iterations: int = 3, num_envs: int = 16, save_interval: int = 1) -> Path:
    """A real (short) PPO run through the CLI entry point."""
    from reflexlab.cli.train import train

    train(run_dir=run_dir, num_envs=num_envs, iterations=iterations, save_interval=save_interval, threads=1)
    return run_dir


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_train(tmp_path_factory.mktemp("run") / "quadruped")


@pytest.fixture(scope="session")
def exported(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The tiny run exported to ONNX (path, export result)."""
    from reflexlab.cli.export import export_checkpoint

    out = tmp_path_factory.mktemp("onnx") / "policy.onnx"
    return out, export_checkpoint(trained_run, out, num_obs=1000)


@pytest.fixture
def ros():
    """An initialised rclpy context for one test (shut down afterwards)."""
    import rclpy

    rclpy.init()
    yield
    rclpy.try_shutdown()
