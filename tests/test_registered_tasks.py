"""Every registered task runs the whole spine: reset, step, learn, evaluate, export to a verified ONNX file.

Parametrised over `sim.registry.task_names()`, so a task is checked by registering it. The budgets are
the smallest that run each stage for real (PPO for a ``vec`` task; scripted demonstrations and a
flow-matching policy for a ``demo`` task): this proves the wiring, not learning.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.artifact import spec_of
from reflexlab.spec import Spec
from sim.registry import get_task, task_names
from sim.task_entry import TaskEntry


@pytest.mark.parametrize("name", task_names())
def test_registered_task_resets_steps_evaluates_and_exports(name: str, tmp_path: Path) -> None:
    entry = get_task(name)
    onnx_spec = (_vec_task if entry.kind == "vec" else _demo_task)(entry, tmp_path)
    entry.spec().check_compatible(onnx_spec, context=f"{name}'s exported model")  # raises naming the field


def _vec_task(entry: TaskEntry, tmp_path: Path) -> Spec:
    from policies.evaluate import EvalOptions, evaluate_run
    from reflexlab.cli.export import export_checkpoint
    from reflexlab.cli.train import train
    from sim.backends.mujoco_cpu import MujocoVecEnv

    spec = entry.spec()
    env = MujocoVecEnv(entry, num_envs=2, nthread=1, seed=0, obs_noise=False)
    obs = env.get_observations()
    assert obs["policy"].shape == (2, spec.policy_obs.size)
    for _ in range(5):
        obs, rewards, _, _ = env.step(torch.zeros(2, spec.action.size))
        assert torch.isfinite(obs["policy"]).all() and torch.isfinite(rewards).all()
    run = tmp_path / "run"
    train(task=entry.name, run_dir=run, num_envs=8, iterations=1, save_interval=1, threads=1)
    result = evaluate_run(run, EvalOptions(2, 0.5, report=tmp_path / "eval.json"), progress=False)
    assert result["episodes"] == 2
    out = tmp_path / "policy.onnx"
    assert export_checkpoint(run, out, num_obs=64, task=entry.name)["max_abs_error"] <= 1e-5
    return spec_of(out)


def _demo_task(entry: TaskEntry, tmp_path: Path) -> Spec:
    from policies.imitation import evaluate_generative_run, train_bc_run
    from reflexlab.cli.export import export_generative_checkpoint
    from sim.demos import record_demos

    spec = entry.spec()
    env = entry.task_class(num_envs=2)
    obs = env.reset([0, 1])
    assert obs.shape == (2, spec.policy_obs.size)
    middle = (np.asarray(spec.action.lower) + np.asarray(spec.action.upper)) / 2  # a valid action for any task
    for _ in range(3):
        obs, rewards, _, _ = env.step(np.tile(middle, (2, 1)))
        assert np.isfinite(obs).all() and np.isfinite(rewards).all()
    demos = tmp_path / "demos"
    record_demos(entry.name, episodes=2, out=demos, num_envs=2, progress=False)
    run = train_bc_run("flow", demos, tmp_path / "flow", steps=2, time_budget_s=None, seed=0, progress=False)
    result = evaluate_generative_run(run, episodes=2, episode_steps=4, progress=False)
    assert result["episodes"] == 2
    out = tmp_path / "policy.onnx"
    export_generative_checkpoint(run, out, steps=2, num_obs=16, dataset=demos)
    chunked = spec_of(out)
    assert (chunked.action_chunk, chunked.observation_horizon) == (16, 2)  # train_bc_run's horizons
    return chunked.task_interface()  # the task's interface, one step at a time
