"""The README's main job and the serving commands, run as a user runs them (the installed entry point)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REFLEXLAB = shutil.which("reflexlab") or str(Path(sys.executable).with_name("reflexlab"))


def run(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([REFLEXLAB, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_demo_quick_trains_exports_and_walks_over_ros(tmp_path: Path) -> None:
    r = run("demo", "--quick", "--run-dir", str(tmp_path / "demo"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ROS 2 sim-to-sim" in r.stdout and "policy node" in r.stdout
    assert (tmp_path / "demo" / "policy.onnx").is_file()


def test_serve_refuses_a_missing_model_with_a_one_line_error(tmp_path: Path) -> None:
    r = run("serve", "--model", str(tmp_path / "nope.onnx"), "--seconds", "1", cwd=tmp_path, timeout=120)
    assert r.returncode == 2
    assert "reflexlab: error: policy node not started" in r.stderr and "does not exist" in r.stderr
    assert "Traceback" not in r.stderr


def test_inspect_imports_neither_torch_nor_mujoco(exported) -> None:
    """Only the chosen verb's module is imported (`serve`: tests/deploy/ros/test_serving_imports.py)."""
    code = "import sys; from reflexlab.cli import main; main(sys.argv[1:]); print({'torch', 'mujoco'} & {*sys.modules})"
    r = subprocess.run([sys.executable, "-c", code, "inspect", str(exported[0])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "set()"


def test_bench_serve_quick_reports_every_rate(exported, tmp_path: Path) -> None:
    r = run(
        "bench", "serve", "--model", str(exported[0]), "--rates", "200", "--seconds", "2", "--json",
        "--out-dir", str(tmp_path), cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])
    assert m["rate_200_commands_received"] > 0.5 * 200 * 2
    assert 100 < m["rate_200_achieved_hz"] < 220
    assert 0 < m["rate_200_latency_p50_us"] <= m["rate_200_latency_p99_us"]
    assert 0 < m["rate_200_echo_latency_p50_us"] <= m["rate_200_echo_latency_p99_us"]  # the same-run floor
    assert (tmp_path / "serve_latency.png").is_file() and (tmp_path / "serve.json").is_file()


def test_bench_distill_quick_runs_the_whole_pipeline(tmp_path: Path) -> None:
    """demos → teacher → consistency + MeanFlow students → seeded evaluation, latency, modes: one command."""
    r = run(
        "bench", "distill", "--quick", "--json", "--work-dir", str(tmp_path / "work"),
        "--out-dir", str(tmp_path / "out"), cwd=tmp_path, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads(r.stdout.strip().splitlines()[-1])
    for name in ("diffusion_100", "diffusion_10", "diffusion_1", "consistency_1", "meanflow_1"):
        assert 0.0 <= m[f"{name}_mean_max_coverage"] <= 1.0
        assert 0.0 <= m[f"{name}_success_rate"] <= 1.0
        assert 0 < m[f"{name}_latency_p50_us"] <= m[f"{name}_latency_p99_us"]
    for name in ("diffusion_100", "consistency_1"):  # every policy at every execution horizon, scored at its best
        for ta in (2, 8):
            assert 0.0 <= m[f"{name}_ta{ta}_success_rate"] <= 1.0
        assert m[f"{name}_execution_horizon"] in (2, 8)
        best = m[f"{name}_ta{m[f'{name}_execution_horizon']:.0f}_mean_max_coverage"]
        assert m[f"{name}_mean_max_coverage"] == best
    # one network call vs a hundred, in the same run
    assert m["latency_ratio_teacher100_to_consistency"] > 5
    assert "consistency_mean_max_coverage_gain_over_teacher1" in m
    assert "consistency: latency p99 <= 1000 us" in m["bars"] and "meanflow: both modes kept" in m["bars"]
    trained = m["config"]["runs"]  # how each run was made: students re-plan every 2 steps, weighted for it
    assert trained["seed0/diffusion"]["execution_horizon"] == 8
    for s in ("consistency", "meanflow"):
        assert (trained[f"seed0/{s}"]["execution_horizon"], trained[f"seed0/{s}"]["unexecuted_step_weight"]) == (2, 0.1)
        assert [r["seeds"] for r in trained[f"seed0/{s}"]["dagger_rounds"]] == ["50000..50001"]  # quick: one round
    # The ratio bars compare teacher@100 and the students on further episodes, each at its chosen Ta.
    assert m["config"]["bar_seeds"] == "10004..10007"
    for name in ("diffusion_100", "consistency_1", "meanflow_1"):
        assert 0.0 <= m[f"{name}_bar_success_rate"] <= 1.0
    assert "diffusion_10_bar_success_rate" not in m
    assert (tmp_path / "out" / "distill.png").is_file() and (tmp_path / "out" / "distill.json").is_file()
    assert (tmp_path / "work" / "demos" / "meta" / "info.json").is_file()
    assert (tmp_path / "out" / "distill_videos" / "consistency_1.mp4").stat().st_size > 1000
