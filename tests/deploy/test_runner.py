"""OnnxPolicy: the exported model driven the way a robot drives it, from named physical terms."""

from pathlib import Path

import numpy as np
import pytest

from deploy.runner import OnnxPolicy, PolicyInputError
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
