"""Shared pieces of every `reflexlab bench`: machine description, table printing, JSON output."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """Cores and CPU model, so a number is never read without the machine that produced it."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": model, "python": platform.python_version()}


def cpu_times() -> tuple[float, ...]:
    """The machine's CPU time counters (user, nice, system, idle, iowait, irq, softirq, steal); zeros without /proc."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:9]
    except OSError:
        return (0.0,) * 8
    return tuple(float(x) for x in fields)


def cpu_steal_percent(before: tuple[float, ...], after: tuple[float, ...]) -> float:
    """Share of CPU time between two `cpu_times` readings that the hypervisor gave to other guests.

    These VMs lose up to ~40 % at times; a latency or rate read without it cannot be judged.
    """
    spent = [b - a for a, b in zip(before, after, strict=True)]
    return 100.0 * spent[7] / sum(spent) if sum(spent) > 0 else 0.0


def print_table(title: str, rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print(title)
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths, strict=True)))
    print(line)
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))


def write_json(metrics: dict[str, Any], out_dir: Path, name: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(metrics, indent=2))
    return path
