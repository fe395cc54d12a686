"""`bench_camera`: the same code path as `reflexlab bench camera`, small enough for the default suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from real.cameras.bench import bench_camera


def test_bench_measures_frame_age_at_the_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = bench_camera(width=64, height=48, fps=30, seconds=1.0, policy_rates_hz=(50.0,), out_dir=tmp_path)
    assert m["frames_recorded"] == 30
    assert m["frames_received"] >= 25 and m["frames_dropped"] == 0 and m["timestamps_backwards"] == 0
    assert 20.0 < m["fps_measured"] < 40.0
    assert m["policy_50hz_reads"] >= 30
    assert 0.0 < m["policy_50hz_frame_age_p50_ms"] <= m["policy_50hz_frame_age_p99_ms"]
    assert m["frame_age_p99_periods"] == m["policy_50hz_frame_age_p99_periods"]
    assert json.loads((tmp_path / "camera.json").read_text())["frames_recorded"] == 30
    assert (tmp_path / "camera_frame_age.png").stat().st_size > 0
    assert "frame age p50/p99 ms" in capsys.readouterr().out


@pytest.mark.slow
def test_quick_bench_meets_the_frame_age_bar(tmp_path: Path) -> None:
    """p99 frame age ≤ 2 frame periods at 640x480@30 (needs a host that is not saturated)."""
    m = bench_camera(quick=True, out_dir=tmp_path, table=False)
    assert m["frame_age_bar_met"], m
