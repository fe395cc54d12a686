"""`reflexlab bench franka`: its options; the measurement is `real.franka.bench`, beside the driver it exercises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reflexlab.cli.bench.common import BenchOptions


@dataclass(frozen=True)
class FrankaBench(BenchOptions):
    """The 1 kHz driver loop under a 20 Hz Cartesian target stream against franka-sim with enforcement on."""

    seconds: float | None = None
    """driven time (default 30 s; 5 s with --quick)."""

    def run(self) -> dict[str, Any]:
        from real.franka.bench import run_bench_franka

        return run_bench_franka(seconds=self.seconds, quick=self.quick, table=self.table, out_dir=self.out_dir)
