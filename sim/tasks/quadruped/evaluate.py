"""`quadruped-walk`'s own evaluator: seeded episodes, velocity tracking, falls, gait quality, video.

The task supplies it (`TaskEntry.evaluate`); `policies.evaluate` loads a policy and hands over its
``act``, so no learning code names the task. Every episode runs in its own simulated robot (in
parallel) from a seeded reset and is counted once: an env that falls is frozen out of the statistics
rather than auto-reset, so "no fall in 95% of 32 episodes" means exactly that.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from tqdm import tqdm

from reflexlab.spec import Spec
from sim.render import write_video
from sim.task_entry import TaskEntry

# Tracking error is averaged after this settling time (robots start from a drop at standstill).
TRACKING_WARMUP_S = 1.0
# The evaluation command of each profile when none is given: the bar each profile is judged on.
DEFAULT_COMMANDS = {"fast": (0.5, 0.0, 0.0)}
# Render every other control step: 25 fps video; software EGL rendering costs ~100 ms a frame.
VIDEO_EVERY = 2


def evaluate_task(
    entry: TaskEntry,
    act: Callable[[TensorDict], torch.Tensor],
    policy_spec: Spec,
    context: str,
    cfg: Any,
    profile: str,
    episodes: int,
    episode_s: float | None,
    seed: int,
    video: Path | None = None,
    progress: bool = True,
    command: tuple[float, float, float] | None = None,
    command_map: bool = False,
) -> dict[str, Any]:
    """The task's evaluation of a policy (`TaskEntry.evaluate`): ``episodes`` seeded episodes of
    ``episode_s`` (the profile's by default) at ``command`` (vx, vy, yaw rate; the profile's evaluation
    command, else uniform draws over its ranges), plus with ``command_map`` a grid over the ranges whose
    per-command errors are returned under ``command_map`` (the caller plots them)."""
    episode_s = episode_s or cfg.episode_s
    gen = torch.Generator().manual_seed(seed)
    if command is None:
        command = DEFAULT_COMMANDS.get(profile)
    if command is not None:
        commands = torch.tensor(command, dtype=torch.float32).expand(episodes, 3).clone()
    else:
        c = cfg.commands
        lo = torch.tensor([c.vx[0], c.vy[0], c.yaw_rate[0]])
        hi = torch.tensor([c.vx[1], c.vy[1], c.yaw_rate[1]])
        commands = lo + (hi - lo) * torch.rand(episodes, 3, generator=gen)
    result = evaluate_walk(entry, act, policy_spec, context, cfg, episodes, episode_s, commands, seed, video, progress)
    if command_map:
        grid = command_grid(cfg)
        cm = evaluate_walk(
            entry, act, policy_spec, context, cfg, len(grid), min(episode_s, 10.0), grid, seed + 1, None, progress
        )
        result["command_map"] = {
            k: cm["per_episode"][k] for k in ("command", "lin_vel_error", "yaw_rate_error", "fell")
        }
    return result


def evaluate_walk(
    entry: TaskEntry,
    act: Callable[[TensorDict], torch.Tensor],
    policy_spec: Spec,
    context: str,
    task_cfg: Any,
    episodes: int,
    episode_s: float,
    commands: torch.Tensor,
    seed: int,
    video: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Run ``episodes`` seeded episodes with fixed per-episode ``commands`` (episodes, 3).

    ``act`` maps observations to actions (a loaded policy's); a policy whose ``policy_spec`` differs
    from the env's is refused, naming the field and ``context`` (e.g. the checkpoint).
    """
    from sim.backends.mujoco_cpu import MujocoVecEnv

    env = MujocoVecEnv(
        entry, task_cfg, num_envs=episodes, nthread=min(2, os.cpu_count() or 1), seed=seed, record_metrics=True
    )
    env.spec.check_compatible(policy_spec, context=context)
    env.task.set_commands(commands)
    obs = env._observe(env._read_state())
    steps = round(episode_s / env.task.dt)
    warmup = round(TRACKING_WARMUP_S / env.task.dt)
    n, nf = episodes, len(env.c.FOOT_SITES)
    alive = torch.ones(n, dtype=torch.bool)
    fell_at = torch.full((n,), -1)
    lin_err = torch.zeros(n)
    yaw_err = torch.zeros(n)
    tracked = torch.zeros(n)
    touchdowns = torch.zeros(n)
    contact_steps = torch.zeros(n)
    slip_sum = torch.zeros(n)
    alive_steps = torch.zeros(n)
    start_xy = env._read_state().base_pos[:, :2].clone()
    end_xy = start_xy.clone()
    frames: list[np.ndarray] = []
    renderer = _renderer(env) if video else None

    for t in tqdm(range(steps), disable=not progress, desc="eval", unit="step", leave=False):
        actions = act(obs)
        obs, _, dones, extras = env.step(actions)
        # dones reset the env inside step(); the metrics of the finished episode were already read
        # by the task on the pre-reset state, so take termination from dones & ~time_outs.
        fell = dones.bool() & ~extras["time_outs"] & alive
        m = env.last_metrics
        a = alive.float()
        if t >= warmup:
            lin_err += m["lin_vel_error"] * a
            yaw_err += m["yaw_rate_error"] * a
            tracked += a
        touchdowns += m["touchdown"].sum(-1) * a
        contact_steps += m["contact"].sum(-1) * a
        slip_sum += (m["foot_speed_xy"] * m["contact"]).sum(-1) * a
        alive_steps += a
        end_xy[alive] = m["base_pos"][alive, :2]
        fell_at[fell] = t
        alive &= ~fell
        if renderer is not None and t % VIDEO_EVERY == 0:
            frames.append(env.render(renderer, 0))

    duration = alive_steps * env.task.dt
    per_ep = {
        "fell": (fell_at >= 0).tolist(),
        "lin_vel_error": (lin_err / tracked.clamp(min=1)).tolist(),
        "yaw_rate_error": (yaw_err / tracked.clamp(min=1)).tolist(),
        "distance_m": (end_xy - start_xy).norm(dim=-1).tolist(),
        "stepping_hz": (touchdowns / nf / duration.clamp(min=1e-6)).tolist(),
        "slip_m_s": (slip_sum / contact_steps.clamp(min=1)).tolist(),
        "command": commands.tolist(),
    }
    ok = ~torch.tensor(per_ep["fell"])
    result = {
        "episodes": n,
        "episode_s": episode_s,
        "no_fall_rate": ok.float().mean().item(),
        "lin_vel_error_m_s": _mean(per_ep["lin_vel_error"]),
        "yaw_rate_error_rad_s": _mean(per_ep["yaw_rate_error"]),
        "distance_m": _mean(per_ep["distance_m"]),
        "stepping_hz": _mean(per_ep["stepping_hz"]),
        "slip_m_s": _mean(per_ep["slip_m_s"]),
        "tracking_warmup_s": TRACKING_WARMUP_S,
        "per_episode": per_ep,
    }
    if video is not None and frames:
        write_video(video, frames, fps=round(1.0 / (env.task.dt * VIDEO_EVERY)))
        result["video"] = str(video)
    return result


def command_grid(cfg: Any, n: int = 5) -> torch.Tensor:
    """Commands on a grid over the profile's ranges: vx × vy at zero yaw, then vx × yaw at zero vy."""
    c = cfg.commands
    vx = torch.linspace(c.vx[0], c.vx[1], n)
    rows = []
    for other, idx in ((c.vy, 1), (c.yaw_rate, 2)):
        if other[0] == other[1]:
            continue
        for v in torch.linspace(other[0], other[1], n):
            for x in vx:
                cmd = [x.item(), 0.0, 0.0]
                cmd[idx] = v.item()
                if cmd not in rows:  # vy = 0 and yaw = 0 share one row of the grid
                    rows.append(cmd)
    if not rows:
        rows = [[x.item(), 0.0, 0.0] for x in vx]
    return torch.tensor(rows)


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _renderer(env: Any) -> Any:
    import mujoco

    return mujoco.Renderer(env.model, height=360, width=640)
