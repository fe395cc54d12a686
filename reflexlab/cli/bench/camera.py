"""`reflexlab bench camera`: its options; the measurement is `real.cameras.bench`, beside the driver it exercises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reflexlab.cli.bench.common import BenchOptions


@dataclass(frozen=True)
class CameraBench(BenchOptions):
    """Frame age at the policy: a RealSense recording played through librealsense's pipeline in real time."""

    seconds: float | None = None
    """playback length (default 10 s; 3 s with --quick)."""

    def run(self) -> dict[str, Any]:
        from real.cameras.bench import bench_camera

        return bench_camera(quick=self.quick, seconds=self.seconds, table=self.table, out_dir=self.out_dir)
