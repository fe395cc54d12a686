"""Real-world RL's loop end to end on the simulated push-T robot: the actor as its own process, the learner beside it.

Real parts throughout: scripted demonstrations in MuJoCo, a flow policy trained on them (SFT), the learner's HABC
rounds (critics, weighted fine-tune, export unrolled to ONNX with a parity check, publication), the actor process
serving each version with onnxruntime and recording crash-safe. Checked: versions deployed in order and picked up
between episodes, the round log and its plot, and a learner that resumes (after finishing, and after dying between
publishing a version and saving its state) without training or deploying a round twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deploy.policy_store import PolicyStore
from deploy.rl import learner as learner_module
from deploy.rl.learner import LearnerOptions, run_learner
from policies.generative.train import TrainConfig
from policies.imitation import train_bc_run
from policies.rl.critics import CriticConfig
from policies.rl.habc import HabcConfig, HabcRound
from reflexlab.dataset import load_dataset
from sim.demos import record_demos

REPO = Path(__file__).resolve().parents[2]
ACTOR = """
import sys
from pathlib import Path
from deploy.policy_store import PolicyStore
from deploy.rl.actor import ActorOptions, run_actor
from sim.single_env import SimSingleEnv

run_actor(SimSingleEnv("panda-push-t", episode_steps=30), Path(sys.argv[1]), PolicyStore(sys.argv[2]),
          ActorOptions(seed=7, poll_s=0.05))
"""
HABC = HabcConfig(
    critic=CriticConfig(hidden=32, steps=100),
    train=TrainConfig(
        method="flow", max_steps=30, batch_size=32, warmup_steps=5, checkpoint_every=10**9, progress=False
    ),
)  # fmt: skip


@pytest.fixture(scope="module")
def sft(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(demos, an SFT flow policy trained on them briefly)."""
    root = tmp_path_factory.mktemp("sft")
    record_demos("panda-push-t", 4, root / "demos", seed=0, num_envs=4, progress=False)
    checkpoint = train_bc_run(
        "flow", root / "demos", root / "policy", 60, None, 0, obs_horizon=2, horizon=4, execution_horizon=2,
        progress=False, down_dims=(16, 32), batch_size=32,
    )  # fmt: skip
    return root / "demos", checkpoint


def start_actor(dataset: Path, store: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", ACTOR, str(dataset), str(store)]
    return subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)


