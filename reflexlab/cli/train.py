"""`reflexlab train`: PPO on a batched MuJoCo task, resumable; the quadruped demo's first step.

The checkpoint interval defaults to `PPOConfig`'s, read from there so that it lives in one place.
"""

from __future__ import annotations

import json
from pathlib import Path

from policies.ppo import PPOConfig
from reflexlab.cli.common import UserError


def train(
    task: str = "quadruped-walk",
    profile: str | None = None,
    num_envs: int = 256,
    iterations: int = 300,
    run_dir: Path = Path("runs/quadruped-walk"),
    resume: bool = False,
    seed: int = 0,
    threads: int = 2,
    time_budget_s: float | None = None,
    save_interval: int = PPOConfig.save_interval,
) -> None:
    """Train PPO (rsl-rl) on a batched MuJoCo task; checkpoints, TensorBoard logs and run.json go to RUN_DIR.

    Args:
        task: registered task name.
        profile: task profile (e.g. fast, full); the task's default when omitted, or the run's own on --resume.
        num_envs: parallel simulated robots.
        iterations: total PPO iterations (a resumed run continues to this number).
        run_dir: output folder.
        resume: continue from the latest checkpoint in RUN_DIR (e.g. after the run was killed).
        seed: seed for torch, commands, resets and randomisation.
        threads: physics threads.
        time_budget_s: stop at the first iteration boundary after this many seconds.
        save_interval: write a checkpoint every this many iterations (and always at the end).
    """
    import torch

    from policies.ppo import runner_info
    from policies.ppo import train as run_train
    from reflexlab.config import update_dataclass
    from sim.backends.mujoco_cpu import MujocoVecEnv
    from sim.registry import get_task

    entry = get_task(task)
    ppo = PPOConfig()
    if resume and (run_dir / "run.json").exists():
        info = json.loads((run_dir / "run.json").read_text())
        if info["task"] != task:
            raise UserError(f"--resume: {run_dir} holds a run of task {info['task']!r}, not {task!r}")
        profile = profile or info["profile"]
        cfg = update_dataclass(entry.config(profile), info["task_cfg"])
        ppo = update_dataclass(ppo, info["ppo"])
    else:
        ppo = update_dataclass(ppo, {"save_interval": save_interval})
        profile = profile or entry.default_profile
        cfg = entry.config(profile)
    torch.manual_seed(seed)
    env = MujocoVecEnv(entry, cfg, num_envs=num_envs, nthread=threads, seed=seed)
    info = runner_info(task, profile, cfg, ppo, env.spec.to_json(), num_envs, seed)
    ckpt = run_train(env, ppo, run_dir, iterations, info, resume=resume, time_budget_s=time_budget_s)
    from policies.report import plot_training_curves

    plot = plot_training_curves(run_dir)
    print(f"checkpoint: {ckpt}\ntraining curves: {plot}\ntensorboard --logdir {run_dir}")
