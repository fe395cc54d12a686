"""Chunk-level IQL critics (Kostrikov et al. 2021) as RL-100 uses them: twin Q(s, a_chunk) and V(s).

IQL never queries Q at actions outside the data: V is fit by expectile regression onto the target twins' minimum at
the *dataset's* chunks, so with expectile τ > 0.5 it approaches the value of the better chunks the data shows from
each state (τ → 1: the best), and Q regresses onto r + γ^len (1 − done) V(s'). That is why it suits RL-100's offline
rounds, whose data mixes demonstrations, interventions and several policy versions: any behaviour is usable. The
PPO step over the denoising chain then reads ``A = min Q(s, a) − V(s)`` (`advantage`).

Everything is at the chunk level (`policies.rl.transitions`): the action is the executed chunk (flattened), the
reward Σγʲr over it and the bootstrap γ^len. Inputs are made comparable before the LayerNorm MLPs (stable on small,
shifting real-robot datasets, as RLPD found): states are standardised by the data's mean and std, actions mapped
from the data's per-dimension min/max to [−1, 1] (joint targets and gripper commands differ in scale by orders of
magnitude). The normalisers are set by the first `fit` and kept afterwards, so a later `fit` continues training the
same function instead of silently shifting its inputs.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from policies.rl.transitions import ChunkTransitions


@dataclass(frozen=True)
class IqlConfig:
    """Expectile τ, the γ of the transitions, network size and the fit's budget (minibatch Adam steps)."""

    expectile: float = 0.8
    gamma: float = 0.99
    hidden: int = 256
    layers: int = 2
    lr: float = 3e-4
    steps: int = 3000
    batch_size: int = 256
    target_polyak: float = 0.005
    seed: int = 0

    def __post_init__(self) -> None:
        if not (0.5 <= self.expectile < 1.0 and 0.0 < self.gamma <= 1.0 and 0.0 < self.target_polyak <= 1.0):
            raise ValueError(
                f"IQL config out of range (expectile in [0.5, 1), gamma in (0, 1], polyak in (0, 1]): {self}"
            )


def _mlp(width: int, config: IqlConfig) -> nn.Sequential:
    """Linear → LayerNorm → ReLU blocks and a scalar head."""
    layers: list[nn.Module] = []
    for _ in range(config.layers):
        layers += [nn.Linear(width, config.hidden), nn.LayerNorm(config.hidden), nn.ReLU()]
        width = config.hidden
    return nn.Sequential(*layers, nn.Linear(width, 1))


