import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from policies.checkpoint import CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint
from policies.ppo import PPOConfig, TrainingStopped, runner_info, train
from reflexlab.cli import main
from reflexlab.spec import Spec, SpecMismatchError
from reflexlab.tasks.quadruped.walk import QuadrupedWalk
from sim.backends.mujoco_cpu import MujocoVecEnv
from sim.registry import get_task
from sim.task_entry import TaskEntry
from tests.conftest import tiny_train

ENTRY = get_task("quadruped-walk")


def test_training_writes_checkpoints_logs_and_curves(trained_run: Path) -> None:
    names = [p.name for p in list_checkpoints(trained_run)]
    assert names == ["model_0.pt", "model_1.pt", "model_2.pt"]
    assert list(trained_run.glob("events.out.tfevents.*")), "TensorBoard log missing"
    assert (trained_run / "training_curves.png").stat().st_size > 10_000
    info = json.loads((trained_run / "run.json").read_text())
    assert info["task"] == "quadruped-walk" and info["profile"] == "fast"
    state = load_checkpoint(trained_run / "model_2.pt", expect_spec=ENTRY.spec())
    assert state["iter"] == 2
    assert not list(trained_run.glob("*.tmp")), "atomic write left a temporary file"


def test_resume_after_sigkill(tmp_path: Path) -> None:
    """Kill a real training process mid-run; --resume continues from its last checkpoint."""
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "reflexlab.cli",
        "train",
        "--run-dir",
        str(run),
        "--num-envs",
        "16",
        "--iterations",
        "500",
        "--save-interval",
        "1",
        "--threads",
        "1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list_checkpoints(run)) < 3:
            assert proc.poll() is None, "training exited early"
            assert time.monotonic() < deadline, "no checkpoints written"
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    last = latest_checkpoint(run)
    assert last is not None
    killed_at = load_checkpoint(last)["iter"]  # every remaining checkpoint loads: writes are atomic
    for ckpt in list_checkpoints(run):
        load_checkpoint(ckpt)

    target = killed_at + 3
    out = subprocess.run(
        [*cmd[:-6], "--iterations", str(target), "--resume", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert f"resuming from {last.name} (iteration {killed_at + 1})" in out.stdout + out.stderr
    assert load_checkpoint(latest_checkpoint(run))["iter"] == target - 1


class _PoisonedWalk(QuadrupedWalk):
    """Fault injection: env 3's observation turns NaN from the 30th control step on."""

    steps = 0

    def observe(self, state, noise):  # type: ignore[no-untyped-def]
        obs = super().observe(state, noise)
        _PoisonedWalk.steps += 1
        if _PoisonedWalk.steps > 30:
            obs["policy"][3, 5] = float("nan")
        return obs


def test_nan_stops_training_naming_env_and_step_and_keeps_checkpoint(tmp_path: Path) -> None:
    entry = TaskEntry("quadruped-walk", _PoisonedWalk, ENTRY.profiles, ENTRY.default_profile, ENTRY.scene_xml)
    env = MujocoVecEnv(entry, entry.config(), num_envs=8, nthread=1)
    ppo = PPOConfig(num_steps_per_env=8, save_interval=1)
    info = runner_info("quadruped-walk", "fast", env.cfg, ppo, env.spec.to_json(), 8, 0)
    with pytest.raises(TrainingStopped) as e:
        train(env, ppo, tmp_path, iterations=10, run_info=info, progress=False)
    msg = str(e.value)
    assert "observation group 'policy'" in msg and "env(s) 3" in msg and "env step 30" in msg
    assert "last good checkpoint" in msg and "model_2.pt" in msg
    good = load_checkpoint(tmp_path / "model_2.pt")
    assert all(torch.isfinite(t).all() for t in good["actor_state_dict"].values() if t.is_floating_point())


def test_corrupt_checkpoint_is_reported_not_a_traceback(trained_run: Path, tmp_path: Path, capsys) -> None:
    bad = tmp_path / "model_9.pt"
    data = (trained_run / "model_2.pt").read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(bad)
    with pytest.raises(SystemExit) as e:
        main(["export", "--run-dir", str(bad), "--out", str(tmp_path / "p.onnx")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "model_9.pt is corrupt or truncated" in err and "Traceback" not in err


def test_checkpoint_of_another_task_is_refused_naming_the_field(trained_run: Path, tmp_path: Path, capsys) -> None:
    state = torch.load(trained_run / "model_2.pt", weights_only=False)
    spec = state["infos"]["spec"]
    spec["robot"] = "other-dog"
    spec["action"]["names"] = [n.replace("calf", "knee") for n in spec["action"]["names"]]
    other = tmp_path / "model_0.pt"
    torch.save(state, other)
    with pytest.raises(SpecMismatchError) as e:
        load_checkpoint(other, expect_spec=ENTRY.spec())
    assert e.value.field == "action.names"
    assert Spec.from_dict(spec).robot == "other-dog"
    for cmd in (["export", "--out", str(tmp_path / "x.onnx")], ["play", "--episodes", "1"]):
        with pytest.raises(SystemExit) as ex:
            main([*cmd, "--run-dir", str(other), "--task", "quadruped-walk"])
        assert ex.value.code == 2
        assert "field 'action.names'" in capsys.readouterr().err
    assert not (tmp_path / "x.onnx").exists()


def test_resume_refuses_a_run_of_another_task(trained_run: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "other"
    run.mkdir()
    info = json.loads((trained_run / "run.json").read_text())
    info["task"] = "quadruped-walk-rough"
    (run / "run.json").write_text(json.dumps(info))
    with pytest.raises(SystemExit) as e:
        main(["train", "--task", "quadruped-walk", "--run-dir", str(run), "--resume"])
    assert e.value.code == 2
    assert "holds a run of task 'quadruped-walk-rough', not 'quadruped-walk'" in capsys.readouterr().err


def test_tiny_train_helper_counts_iterations(tmp_path: Path) -> None:
    run = tiny_train(tmp_path / "r", iterations=2, save_interval=5)
    assert [p.name for p in list_checkpoints(run)] == ["model_0.pt", "model_1.pt"]
