"""OnnxPolicy: the exported model driven the way a robot drives it, from named physical terms."""

from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.runner import ModelKindError, OnnxGenerator, OnnxPolicy, PolicyInputError, load_model
from policies.actor import load_policy
from reflexlab.spec import Spec, SpecMismatchError
from sim.backends.mujoco_cpu import MujocoVecEnv
from sim.registry import get_task

ENTRY = get_task("quadruped-walk")


def test_robot_side_assembly_reproduces_the_simulated_policy(exported, trained_run: Path) -> None:
    """Terms named as in the Spec, in physical units, give the same actions as the trained torch policy."""
    path, _ = exported
    runner = OnnxPolicy(path, robot_spec=ENTRY.spec())
    torch_policy = load_policy(trained_run)
    env = MujocoVecEnv(ENTRY, ENTRY.config("fast"), num_envs=4, nthread=1, seed=5)
    obs = env.get_observations()
    for _ in range(20):
        action = torch_policy.act(obs)
        obs, *_ = env.step(action)
        s, task = env._read_state(), env.task
        phase = 2 * np.pi * task.phase.numpy()
        for i in range(4):
            terms = {
                "base_ang_vel": s.base_ang_vel[i].numpy(),
                "projected_gravity": s.projected_gravity[i].numpy(),
                "velocity_command": task.commands[i].numpy(),
                "gait_phase": np.array([np.sin(phase[i]), np.cos(phase[i])]),
                "joint_pos": s.joint_pos[i].numpy() - np.asarray(runner.spec.action.offset),
                "joint_vel": s.joint_vel[i].numpy(),
                "last_action": action[i].numpy(),
            }
            got = runner.act(runner.assemble(terms))
            want = torch_policy.act(obs[i : i + 1])[0].numpy()
            np.testing.assert_allclose(got, want, atol=1e-4)
    targets = runner.joint_targets(np.zeros(12))
    np.testing.assert_allclose(targets, runner.spec.action.offset)


def test_model_for_another_robot_is_refused(exported) -> None:
    path, _ = exported
    d = ENTRY.spec().to_dict()
    d["action"]["names"][0] = "left_wheel"
    with pytest.raises(SpecMismatchError, match=r"action\.names"):
        OnnxPolicy(path, robot_spec=Spec.from_dict(d))


def test_bad_observations_are_named(exported) -> None:
    path, _ = exported
    runner = OnnxPolicy(path)
    with pytest.raises(PolicyInputError, match=r"shape \(10,\), expected \(47,\)"):
        runner.act(np.zeros(10))
    obs = np.zeros(runner.obs_size, np.float32)
    obs[runner.spec.policy_obs.slices()["joint_vel"].start + 2] = np.inf
    with pytest.raises(PolicyInputError, match="'joint_vel' is not finite"):
        runner.act(obs)
    with pytest.raises(PolicyInputError, match="missing: gait_phase"):
        runner.assemble({t.name: np.zeros(t.size) for t in runner.spec.policy_obs.terms if t.name != "gait_phase"})
    with pytest.raises(PolicyInputError, match="'joint_pos' has 11 values"):
        runner.assemble(
            {t.name: np.zeros(11 if t.name == "joint_pos" else t.size) for t in runner.spec.policy_obs.terms}
        )
    assert runner.act(np.zeros((5, runner.obs_size))).shape == (5, 12)


def test_missing_or_corrupt_model_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.onnx"):
        OnnxPolicy(tmp_path / "nope.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x01garbage")
    with pytest.raises(ValueError, match=r"junk\.onnx"):
        OnnxPolicy(junk)


def test_generator_samples_chunks_from_history_and_noise(generator) -> None:
    path, module, spec = generator
    gen = OnnxGenerator(path, robot_spec=spec, seed=3)
    rng = np.random.default_rng(0)
    hist = rng.normal(size=(2, gen.obs_size)).astype(np.float32)
    noise = rng.standard_normal((8, 12), dtype=np.float32)
    chunk = gen.sample(hist, noise)
    with torch.no_grad():
        want = module(torch.from_numpy(hist[None]), torch.from_numpy(noise[None]))[0].numpy()
    np.testing.assert_allclose(chunk, want, atol=1e-5)
    assert not np.allclose(gen.sample(hist, -noise), chunk)  # the noise matters...
    assert not np.allclose(gen.sample(hist[::-1].copy(), noise), chunk)  # ...and so does the history's order
    # without noise it is drawn from a seeded generator: reproducible, and fresh per call
    a, b = gen.sample(hist), gen.sample(hist)
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(OnnxGenerator(path, seed=3).sample(hist), a)
    np.testing.assert_array_equal(
        gen.sample(hist, rng=np.random.default_rng(9)), gen.sample(hist, rng=np.random.default_rng(9))
    )
    assert gen.sample(np.zeros((5, 2, gen.obs_size))).shape == (5, 8, 12)
    np.testing.assert_array_equal(gen.joint_targets(np.zeros(12)), spec.action.offset)


def test_generator_rejects_bad_noise_and_histories_with_a_message(generator) -> None:
    gen = OnnxGenerator(generator.path)
    hist = np.zeros((2, gen.obs_size), np.float32)
    with pytest.raises(PolicyInputError, match=r"noise has shape \(8, 11\), expected \(batch, H, A\) = \(1, 8, 12\)"):
        gen.sample(hist, np.zeros((8, 11), np.float32))
    with pytest.raises(
        PolicyInputError, match=r"noise has shape \(2, 8, 12\), expected \(batch, H, A\) = \(3, 8, 12\)"
    ):
        gen.sample(np.zeros((3, 2, gen.obs_size)), np.zeros((2, 8, 12)))
    with pytest.raises(PolicyInputError, match="noise has dtype int64"):
        gen.sample(hist, np.zeros((8, 12), np.int64))
    bad = np.zeros((1, 8, 12))
    bad[0, 5, 7] = np.nan
    with pytest.raises(PolicyInputError, match=r"noise is not finite \(batch 0, chunk step 5, action 7\)"):
        gen.sample(hist, bad)
    with pytest.raises(PolicyInputError, match=r"history has shape \(47,\), expected \(To, n\) = \(2, 47\)"):
        gen.sample(np.zeros(gen.obs_size))
    hist[0, gen.spec.policy_obs.slices()["joint_vel"].start + 2] = np.inf
    with pytest.raises(PolicyInputError, match=r"'joint_vel' is not finite \(index 25, batch 0, history step 0\)"):
        gen.sample(hist)
    assert gen.sample(np.zeros((2, gen.obs_size)), np.zeros((1, 8, 12))).shape == (8, 12)


def test_each_loader_refuses_the_other_kind_and_load_model_picks_the_right_one(generator, exported) -> None:
    with pytest.raises(ModelKindError, match=r"generator\.onnx is a generator .*load it with OnnxGenerator or"):
        OnnxPolicy(generator.path)
    with pytest.raises(
        ModelKindError, match=r"is a plain policy .*load it with OnnxPolicy or deploy\.runner\.load_model"
    ):
        OnnxGenerator(exported[0])
    assert isinstance(load_model(generator.path), OnnxGenerator)
    assert isinstance(load_model(exported[0], robot_spec=ENTRY.spec()), OnnxPolicy)
    # a chunk model's horizons are not the robot's business (Spec.task_interface), its control rate is: 100 vs 50 Hz
    with pytest.raises(SpecMismatchError, match="control_rate_hz"):
        load_model(generator.path, robot_spec=ENTRY.spec())
