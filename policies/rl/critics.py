"""State-value critics fit to Monte-Carlo targets (`policies.rl.credit`): HABC's viability and efficiency heads.

Each head is an MLP with LayerNorm (stable on small, shifting real-robot datasets, as RLPD found) and a sigmoid
output, since both targets lie in [0, 1]; inputs are standardised by the training states' mean and std, kept with
the head so that later states are scaled the same way. Steps without a target (NaN: a person's steps, or
unsuccessful segments for the efficiency head) are left out of the fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class CriticConfig:
    """Width, depth and the fit's budget (minibatch Adam steps)."""

    hidden: int = 256
    layers: int = 2
    lr: float = 1e-3
    steps: int = 2000
    batch_size: int = 256
    seed: int = 0


class ValueCritic(nn.Module):
    """V(s) in [0, 1] for standardised states."""

    def __init__(self, obs_dim: int, config: CriticConfig = CriticConfig()) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = obs_dim
        for _ in range(config.layers):
            layers += [nn.Linear(width, config.hidden), nn.LayerNorm(config.hidden), nn.ReLU()]
            width = config.hidden
        self.net = nn.Sequential(*layers, nn.Linear(width, 1))
        self.register_buffer("mean", torch.zeros(obs_dim))
        self.register_buffer("std", torch.ones(obs_dim))
        self.config = config

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net((obs - self.mean) / self.std)).squeeze(-1)

    @torch.no_grad()
    def values(self, obs: np.ndarray) -> np.ndarray:
        """V of each row of ``obs`` (N, obs_dim), as float64."""
        self.eval()
        return self(torch.as_tensor(obs, dtype=torch.float32)).double().numpy()

    def fit(self, obs: np.ndarray, targets: np.ndarray) -> float:
        """Regress V onto ``targets`` where they are finite; returns the final mean squared error over them."""
        keep = np.isfinite(targets)
        if not keep.any():
            raise ValueError("no labelled steps to fit the critic on")
        x = torch.as_tensor(obs[keep], dtype=torch.float32)
        y = torch.as_tensor(targets[keep], dtype=torch.float32)
        self.mean.copy_(x.mean(0))
        self.std.copy_(x.std(0, unbiased=False).clamp_min(1e-6))
        generator = torch.Generator().manual_seed(self.config.seed)
        optimiser = torch.optim.Adam(self.parameters(), lr=self.config.lr)
        self.train()
        for _ in range(self.config.steps):
            idx = torch.randint(len(x), (min(self.config.batch_size, len(x)),), generator=generator)
            loss = nn.functional.mse_loss(self(x[idx]), y[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        with torch.no_grad():
            error = float(nn.functional.mse_loss(self(x), y))
        if not np.isfinite(error):
            raise FloatingPointError("the critic diverged (non-finite loss)")
        return error


def cross_fitted_values(
    obs: np.ndarray, targets: np.ndarray, episode: np.ndarray, folds: int, config: CriticConfig = CriticConfig()
) -> tuple[np.ndarray, float]:
    """V at every row of ``obs``, each episode's from a critic fit without that episode; and the mean fit error.

    Why: a critic fit on a few hundred steps memorises them (training error ~1e-6 on panda-peg-insert's first
    rounds), so an advantage ``target − V(s)`` measured on its own training rows is ~0 everywhere and every step
    weighs the same, failures included. Out-of-fold values (episodes dealt into ``folds`` groups by index) say what
    the critic expects of a state it has not seen the ending of, which is what an advantage needs. With fewer than
    two folds that hold labels, one critic fit on everything gives all values (nothing to hold out).
    """
    fold_of = np.unique(np.asarray(episode), return_inverse=True)[1] % folds
    if len(np.unique(fold_of[np.isfinite(targets)])) < 2:
        critic = ValueCritic(obs.shape[1], config)
        error = critic.fit(obs, targets)
        return critic.values(obs), error
    values = np.empty(len(obs))
    errors = []
    for k in range(folds):
        critic = ValueCritic(obs.shape[1], config)
        errors.append(critic.fit(obs, np.where(fold_of == k, np.nan, targets)))
        values[fold_of == k] = critic.values(obs[fold_of == k])
    return values, float(np.mean(errors))
