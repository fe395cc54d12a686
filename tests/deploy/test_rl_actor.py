"""deploy.rl.actor on the simulated single robot: versions picked up between episodes, SIGKILL at any moment loses
at most the episode in flight, and a restarted actor neither repeats nor double-counts an episode.

Real parts: MuJoCo push-T (`sim.single_env.SimSingleEnv`), an exported ONNX generator served by onnxruntime through
`StepActor`, the crash-safe dataset writer, the policy store; the actor runs as its own process and is SIGKILLed.
"""

from __future__ import annotations

import dataclasses
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
    assert not (tmp_path / "ds").exists()  # the dataset opens with the first version (its noise column's size)


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


def test_an_exploring_version_records_the_chains_it_ran_and_the_learner_replays_them(tmp_path: Path) -> None:
    """RL-100's online stage end to end at the actor: the learner exports the policy as a chain sampler whose steps'
    noise is an ONNX input, onnxruntime serves it through StepActor, the recorder keeps each chunk's noise in
    ``policy.noise`` at the step it began, and the learner's torch replay of those chains gives back the actions the
    robot was asked for. The deterministic export of the same inputs is the policy's DDIM sampler; a version that
    draws more noise than the dataset's column holds is skipped, and the robot goes on with the last good one."""
    import torch

    from deploy.artifact import STEP_NOISE_NAME, read_metadata
    from deploy.onnx_export import export_verified_generator
    from deploy.rl.actor import ActorOptions, run_actor
    from deploy.runner import OnnxGenerator, PolicyInputError
    from policies.generative.normalizer import MinMaxNormalizer
    from policies.generative.policy import GenerativePolicy, PolicyConfig, PolicyOptions
    from policies.rl.chain import ChainConfig
    from policies.rl.online_chains import ChainReplayError, recorded_chains
    from policies.rl.transitions import chunk_transitions
    from real.record import NOISE_COLUMN

    torch.manual_seed(0)
    spec = chunked(SimSingleEnv("panda-push-t").spec, 2, 4, 2)
    n, a = spec.policy_obs.size, spec.action.size
    obs_box = torch.tensor([[-1.0] * n, [1.0] * n])
    action_box = torch.tensor([list(spec.action.lower), list(spec.action.upper)])
    cfg = PolicyConfig("diffusion", n, a, 2, horizon=4, options=PolicyOptions(down_dims=(16, 32)))
    policy = GenerativePolicy(cfg, MinMaxNormalizer.fit(obs_box), MinMaxNormalizer.fit(action_box)).eval()
    extra = {"spec": spec.to_dict()}
    checkpoint = policy.save(tmp_path / "policy.pt", extra)
    chain = ChainConfig(sampling_steps=3, sigma_min=0.1)
    obs = np.random.default_rng(0).uniform(-1, 1, (8, 2, n)).astype(np.float32)
    paths = {kind: tmp_path / f"{kind}.onnx" for kind in ("ddim", "deterministic", "exploring")}
    for kind, path in paths.items():
        args = {} if kind == "ddim" else {"chain": chain, "explore": kind == "exploring"}
        report = export_verified_generator(policy, spec, extra, checkpoint, path, obs, {}, 3, **args)
        assert report["max_abs_error"] < 1e-4 and report["sampling_steps"] == 3
    inputs = read_metadata(paths["exploring"])["interface"]["inputs"]
    assert inputs[STEP_NOISE_NAME]["shape"] == ["batch", 3, 4, 2] and all(inputs[STEP_NOISE_NAME]["sigmas"])
    assert not any(read_metadata(paths["deterministic"])["interface"]["inputs"][STEP_NOISE_NAME]["sigmas"])
    ddim, deterministic, exploring = (OnnxGenerator(p) for p in paths.values())
    rng = np.random.default_rng(1)
    noise, z = rng.standard_normal((8, 4, 2), dtype=np.float32), rng.standard_normal((8, 3, 4, 2), dtype=np.float32)
    same = ddim.sample(obs, noise)
    np.testing.assert_allclose(deterministic.sample(obs, noise, step_noise=z), same, atol=1e-5)
    np.testing.assert_allclose(deterministic.sample(obs, noise, step_noise=-z), same, atol=1e-5)
    assert np.abs(exploring.sample(obs, noise, step_noise=z) - same).max() > 1e-2  # its steps add their noise
    assert ddim.noise_size == 8 and exploring.noise_size == 32
    with pytest.raises(PolicyInputError, match=r"step_noise has shape \(8, 2, 4, 2\), expected \(batch, K, H, A\)"):
        exploring.sample(obs, noise, step_noise=z[:, :2])
    z[3, 1, 2, 0] = np.nan
    with pytest.raises(PolicyInputError, match=r"not finite \(batch 3, denoising step 1, chunk step 2, action 0\)"):
        exploring.sample(obs, noise, step_noise=z)
    with pytest.raises(PolicyInputError, match="takes no step noise"):
        ddim.sample(obs, noise, step_noise=z)

    store, dataset = PolicyStore(tmp_path / "policies"), tmp_path / "ds"
    store.publish(paths["exploring"], round=0, parity_error=0.0, tolerance=1e-5)
    env = SimSingleEnv("panda-push-t", episode_steps=9)
    run_actor(env, dataset, store, ActorOptions(2, seed=SEED, poll_s=0.01))
    ds = load_dataset(dataset)
    rows = ds.episode(0)[NOISE_COLUMN]
    assert rows.shape == (9, 32) and all(rows[t].any() == (t % 2 == 0) for t in range(9))  # a chunk every Ta = 2
    transitions = chunk_transitions(ds, spec, 0.99)
    replayed = recorded_chains(policy, spec, ds, transitions, chain)
    assert len(replayed.window) == len(transitions) and replayed.replay_error < 1e-3  # onnxruntime vs torch
    other = dataclasses.replace(chain, sigma_min=0.05, sigma_max=0.05)
    with pytest.raises(ChainReplayError, match="was not this checkpoint's exploring chain sampler"):
        recorded_chains(policy, spec, ds, transitions, other)

    small, store = tmp_path / "small", PolicyStore(tmp_path / "small-policies")
    store.publish(paths["ddim"], round=0, parity_error=0.0, tolerance=1e-5)
    run_actor(env, small, store, ActorOptions(1, seed=SEED, poll_s=0.01))
    store.publish(paths["exploring"], round=1, parity_error=0.0, tolerance=1e-5)
    summary = run_actor(env, small, store, ActorOptions(2, seed=SEED, poll_s=0.01))
    assert summary.versions == {1: 1} and "policy.noise column holds 8" in summary.skipped[2]
    with pytest.raises(ChainReplayError, match=r"episode 0 records 8 values of 'policy.noise'"):
        recorded_chains(policy, spec, load_dataset(small), chunk_transitions(load_dataset(small), spec, 0.99), chain)