def test_rounds_deploy_versions_the_actor_runs_and_the_learner_resumes(
    sft: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demos, initial = sft
    dataset, store, run_dir = tmp_path / "rollouts", PolicyStore(tmp_path / "policies"), tmp_path / "learner"
    options = LearnerOptions(
        rounds=2, episodes_per_round=2, demos=demos, sampling_steps=4, poll_s=0.05, update=HabcRound(HABC),
        evaluate_final=False,
    )  # fmt: skip
    actors = [start_actor(dataset, store.root)]
    try:
        rows = run_learner(dataset, store, run_dir, initial, options, log=lambda _: None)
        assert store.finished() == {**store.finished(), "rounds": 2, "final_version": 3}
        actors[0].wait(timeout=60)  # the learner said it was done: the actor stopped by itself
        actors.append(start_actor(dataset, store.root))  # more rounds: the actor is started again
        # the third round dies after publishing its version, before saving its state
        real_write = learner_module.write_json_atomically

        def dies_saving(path: Path, value: object) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(learner_module, "write_json_atomically", dies_saving)
        with pytest.raises(KeyboardInterrupt):
            run_learner(dataset, store, run_dir, initial, dataclasses.replace(options, rounds=3), log=lambda _: None)
        monkeypatch.setattr(learner_module, "write_json_atomically", real_write)
        resumed = run_learner(
            dataset, store, run_dir, initial, dataclasses.replace(options, rounds=3, evaluate_final=True)
        )
    finally:
        for actor in actors:
            actor.send_signal(signal.SIGKILL)
            actor.wait()

    assert [r["round"] for r in rows] == [1, 2] and all(r["verdict"] == "deployed" for r in rows)
    assert [v.round for v in store.versions()] == [0, 1, 2, 3]  # round 3 deployed once, adopted on resume
    assert [r["round"] for r in resumed] == [1, 2, 3, 4] and store.rejected() == {}
    assert resumed[-1]["verdict"] == "final" and resumed[-1]["evaluated"]["version"] == 4  # how the last one does
    assert json.loads((run_dir / "learner.json").read_text())["round"] == 3
    for row, version in zip(rows, (1, 2), strict=True):
        evaluated = row["evaluated"]
        assert evaluated["version"] == version and evaluated["episodes"] == 2 and evaluated["robot_time_s"] > 0
        assert 0 <= evaluated["success_rate"] <= 1 and evaluated["interventions_per_episode"] == 0
        assert row["update"]["episodes"] >= 2 * version and np.isfinite(row["update"]["viability_mse"])
    assert (run_dir / "rounds.png").stat().st_size > 0 and list((run_dir / "tensorboard").glob("events.*"))
    ds = load_dataset(dataset)
    versions = [int(ds.episode(i)["policy_version"][0]) for i in range(ds.num_episodes)]
    assert versions == sorted(versions) and versions[0] == 1 and 2 in versions
    assert versions == [1, 1, 2, 2, 3, 3, 4, 4]  # paced: each version ran the episodes its round asked for, no more
    for version in store.versions():
        assert version.record["parity_error"] <= options.parity_tolerance


def test_reflexlab_rl_habc_runs_actor_and_learner_and_resumes(sft: tuple[Path, Path], tmp_path: Path) -> None:
    """The command a user types: the learner here, the actor as its own process with the scripted person at the
    deadman, one JSON line; run again, it finds the rounds done and deploys nothing new."""
    demos, initial = sft
    command = [
        sys.executable, "-m", "reflexlab.cli", "rl", "habc", "--initial", str(initial), "--demos", str(demos),
        "--work-dir", str(tmp_path), "--rounds", "1", "--episodes-per-round", "2", "--episode-time-s", "8",
        "--sampling-steps", "4", "--update-steps", "20", "--critic-steps", "50", "--intervener", "scripted",
        "--critics", "one", "--no-aware",  # the baseline's switches reach the learner (the defaults: the test above)
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    rows = json.loads(first.stdout.strip().splitlines()[-1])["rounds"]
    assert [r["verdict"] for r in rows] == ["deployed", "final"] and rows[-1]["evaluated"]["version"] == 2
    # the scripted person took over the barely trained policy (wandering, it is no stall before push-T's 6 s of
    # patience, hence 8 s episodes): the round log counts it, the update saw its steps
    assert rows[0]["evaluated"]["interventions_per_episode"] > 0 and rows[0]["update"]["person_steps"] > 0
    assert rows[0]["update"]["efficiency_mse"] is None  # --critics one: no efficiency head was fit
    assert [v.version for v in PolicyStore(tmp_path / "policies").versions()] == [1, 2]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["rounds"] == rows
    assert [v.version for v in PolicyStore(tmp_path / "policies").versions()] == [1, 2]
    ds = load_dataset(tmp_path / "rollouts")
    assert ds.num_episodes >= 4 and all(len(ds.episode(i)["action"]) <= 80 for i in range(ds.num_episodes))


def test_a_round_whose_update_diverges_is_rejected_naming_it_and_deploys_nothing(tmp_path: Path) -> None:
    from deploy.policy_store import PolicyVersion
    from reflexlab.dataset import DatasetWriter

    with DatasetWriter(tmp_path / "ds", 10, "toy", {"observation.state": (2,), "action": (2,)}) as writer:
        for _ in range(2):
            writer.add_frame({"observation.state": np.zeros(2), "action": np.zeros(2)}, policy_version=1)
            writer.save_episode("reach")

    def diverges(*args: object, **kwargs: object) -> None:
        raise FloatingPointError("non-finite advantage on a policy step: the critics diverged")

    store = PolicyStore(tmp_path / "policies")
    deployed = PolicyVersion(1, tmp_path / "v000001.onnx", {"round": 2})
    options = LearnerOptions(rounds=3, episodes_per_round=2, demos=tmp_path / "ds", update=diverges)
    row = learner_module._round(tmp_path / "ds", store, tmp_path / "run", tmp_path / "ckpt.pt", 3, deployed, options)
    assert row["verdict"] == "rejected" and row["reason"].startswith("round 3: update failed: non-finite advantage")
    assert row["evaluated"]["version"] == 1 and row["evaluated"]["episodes"] == 2 and store.versions() == []