def scale_actions(actions: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """Actions to [-1, 1] by the data's per-dimension range, for the critics' and the dynamics' inputs.

    A dimension the data never varied (a policy's constant command, e.g. a fixed height) tells a critic nothing and
    would turn any other value into ±10⁶ after dividing by its zero range: it is fed as 0. Other dimensions are
    clamped to twice the data's range: a policy's sampled chunk outside what was ever executed gets a bounded
    input, so the critics extrapolate from the data's edge instead of from a value no layer was fit on.
    """
    span = high - low
    varied = span > 1e-6
    scaled = 2.0 * (actions - low) / torch.where(varied, span, torch.ones_like(span)) - 1.0
    return torch.where(varied, scaled.clamp(-2.0, 2.0), torch.zeros_like(scaled))


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Mean of |τ − 1(diff < 0)| · diff²: an asymmetric square that pushes the fit toward the upper expectile."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.square()).mean()


class IqlCritics(nn.Module):
    """Twin Q(s, a_chunk) with Polyak target copies, and V(s); raw-unit inputs, normalised inside."""

    def __init__(self, state_dim: int, chunk: int, action_dim: int, config: IqlConfig = IqlConfig()) -> None:
        super().__init__()
        self.state_dim, self.chunk, self.action_dim, self.config = state_dim, chunk, action_dim, config
        self.q1 = _mlp(state_dim + chunk * action_dim, config)
        self.q2 = _mlp(state_dim + chunk * action_dim, config)
        self.value = _mlp(state_dim, config)
        self.target_q1, self.target_q2 = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        for p in [*self.target_q1.parameters(), *self.target_q2.parameters()]:
            p.requires_grad_(False)
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        self.register_buffer("action_low", -torch.ones(action_dim))
        self.register_buffer("action_high", torch.ones(action_dim))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    # inputs -------------------------------------------------------------------------------------------------------
    def _state(self, state: torch.Tensor) -> torch.Tensor:
        return (state - self.state_mean) / self.state_std

    def _state_action(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        scaled = scale_actions(actions, self.action_low, self.action_high)
        return torch.cat([self._state(state), scaled.flatten(1)], dim=1)

    def _tensor(self, x: np.ndarray | torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32, device=self.state_mean.device)

    # torch API (batches on the critics' device; gradients flow if the caller wants them) -------------------------
    def q_torch(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """min(Q1, Q2) of states (B, state_dim) and executed chunks (B, chunk, A): (B,)."""
        x = self._state_action(state, actions)
        return torch.minimum(self.q1(x), self.q2(x)).squeeze(-1)

    def v_torch(self, state: torch.Tensor) -> torch.Tensor:
        """V of states (B, state_dim): (B,)."""
        return self.value(self._state(state)).squeeze(-1)

    def advantage_torch(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """min Q − V: how much better the chunk is than what the data typically does from the state (B,)."""
        return self.q_torch(state, actions) - self.v_torch(state)

    # numpy API ----------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def q(self, state: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """min(Q1, Q2) as float64 (N,)."""
        return self.q_torch(self._tensor(state), self._tensor(actions)).double().cpu().numpy()

    @torch.no_grad()
    def v(self, state: np.ndarray) -> np.ndarray:
        """V as float64 (N,)."""
        return self.v_torch(self._tensor(state)).double().cpu().numpy()

    @torch.no_grad()
    def advantage(self, state: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """min Q − V as float64 (N,)."""
        return self.advantage_torch(self._tensor(state), self._tensor(actions)).double().cpu().numpy()

    # fitting ------------------------------------------------------------------------------------------------------
    def fit(self, transitions: ChunkTransitions) -> dict[str, float]:
        """Train on ``transitions`` for ``config.steps`` minibatch steps; returns the final full-data losses.

        Keys: ``value`` (expectile loss of V against the target twins' min), ``q`` (mean squared TD error of the
        twins). Raises ValueError for transitions of other shapes or another γ (the values would be in other units)
        and FloatingPointError naming the critic whose loss went non-finite.
        """
        self._check(transitions)
        cfg = self.config
        s, a = self._tensor(transitions.state), self._tensor(transitions.actions)
        s_next = self._tensor(transitions.next_state)
        r = self._tensor(transitions.reward)
        bootstrap = self._tensor(transitions.discount * (1.0 - transitions.done.astype(np.float64)))
        if not bool(self.fitted):
            self.state_mean.copy_(s.mean(0))
            self.state_std.copy_(s.std(0, unbiased=False).clamp_min(1e-6))
            flat = a.reshape(-1, self.action_dim)
            self.action_low.copy_(flat.min(0).values)
            self.action_high.copy_(flat.max(0).values)
            self.fitted.fill_(True)
        q_optimiser = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=cfg.lr)
        v_optimiser = torch.optim.Adam(self.value.parameters(), lr=cfg.lr)
        generator = torch.Generator().manual_seed(cfg.seed)
        batch = min(cfg.batch_size, len(transitions))
        for step in range(cfg.steps):
            idx = torch.randint(len(transitions), (batch,), generator=generator).to(s.device)
            value_loss, q_loss = self._losses(s[idx], a[idx], r[idx], s_next[idx], bootstrap[idx])
            _check_finite(value_loss, "the IQL value critic V", step)
            _check_finite(q_loss, "the IQL twin Q critics", step)
            v_optimiser.zero_grad()
            value_loss.backward()
            v_optimiser.step()
            q_optimiser.zero_grad()
            q_loss.backward()
            q_optimiser.step()
            self._update_targets()
        with torch.no_grad():
            value_loss, q_loss = self._losses(s, a, r, s_next, bootstrap)
        _check_finite(value_loss, "the IQL value critic V", cfg.steps)
        _check_finite(q_loss, "the IQL twin Q critics", cfg.steps)
        return {"value": float(value_loss), "q": float(q_loss) / 2.0}

    def _losses(
        self, s: torch.Tensor, a: torch.Tensor, r: torch.Tensor, s_next: torch.Tensor, bootstrap: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(V's expectile loss, the twins' summed TD losses) on one batch; targets carry no gradient."""
        x = self._state_action(s, a)
        with torch.no_grad():
            target_q = torch.minimum(self.target_q1(x), self.target_q2(x)).squeeze(-1)
            target = r + bootstrap * self.v_torch(s_next)
        value_loss = expectile_loss(target_q - self.v_torch(s), self.config.expectile)
        q_loss = nn.functional.mse_loss(self.q1(x).squeeze(-1), target) + nn.functional.mse_loss(
            self.q2(x).squeeze(-1), target
        )
        return value_loss, q_loss

    @torch.no_grad()
    def _update_targets(self) -> None:
        tau = self.config.target_polyak
        for net, target in ((self.q1, self.target_q1), (self.q2, self.target_q2)):
            for p, p_target in zip(net.parameters(), target.parameters(), strict=True):
                p_target.lerp_(p, tau)

    def _check(self, transitions: ChunkTransitions) -> None:
        if len(transitions) == 0:
            raise ValueError("no transitions to fit the IQL critics on")
        got = (transitions.obs_dim, transitions.chunk, transitions.action_dim)
        if got != (self.state_dim, self.chunk, self.action_dim):
            raise ValueError(
                f"transitions have (state, chunk, action) sizes {got}, "
                f"the critics {(self.state_dim, self.chunk, self.action_dim)}"
            )
        if not np.isclose(transitions.gamma, self.config.gamma):
            raise ValueError(
                f"transitions were built with gamma {transitions.gamma}, the critics' config says {self.config.gamma}"
            )

    # checkpoints --------------------------------------------------------------------------------------------------
    def to_checkpoint(self) -> dict[str, Any]:
        """Sizes, config and ``state_dict`` (normalisers and target twins included): what `from_checkpoint` needs."""
        return {
            "sizes": {"state_dim": self.state_dim, "chunk": self.chunk, "action_dim": self.action_dim},
            "config": asdict(self.config),
            "state_dict": self.state_dict(),
        }

    @classmethod
    def from_checkpoint(cls, checkpoint: dict[str, Any]) -> IqlCritics:
        """Critics rebuilt from `to_checkpoint`'s dict (e.g. after ``torch.save``/``torch.load(weights_only=True)``)."""
        critics = cls(**checkpoint["sizes"], config=IqlConfig(**checkpoint["config"]))
        critics.load_state_dict(checkpoint["state_dict"])
        return critics


def _check_finite(loss: torch.Tensor, critic: str, step: int) -> None:
    if not bool(torch.isfinite(loss)):
        raise FloatingPointError(f"{critic} diverged: non-finite loss at step {step}")
