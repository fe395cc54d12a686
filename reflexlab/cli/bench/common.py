"""The options every bench takes: how it reports, not what it measures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro


@dataclass(frozen=True)
class BenchOptions:
    """How a bench reports; each bench's config adds what it measures and a ``run()`` that returns the metrics."""

    quick: bool = False
    """a CI-sized run of the same code path."""
    json_only: Annotated[bool, tyro.conf.arg(name="json")] = False
    """print only the JSON line."""
    out_dir: Path = Path("runs/bench")
    """where the JSON and plots are written."""

    @property
    def table(self) -> bool:
        """Whether to print the human table (everything but the JSON line)."""
        return not self.json_only
