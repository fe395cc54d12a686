"""`reflexlab bench car-serve`: the frame → command latency of a car camera policy through the car policy node, as a
JSON line, a file and a histogram; with its own policy (scripted laps → bc with the camera → 1-step export) when
none is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reflexlab.cli import main


def run_bench(args: list[str], capfd: pytest.CaptureFixture[str]) -> dict:
    main(["bench", "car-serve", "--json", *args])
    return json.loads(capfd.readouterr().out.strip().splitlines()[-1])


def test_the_bench_times_every_frame_to_its_command(car_policy, tmp_path: Path, capfd) -> None:
    m = run_bench(["--model", str(car_policy.path), "--seconds", "2", "--out-dir", str(tmp_path)], capfd)
    # 30 fps for 2 s, and a command at the first frame of each 0.1 s: the policy's 10 Hz
    assert m["frames"] >= 40 and 0.25 * m["frames"] <= m["commands"] <= 0.4 * m["frames"] + 1, m
    assert 0 < m["frame_to_command_p50_ms"] <= m["frame_to_command_p99_ms"] <= m["frame_to_command_max_ms"]
    assert m["bar_p99_le_10ms"] == (m["frame_to_command_p99_ms"] <= 10.0)
    assert 0.0 <= m["cpu_steal_percent"] <= 100.0 and m["machine"]["cores"] >= 1
    assert (tmp_path / "car_serve_latency.png").stat().st_size > 0
    assert json.loads((tmp_path / "car_serve.json").read_text())["frames"] == m["frames"]


def test_the_bench_makes_its_own_camera_policy(tmp_path: Path, capfd) -> None:
    """--quick: 2 scripted laps with the camera, 20 bc steps, a 1-step export (~15 s), then the same measurement."""
    m = run_bench(["--quick", "--seconds", "2", "--out-dir", str(tmp_path)], capfd)
    assert m["model"].startswith("trained here") and m["export_max_abs_error"] <= 1e-4
    assert m["commands"] >= 12
