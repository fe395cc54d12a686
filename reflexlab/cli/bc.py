"""`reflexlab bc`: train a generative teacher (diffusion, flow or MeanFlow) on demonstrations.

The network width and learning rate default to the library's own (`PolicyOptions`, `TrainConfig`),
read from those dataclasses so that each default lives in one place; importing them loads torch,
which only this verb (and the full command listing) pays for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from policies.generative.methods import FROM_DATA
from policies.generative.policy import PolicyOptions
from policies.generative.train import TrainConfig
from reflexlab.cli.common import require


def bc(
    dataset: Path = Path("runs/panda-push-t/demos"),
    policy: Literal[FROM_DATA] = "diffusion",  # type: ignore[valid-type]
    run_dir: Path = Path("runs/panda-push-t/diffusion"),
    steps: int = 20_000,
    time_budget_s: float | None = None,
    seed: int = 0,
    obs_horizon: int = 2,
    horizon: int = 16,
    execution_horizon: int = 8,
    down_dims: tuple[int, ...] = PolicyOptions.down_dims,
    lr: float = TrainConfig.lr,
    image_keys: tuple[str, ...] = (),
    image_size: tuple[int, int] | None = None,
    task: str | None = None,
) -> None:
    """Train a generative teacher (1-D U-Net over action chunks, EMA) on demonstrations.

    Args:
        dataset: episode dataset (reflexlab demos).
        policy: diffusion (DDPM/DDIM), flow (flow matching, Euler) or meanflow (one-step from data, DMPO-style).
        run_dir: checkpoints and TensorBoard logs.
        steps: optimiser steps (the cosine schedule spans them).
        time_budget_s: stop earlier after this many seconds.
        seed: torch seed.
        obs_horizon: observations the policy reads (To).
        horizon: actions per chunk (H).
        execution_horizon: actions executed per chunk (Ta).
        down_dims: U-Net channel widths per level (each level halves the chunk; H must divide by 2^(levels-1)).
        lr: AdamW peak learning rate (linear warm-up, cosine decay over ``steps``).
        image_keys: cameras the policy reads beside the state (the dataset's video features
            observation.images.KEY, e.g. side); none = state only.
        image_size: HEIGHT WIDTH the camera frames are resized to (default: as recorded).
        task: the task the demonstrations were recorded on, for a dataset that records no reflexlab
            Spec (one written by LeRobot's own tools); e.g. panda-push-t.
    """
    from policies.imitation import train_bc_run

    require(dataset, "a dataset (reflexlab demos)")
    ckpt = train_bc_run(
        policy,
        dataset,
        run_dir,
        steps,
        time_budget_s,
        seed,
        obs_horizon,
        horizon,
        execution_horizon,
        down_dims=down_dims,
        lr=lr,
        image_keys=image_keys,
        image_size=image_size,
        task=task,
    )
    print(f"checkpoint: {ckpt}\ntensorboard --logdir {run_dir}")
