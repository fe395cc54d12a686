"""`reflexlab bench sim`: the physics limit of the MuJoCo CPU backend against the VecEnv with a policy.

Both are measured in the same process on the same model, robots and substeps, with 1 and 2
threads, so the ratio (what Python, torch and the task cost on top of physics) and the thread
scaling are not confounded by a noisy machine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reflexlab.bench import machine, print_table, write_json
from reflexlab.cli.bench.common import BenchOptions

if TYPE_CHECKING:
    import mujoco


@dataclass(frozen=True)
class SimBench(BenchOptions):
    """Physics limit vs VecEnv with the policy in the loop."""

    task: str = "quadruped-walk"
    """registered task name."""
    num_envs: int = 256
    """parallel robots."""
    steps: int = 200
    """control steps per measurement."""

    def run(self) -> dict[str, Any]:
        return bench_sim(self.task, self.num_envs, self.steps, self.quick, self.table, self.out_dir)


def physics_rate(model: mujoco.MjModel, num_envs: int, nthread: int, decimation: int, steps: int) -> float:
    """Env-steps/s of bare `Batch.step` (``decimation`` physics substeps each), holding the home pose."""
    import mujoco.batch

    batch = mujoco.batch.Batch(model, nsim=num_envs, nthread=nthread)
    batch.reset(keyframe=0)
    batch.step(nstep=decimation)
    t = time.perf_counter()
    for _ in range(steps):
        batch.step(nstep=decimation)
    return num_envs * steps / (time.perf_counter() - t)


def vecenv_rate(task: str, num_envs: int, nthread: int, steps: int) -> float:
    """Env-steps/s of the VecEnv with an (untrained, same-size) rsl-rl actor choosing actions."""
    import torch
    from rsl_rl.models import MLPModel

    from policies.ppo import PPOConfig
    from sim.backends.mujoco_cpu import MujocoVecEnv
    from sim.registry import get_task

    entry = get_task(task)
    env = MujocoVecEnv(entry, entry.config(), num_envs=num_envs, nthread=nthread, seed=0)
    cfg = PPOConfig().runner_cfg()
    actor_cfg = {k: v for k, v in cfg["actor"].items() if k != "class_name"}
    obs = env.get_observations()
    actor = MLPModel(obs, cfg["obs_groups"], "actor", env.num_actions, **actor_cfg).eval()
    with torch.inference_mode():
        obs, *_ = env.step(actor(obs))
        t = time.perf_counter()
        for _ in range(steps):
            obs, *_ = env.step(actor(obs))
        return num_envs * steps / (time.perf_counter() - t)


def bench_sim(
    task: str,
    num_envs: int = 256,
    steps: int = 200,
    quick: bool = False,
    table: bool = True,
    out_dir: Path = Path("runs/bench"),
) -> dict[str, Any]:
    """Both rates with 1 and 2 threads, and their ratio; see the module docstring."""
    import mujoco
    import numpy as np
    import torch

    from sim.registry import get_task

    if quick:
        num_envs, steps = min(num_envs, 64), min(steps, 20)
    entry = get_task(task)
    c = entry.task_class.constants
    model = mujoco.MjModel.from_xml_path(str(entry.scene_xml))
    torch.set_num_threads(1)  # the policy shares the cores with physics; keep torch off the second one
    metrics: dict[str, Any] = {}
    rows = []
    for nthread in (1, 2):
        phys = physics_rate(model, num_envs, nthread, c.DECIMATION, steps)
        vec = vecenv_rate(task, num_envs, nthread, steps)
        metrics[f"physics_env_steps_per_s_{nthread}t"] = round(phys, 1)
        metrics[f"physics_mj_steps_per_s_{nthread}t"] = round(phys * c.DECIMATION, 1)
        metrics[f"vecenv_env_steps_per_s_{nthread}t"] = round(vec, 1)
        metrics[f"ratio_env_to_physics_{nthread}t"] = round(vec / phys, 3)
        rows.append((str(nthread), f"{phys * c.DECIMATION:,.0f}", f"{phys:,.0f}", f"{vec:,.0f}", f"{vec / phys:.2f}"))
    metrics["thread_scaling_vecenv_2t_over_1t"] = round(
        metrics["vecenv_env_steps_per_s_2t"] / metrics["vecenv_env_steps_per_s_1t"], 3
    )
    metrics["thread_scaling_physics_2t_over_1t"] = round(
        metrics["physics_env_steps_per_s_2t"] / metrics["physics_env_steps_per_s_1t"], 3
    )
    metrics["machine"] = machine()
    metrics["config"] = {
        "task": task,
        "num_envs": num_envs,
        "steps": steps,
        "decimation": c.DECIMATION,
        "physics_dt": c.PHYSICS_DT,
        "quick": quick,
        "numpy": np.__version__,
        "mujoco": mujoco.__version__,
    }
    if table:
        print_table(
            f"bench sim — {task}, {num_envs} envs, {c.DECIMATION} substeps per env step",
            rows,
            ("threads", "mj_step/s", "physics env-steps/s", "VecEnv+policy env-steps/s", "ratio"),
        )
        print(f"thread scaling (VecEnv, 2 vs 1): {metrics['thread_scaling_vecenv_2t_over_1t']:.2f}x")
    write_json(metrics, out_dir, "bench_sim")
    return metrics
