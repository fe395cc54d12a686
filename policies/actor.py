"""Rebuild a trained actor from a checkpoint without an environment or a runner.

Evaluation, export and (later) serving all need the actor alone; rebuilding it from the Spec
(observation sizes) and the stored PPO config keeps them from constructing a simulator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from rsl_rl.models import MLPModel
from tensordict import TensorDict

from policies.checkpoint import load_checkpoint, resolve_checkpoint
from policies.ppo import PPOConfig
from reflexlab.config import update_dataclass
from reflexlab.spec import Spec


class LoadedPolicy:
    """A checkpoint's actor with its Spec and run info."""

    def __init__(self, path: Path, state: dict[str, Any]) -> None:
        self.path = path
        self.info: dict[str, Any] = state["infos"]
        self.spec = Spec.from_dict(self.info["spec"])
        self.ppo = update_dataclass(PPOConfig(), self.info["ppo"])
        runner_cfg = self.ppo.runner_cfg()
        actor_cfg = {k: v for k, v in runner_cfg["actor"].items() if k != "class_name"}
        dummy = TensorDict({g.name: torch.zeros(1, g.size) for g in self.spec.observation_groups}, batch_size=[1])
        self.actor = MLPModel(dummy, runner_cfg["obs_groups"], "actor", self.spec.action.size, **actor_cfg)
        self.actor.load_state_dict(state["actor_state_dict"])
        self.actor.eval()
        self.iteration = int(state["iter"])

    @torch.no_grad()
    def act(self, obs: TensorDict) -> torch.Tensor:
        """Deterministic action (the distribution's mean) for scaled observation groups."""
        return self.actor(obs)


def load_policy(run_or_ckpt: Path, expect_spec: Spec | None = None) -> LoadedPolicy:
    path = resolve_checkpoint(run_or_ckpt)
    return LoadedPolicy(path, load_checkpoint(path, expect_spec=expect_spec))
