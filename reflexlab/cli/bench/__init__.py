"""L5 experiments: `reflexlab bench sim|serve|sim2sim|distill|camera|franka|realrl|car-serve`, one module per bench.

Every `reflexlab bench …` builds all the benches' options to parse its command line, so the bench
modules import torch, MuJoCo, rclpy and the learning code inside their functions: `bench serve`
and `bench camera` never load the sim or torch.
"""

from __future__ import annotations

import json
from typing import Annotated

import tyro

from reflexlab.cli.bench.camera import CameraBench
from reflexlab.cli.bench.car_serve import CarServeBench
from reflexlab.cli.bench.distill import DistillBench
from reflexlab.cli.bench.franka import FrankaBench
from reflexlab.cli.bench.realrl import RealRlBench
from reflexlab.cli.bench.serve import ServeBench
from reflexlab.cli.bench.sim import SimBench
from reflexlab.cli.bench.sim2sim import Sim2SimBench

Bench = (
    Annotated[SimBench, tyro.conf.subcommand("sim")]
    | Annotated[ServeBench, tyro.conf.subcommand("serve")]
    | Annotated[Sim2SimBench, tyro.conf.subcommand("sim2sim")]
    | Annotated[DistillBench, tyro.conf.subcommand("distill")]
    | Annotated[CameraBench, tyro.conf.subcommand("camera")]
    | Annotated[FrankaBench, tyro.conf.subcommand("franka")]
    | Annotated[RealRlBench, tyro.conf.subcommand("realrl")]
    | Annotated[CarServeBench, tyro.conf.subcommand("car-serve")]
)


def bench(config: tyro.conf.OmitSubcommandPrefixes[Bench]) -> None:
    """Benchmarks; each prints a human table and ends stdout with one JSON line of metrics."""
    print(json.dumps(config.run()))
