"""PPO training through rsl-rl's `OnPolicyRunner`, with what a long robot run needs around it.

rsl-rl owns the algorithm, the models and the TensorBoard writer. This module adds: a progress
bar instead of rsl-rl's per-iteration console block, atomic checkpoints (a run killed with
SIGKILL leaves its last checkpoint loadable and `--resume` continues from it), the task's Spec
stored in every checkpoint, and a NaN guard that stops with the env index and step while keeping
the last good checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from rsl_rl.runners import OnPolicyRunner
from tqdm import tqdm

from policies.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from reflexlab.errors import UserFacingError
from sim.backends.mujoco_cpu import NonFiniteError


@dataclass
class PPOConfig:
    """rsl-rl PPO settings (the runner's dict is generated from this)."""

    num_steps_per_env: int = 24
    save_interval: int = 25
    actor_hidden_dims: tuple[int, ...] = (256, 128, 64)
    critic_hidden_dims: tuple[int, ...] = (256, 128, 64)
    activation: str = "elu"
    init_std: float = 0.5
    learning_rate: float = 1e-3
    schedule: str = "adaptive"
    desired_kl: float = 0.01
    num_learning_epochs: int = 5
    num_mini_batches: int = 4
    entropy_coef: float = 0.01
    gamma: float = 0.99
    lam: float = 0.95
    clip_param: float = 0.2
    max_grad_norm: float = 1.0
    # Scaling is fixed by the Spec's per-term scales; rsl-rl's running normaliser is optional
    # (with the adaptive schedule it drove the learning rate to its floor in an earlier probe).
    obs_normalization: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def runner_cfg(self) -> dict[str, Any]:
        model = {
            "class_name": "MLPModel",
            "activation": self.activation,
            "obs_normalization": self.obs_normalization,
        }
        return {
            "num_steps_per_env": self.num_steps_per_env,
            "save_interval": self.save_interval,
            "obs_groups": {"actor": ["policy"], "critic": ["policy", "privileged"]},
            "actor": {
                **model,
                "hidden_dims": list(self.actor_hidden_dims),
                "distribution_cfg": {"class_name": "GaussianDistribution", "init_std": self.init_std},
            },
            "critic": {**model, "hidden_dims": list(self.critic_hidden_dims)},
            "algorithm": {
                "class_name": "PPO",
                "learning_rate": self.learning_rate,
                "schedule": self.schedule,
                "desired_kl": self.desired_kl,
                "num_learning_epochs": self.num_learning_epochs,
                "num_mini_batches": self.num_mini_batches,
                "entropy_coef": self.entropy_coef,
                "gamma": self.gamma,
                "lam": self.lam,
                "clip_param": self.clip_param,
                "max_grad_norm": self.max_grad_norm,
                "value_loss_coef": 1.0,
                "use_clipped_value_loss": True,
            },
            "check_for_nan": True,
            "logger": "tensorboard",
            **self.extra,
        }


class TrainingStopped(RuntimeError, UserFacingError):
    """Training could not continue; the message says why and which checkpoint is intact."""


def make_runner(env: Any, ppo: PPOConfig, log_dir: Path | None) -> OnPolicyRunner:
    """Build rsl-rl's runner quietly (it prints both model summaries on construction)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return OnPolicyRunner(env, copy.deepcopy(ppo.runner_cfg()), str(log_dir) if log_dir else None, "cpu")


def train(
    env: Any,
    ppo: PPOConfig,
    run_dir: Path,
    iterations: int,
    run_info: dict[str, Any],
    resume: bool = False,
    time_budget_s: float | None = None,
    progress: bool = True,
) -> Path:
    """Run PPO for ``iterations`` (in total, counting a resumed run's) and return the final checkpoint.

    ``run_info`` (task, profile, configs, Spec) is stored in each checkpoint so that play/export
    rebuild the same task and refuse a mismatched one. ``time_budget_s`` stops early at an
    iteration boundary, for fixed wall-clock learning budgets.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    runner = make_runner(env, ppo, run_dir)
    start_it = 0
    if resume:
        ckpt = latest_checkpoint(run_dir)
        if ckpt is None:
            raise TrainingStopped(f"--resume: no checkpoint in {run_dir}")
        loaded = load_checkpoint(ckpt, expect_spec=env.spec)
        runner.alg.load(loaded, None, True)
        start_it = int(loaded["iter"]) + 1
        tqdm.write(f"resuming from {ckpt.name} (iteration {start_it})")
    (run_dir / "run.json").write_text(json.dumps(run_info, indent=2, default=str))

    alg, logger, cfg = runner.alg, runner.logger, runner.cfg
    logger.init_logging_writer()
    alg.train_mode()
    obs = env.get_observations()
    last_ckpt = latest_checkpoint(run_dir)
    t0 = time.monotonic()
    # With a wall-clock budget the bar counts seconds (the iteration count is then only a cap).
    timed = time_budget_s is not None
    bar = tqdm(
        initial=0 if timed else start_it,
        total=round(time_budget_s) if timed else iterations,
        disable=not progress,
        unit="s" if timed else "it",
        dynamic_ncols=True,
        desc="PPO",
    )
    it = start_it - 1
    try:
        for it in range(start_it, iterations):
            tic = time.monotonic()
            with torch.inference_mode():
                for _ in range(cfg["num_steps_per_env"]):
                    actions = alg.act(obs)
                    obs, rewards, dones, extras = env.step(actions)
                    alg.process_env_step(obs, rewards, dones, extras)
                    logger.process_env_step(rewards, dones, extras, None)
                collect = time.monotonic() - tic
                alg.compute_returns(obs)
            tic2 = time.monotonic()
            losses = alg.update()
            learn = time.monotonic() - tic2
            if not all(math.isfinite(v) for v in losses.values()):
                raise NonFiniteError(f"PPO loss {losses}", [], env.common_step_counter)
            runner.current_learning_iteration = it
            with contextlib.redirect_stdout(io.StringIO()):
                logger.log(
                    it=it,
                    start_it=start_it,
                    total_it=iterations,
                    collect_time=collect,
                    learn_time=learn,
                    loss_dict=losses,
                    learning_rate=alg.learning_rate,
                    action_std=alg.get_policy().output_std,
                    rnd_weight=None,
                )
            rew = sum(logger.rewbuffer) / len(logger.rewbuffer) if logger.rewbuffer else float("nan")
            ep_len = sum(logger.lenbuffer) / len(logger.lenbuffer) if logger.lenbuffer else float("nan")
            fps = cfg["num_steps_per_env"] * env.num_envs / (collect + learn)
            bar.set_postfix(
                it=it,
                reward=f"{rew:.2f}",
                ep_len=f"{ep_len:.0f}",
                fps=f"{fps:.0f}",
                lr=f"{alg.learning_rate:.1e}",
                refresh=False,
            )
            bar.update(min(round(time.monotonic() - t0), bar.total) - bar.n if timed else 1)
            last = it + 1 == iterations
            out_of_time = time_budget_s is not None and time.monotonic() - t0 >= time_budget_s
            if last or out_of_time or it % cfg["save_interval"] == 0:
                last_ckpt = save_checkpoint(runner, run_dir, it, run_info)
            if out_of_time and not last:
                tqdm.write(f"time budget of {time_budget_s:.0f} s reached after iteration {it}")
                break
    except NonFiniteError as e:
        keep = f"last good checkpoint: {last_ckpt}" if last_ckpt else "no checkpoint was written yet"
        raise TrainingStopped(f"training stopped at iteration {it + 1}: {e}; {keep}") from e
    finally:
        bar.close()
        if logger.writer is not None:
            logger.writer.flush()
            logger.writer.close()
    assert last_ckpt is not None
    return last_ckpt


def runner_info(
    task: str, profile: str, task_cfg: Any, ppo: PPOConfig, spec_json: str, num_envs: int, seed: int
) -> dict:
    """What a checkpoint must carry to rebuild its task and policy."""
    return {
        "task": task,
        "profile": profile,
        "task_cfg": asdict(task_cfg),
        "ppo": asdict(ppo),
        "spec": json.loads(spec_json),
        "num_envs": num_envs,
        "seed": seed,
    }
