"""The serving path carries neither torch nor MuJoCo: a robot computer runs onnxruntime and rclpy only.

Checked in a fresh interpreter each time, because the test process itself has imported both. The
`reflexlab serve` case really serves an exported generator for a second (model loaded, node
configured and activated, commands computed), so whatever that path imports is counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "mujoco")
# Serving process peak RSS (VmHWM) bar of the layers issue; today's figure is ~80 MB, torch alone adds ~400.
MAX_SERVING_RSS_MB = 150.0

_REPORT = f"""
import json, sys
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print("REPORT " + json.dumps({{"heavy": heavy, "peak_rss_mb": hwm_kb / 1024}}))
"""


def _report(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code + _REPORT], capture_output=True, text=True, timeout=120, check=False
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return json.loads(lines[-1].removeprefix("REPORT "))


def test_policy_node_executable_imports_neither_torch_nor_mujoco() -> None:
    """`ros2 run reflexlab policy_node` runs `deploy.ros.policy_node:main`."""
    assert _report("import deploy.ros.policy_node")["heavy"] == []


def test_reflexlab_serve_serves_a_model_without_torch_or_mujoco(generator, tmp_path: Path) -> None:
    code = f"""
from reflexlab.cli import main
main(["serve", "--model", {str(generator.path)!r}, "--robot", "quadruped", "--rate", "100", "--seconds", "1"])
"""
    report = _report(code)
    assert report["heavy"] == [], f"the serving process imported {report['heavy']}"
    assert report["peak_rss_mb"] <= MAX_SERVING_RSS_MB, report
