import json
from pathlib import Path

import imageio.v3 as iio
import pytest

from policies.evaluate import EvalOptions, evaluate_run
from reflexlab.cli import main
from reflexlab.spec import SpecMismatchError
from sim.registry import get_task
from sim.tasks.quadruped.evaluate import command_grid


def test_play_writes_report_and_video(trained_run: Path, tmp_path: Path) -> None:
    video = tmp_path / "out.mp4"
    report = tmp_path / "eval.json"
    main(
        [
            "play",
            "--run-dir",
            str(trained_run),
            "--episodes",
            "4",
            "--episode-s",
            "2",
            "--video",
            str(video),
            "--report",
            str(report),
        ]
    )
    data = json.loads(report.read_text())
    s = data["summary"]
    assert s["episodes"] == 4 and s["episode_s"] == 2
    for key in ("no_fall_rate", "lin_vel_error_m_s", "yaw_rate_error_rad_s", "distance_m", "stepping_hz", "slip_m_s"):
        assert isinstance(s[key], float), key
    assert data["per_episode"]["command"][0] == [0.5, 0.0, 0.0]
    meta = iio.immeta(video)
    assert meta["fps"] == 25
    first = iio.imread(video, index=0)
    assert first.shape == (360, 640, 3) and first.std() > 5, "blank frame: offscreen rendering failed"


def test_evaluation_is_deterministic(trained_run: Path, tmp_path: Path) -> None:
    a = evaluate_run(trained_run, EvalOptions(3, 1.0, report=tmp_path / "a.json"), progress=False)
    b = evaluate_run(trained_run, EvalOptions(3, 1.0, report=tmp_path / "b.json"), progress=False)
    assert a["per_episode"] == b["per_episode"]


def test_play_refuses_a_checkpoint_for_another_spec(trained_run: Path, tmp_path: Path, monkeypatch) -> None:
    entry = get_task("quadruped-walk")
    real_spec = entry.spec()
    d = real_spec.to_dict()
    d["control_rate_hz"] = 100.0
    from reflexlab.spec import Spec

    monkeypatch.setattr(type(entry), "spec", lambda self: Spec.from_dict(d))
    with pytest.raises(SpecMismatchError, match="control_rate_hz"):
        evaluate_run(trained_run, EvalOptions(1, 0.1, task="quadruped-walk", report=tmp_path / "x.json"))


def test_command_grid_spans_the_ranges() -> None:
    grid = command_grid(get_task("quadruped-walk").config("full"))
    assert grid.shape == (45, 3)
    assert len({tuple(c) for c in grid.tolist()}) == 45
    assert grid[:, 0].min() == -1 and grid[:, 0].max() == 1
    assert grid[:, 1].abs().max() == 0.5 and grid[:, 2].abs().max() == 1
