"""deploy.rl.actor on the simulated single robot: versions picked up between episodes, SIGKILL at any moment loses
at most the episode in flight, and a restarted actor neither repeats nor double-counts an episode.

Real parts: MuJoCo push-T (`sim.single_env.SimSingleEnv`), an exported ONNX generator served by onnxruntime through
`StepActor`, the crash-safe dataset writer, the policy store; the actor runs as its own process and is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from deploy.onnx_export import export_generator
from deploy.policy_store import PolicyStore
from policies.imitation import chunked
from reflexlab.dataset import load_dataset
from sim.single_env import SimSingleEnv
from tests.deploy.conftest import TINY_FACTS, TinyGenerator

REPO = Path(__file__).resolve().parents[2]
SEED = 100
EPISODE_STEPS = 60
TOTAL = 10  # episodes the actor collects
ACTOR = """
import sys
from collections.abc import Callable
from pathlib import Path
from deploy.policy_store import PolicyStore
from deploy.rl.actor import ActorOptions, run_actor
from sim.single_env import SimSingleEnv

env = SimSingleEnv("panda-push-t", episode_steps={steps})
run_actor(env, Path(sys.argv[1]), PolicyStore(sys.argv[2]), ActorOptions(int(sys.argv[3]), seed={seed}, poll_s=0.05))
"""


@pytest.fixture(scope="module")
def push_t_generator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = chunked(SimSingleEnv("panda-push-t").spec, 2, 4, 2)
    path = tmp_path_factory.mktemp("generator") / "push_t.onnx"
    export_generator(TinyGenerator(spec).eval(), spec, path, {"checkpoint_sha256": "0" * 64}, TINY_FACTS)
    return path


def test_sim_single_env_holds_bad_actions_naming_them_and_counts_robot_time() -> None:
    env = SimSingleEnv("panda-push-t", episode_steps=3)
    obs, info = env.reset(seed=4)
    assert obs.shape == (env.spec.policy_obs.size,) and info == {"seed": 4, "timestamp": 0.0}
    start = obs[:2]
    _, _, _, _, info = env.step(np.array([np.nan, 0.0]))
    assert info["source"] == "hold" and "not finite" in info["reason"]
    np.testing.assert_allclose(info["action"], start)
    _, _, _, _, info = env.step(np.zeros(3))
    assert info["source"] == "hold" and "shape (3,)" in info["reason"] and info["timestamp"] == pytest.approx(0.2)
    _, _, terminated, truncated, info = env.step(start)
    assert truncated and not terminated and info["reason"] == "time limit (3 steps)" and info["source"] == "policy"
    with pytest.raises(RuntimeError, match="reset"):
        env.step(start)
    assert set(info) == {"action", "is_intervention", "source", "reason", "success", "timestamp"}


def committed(dataset: Path) -> int:
    info = dataset / "meta" / "info.json"
    return json.loads(info.read_text())["total_episodes"] if info.exists() else 0


def start_actor(dataset: Path, store: Path, episodes: int) -> subprocess.Popen:
    code = ACTOR.format(steps=EPISODE_STEPS, seed=SEED)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", code, str(dataset), str(store), str(episodes)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(condition: Callable[[], bool], process: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"actor exited with {process.returncode}: {process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the actor made no progress"
        time.sleep(0.05)


def test_actor_survives_sigkill_and_picks_up_new_versions_between_episodes(
    push_t_generator: Path, tmp_path: Path
) -> None:
    dataset, store = tmp_path / "ds", PolicyStore(tmp_path / "policies")
    actor = start_actor(dataset, store.root, TOTAL)
    time.sleep(0.5)  # the actor waits for the learner's first version, without recording anything
    assert committed(dataset) == 0
    store.publish(push_t_generator, round=0, parity_error=0.0, tolerance=1e-5)
    wait_until(lambda: committed(dataset) >= 2, actor)
    store.publish(push_t_generator, round=1, parity_error=0.0, tolerance=1e-5)
    wait_until(lambda: committed(dataset) >= 4, actor)
    time.sleep(0.2)  # mid-episode (one lasts ~1 s here)
    actor.send_signal(signal.SIGKILL)
    actor.wait()
    killed_at = committed(dataset)
    assert load_dataset(dataset).num_episodes == killed_at  # what the kill left loads as committed
    assert killed_at < TOTAL, "the actor finished before the kill: make its episodes longer"
    restarted = start_actor(dataset, store.root, TOTAL)
    _, log = restarted.communicate(timeout=180)
    assert restarted.returncode == 0, log[-2000:]
    assert f"actor: episode {killed_at} (seed {SEED + killed_at}" in log  # resumed at the next episode, its seed

    ds = load_dataset(dataset)
    assert ds.num_episodes == TOTAL
    assert [ds.episode_meta(i)["seed"] for i in range(TOTAL)] == list(range(SEED, SEED + TOTAL))  # none twice/skipped
    versions = []
    for i in range(TOTAL):
        steps = ds.episode(i)
        assert len(set(steps["policy_version"].tolist())) == 1, "a version changed inside an episode"
        assert len(steps["action"]) <= EPISODE_STEPS
        versions.append(int(steps["policy_version"][0]))
    assert versions == sorted(versions) and versions[0] == 1 and versions[-1] == 2, versions


def test_an_actor_without_a_deployable_policy_says_so(push_t_generator: Path, tmp_path: Path) -> None:
    from deploy.rl.actor import ActorOptions, NoPolicyError, run_actor

    store = PolicyStore(tmp_path / "policies")
    with pytest.raises(NoPolicyError, match=r"no policy deployed .* \(none published\)"):
        run_actor(SimSingleEnv(), tmp_path / "ds", store, ActorOptions(1, wait_for_policy_s=0.2, poll_s=0.05))
    assert load_dataset(tmp_path / "ds").num_episodes == 0


def test_step_actor_takes_a_chunk_model_for_the_robots_task_and_refuses_another(push_t_generator: Path) -> None:
    """The robot's Spec is the task's (one step); a chunk model's horizons are its own (`Spec.task_interface`)."""
    from deploy.step_actor import StepActor
    from reflexlab.spec import SpecMismatchError
    from sim.registry import get_task

    robot = SimSingleEnv("panda-push-t").spec
    actor = StepActor(push_t_generator, robot)
    assert actor.act(np.zeros(robot.policy_obs.size)).shape == (2,)
    with pytest.raises(SpecMismatchError, match=r"model push_t\.onnx vs robot"):
        StepActor(push_t_generator, get_task("quadruped-walk").spec())
