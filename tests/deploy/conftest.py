"""A tiny action-chunk generator for the quadruped, exported with `export_generator` once per worker, and the
same with a camera, with a robot config that has that camera.

No training: the serving path only needs a model of the right interface whose chunk depends on
both the observation history and the noise (and the camera's frames), with actions small enough
to stay inside the limits.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from torch import nn

from deploy.artifact import GraphFacts
from deploy.onnx_export import export_generator
from reflexlab.robot import RobotConfig, resolve_robot_config
from reflexlab.spec import ImageInput, Spec
from sim.registry import get_task

# The quadruped's interface as an action-chunk model: 8 actions per chunk, 4 executed, 2 observations.
GENERATOR_SPEC = dataclasses.replace(
    get_task("quadruped-walk").spec(),
    action_chunk=8,
    execution_horizon=4,
    observation_horizon=2,
    control_rate_hz=100.0,
)


# The same, reading a 12×16 "front" camera; the robot config below has it at 24×32 on CAMERA_TOPIC.
CAMERA_GENERATOR_SPEC = dataclasses.replace(GENERATOR_SPEC, images=(ImageInput("front", 12, 16),))
CAMERA_TOPIC = "/front/image_raw"
CAMERA_SIZE = (24, 32)  # (height, width) the camera delivers


class TinyGenerator(nn.Module):
    """chunk[b, h] = 0.5 (1 + h / (H − 1)) tanh(W · scaled obs history) + 0.1 noise[b, h]."""

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(spec.observation_horizon * spec.policy_obs.size, spec.action.size)
        self.register_buffer("scales", torch.tensor(spec.policy_obs.scales()))
        self.register_buffer("ramp", 1.0 + torch.linspace(0.0, 1.0, spec.action_chunk).view(1, -1, 1))

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        z = torch.tanh(self.net((obs * self.scales).flatten(1)))
        return 0.5 * self.ramp * z[:, None, :] + 0.1 * noise


# What TinyGenerator does inside, as its export states it: the Spec's scales, nothing clipped.
TINY_FACTS = GraphFacts(
    spec_scales=True, obs_normalization="none", output="0.5 (1 + h / (H - 1)) tanh(W · scaled history) + 0.1 noise"
)


class Generator(NamedTuple):
    path: Path
    module: TinyGenerator
    spec: Spec


@pytest.fixture(scope="session")
def generator(tmp_path_factory: pytest.TempPathFactory) -> Generator:
    module = TinyGenerator(GENERATOR_SPEC).eval()
    path = tmp_path_factory.mktemp("generator") / "generator.onnx"
    meta = {"checkpoint_sha256": "0" * 64, "teacher": "none (test)"}
    export_generator(module, GENERATOR_SPEC, path, meta, TINY_FACTS)
    return Generator(path, module, GENERATOR_SPEC)


class TinyCameraGenerator(TinyGenerator):
    """TinyGenerator's chunk shifted by the newest frame's brightness: + 0.2 (mean / 255 − 0.5), every action."""

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        bright = image[:, -1].float().mean(dim=(1, 2, 3)) / 255.0 - 0.5
        return super().forward(obs, noise) + 0.2 * bright[:, None, None]


CAMERA_FACTS = dataclasses.replace(TINY_FACTS, output=TINY_FACTS.output + " + 0.2 (newest frame's mean / 255 - 0.5)")


@pytest.fixture(scope="session")
def camera_generator(tmp_path_factory: pytest.TempPathFactory) -> Generator:
    module = TinyCameraGenerator(CAMERA_GENERATOR_SPEC).eval()
    path = tmp_path_factory.mktemp("camera_generator") / "camera_generator.onnx"
    meta = {"checkpoint_sha256": "0" * 64, "teacher": "none (test)"}
    export_generator(module, CAMERA_GENERATOR_SPEC, path, meta, CAMERA_FACTS)
    return Generator(path, module, CAMERA_GENERATOR_SPEC)


@pytest.fixture(scope="session")
def camera_robot(tmp_path_factory: pytest.TempPathFactory) -> RobotConfig:
    """The quadruped's robot config with a "front" camera (as a user adds one to config/robots/quadruped.yaml)."""
    path = tmp_path_factory.mktemp("robots") / "quadruped_camera.yaml"
    h, w = CAMERA_SIZE
    text = resolve_robot_config("quadruped").read_text()
    path.write_text(text + f"cameras:\n  front: {{topic: {CAMERA_TOPIC}, width: {w}, height: {h}}}\n")
    return RobotConfig.load(path)


# A car-race camera policy: the task's interface with a 32×32 "front" camera, 4-action chunks, 2 executed.
CAR_SPEC = dataclasses.replace(
    get_task("car-race").spec(),
    action_chunk=4,
    execution_horizon=2,
    observation_horizon=2,
    images=(ImageInput("front", 32, 32),),
)


class TinyCarPolicy(nn.Module):
    """throttle = 0.3 + 0.4 (newest frame's mean / 255 − 0.5); steering = 0.5 tanh(W · scaled history); + 0.01 noise."""

    def __init__(self, spec: Spec) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(spec.observation_horizon * spec.policy_obs.size, 1)
        self.register_buffer("scales", torch.tensor(spec.policy_obs.scales()))
        self.horizon = spec.action_chunk

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        bright = image[:, -1].float().mean(dim=(1, 2, 3)) / 255.0 - 0.5
        throttle = (0.3 + 0.4 * bright)[:, None, None].expand(-1, self.horizon, 1)
        steering = 0.5 * torch.tanh(self.net((obs * self.scales).flatten(1)))[:, None, :].expand(-1, self.horizon, 1)
        return torch.cat([throttle, steering], dim=-1) + 0.01 * noise


@pytest.fixture(scope="session")
def car_policy(tmp_path_factory: pytest.TempPathFactory) -> Generator:
    module = TinyCarPolicy(CAR_SPEC).eval()
    path = tmp_path_factory.mktemp("car_policy") / "car_policy.onnx"
    facts = dataclasses.replace(TINY_FACTS, output="throttle from the newest frame's brightness, steering from obs")
    export_generator(module, CAR_SPEC, path, {"checkpoint_sha256": "0" * 64, "teacher": "none (test)"}, facts)
    return Generator(path, module, CAR_SPEC)
