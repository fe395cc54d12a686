"""AM-Q offline policy evaluation: should RL-100's PPO reference policy advance to the candidate?

RL-100 (after Uni-O4) scores a policy by rolling it out in a learned dynamics ensemble from recorded start windows
and averaging the IQL critics' min-Q along the way (AM-Q); every ~50 PPO updates the candidate replaces the reference
only if its estimate improves by at least 5 %. Ours works in the policy's observation-window space (RL-100's latent
dynamics sit behind an image encoder; our critics read states, so the state window is the latent).

**The ensemble** (`DynamicsEnsemble`, default 7 members, 5 elites): each member is a LayerNorm MLP mapping the
standardised, flattened window and the [−1, 1]-normalised chunk to the standardised residual of the next window, the
chunk's reward and a done logit. All members train at once as one batched network (one matmul per layer for all of
them), each on its own minibatch order from its own initialisation; the elites are the members with the lowest loss
on held-out *episodes* (adjacent chunks of one episode are nearly copies of each other: a split by transition would
measure memorisation). The heads are **deterministic** (mean predictions, squared error): the estimate ranks two
policies under common random numbers, and sampling aleatoric noise would only add variance to that comparison,
while Gaussian variance heads are poorly calibrated on a few hundred real episodes. Uncertainty that matters for
trusting the estimate is epistemic and shows as the elites' disagreement, which is reported.

**The estimate** (`am_q`): from each start window, ``horizon`` chunk steps; at each, the policy picks a chunk, the
critics score min-Q(s, a) and one elite drawn at random per rollout and step predicts the next window. A rollout's
value is the mean of its min-Q over steps weighted by γ^t (γ = 1: RL-100's plain mean) and by the probability it is
still running: after each step that weight is multiplied by 1 − p(done), since past a success or failure the
rollout is outside any data and its Q meaningless. AM-Q is the mean over rollouts (each start counts once); its
standard error is over rollouts.

**Common random numbers**: a comparison is only meaningful between estimates made with the same start windows,
critics, elites, horizon, γ and seed (the elite draws depend only on the seed and the sizes, never on the policy).
Each estimate carries a fingerprint of that setup and `compare` refuses estimates whose fingerprints differ. A
stochastic policy (a diffusion sampler) should also draw its noise from a generator seeded the same for both.

**The trust region** (`action_shift`; RL-100's rounds keep PPO inside it, `policies.rl.rl100`): AM-Q is only as
good as the critics and the model where the candidate acts, and both are fit on the deployed policy's data. On
panda-push-t (an SFT scoring 0.80 alone, 30 episodes with the scripted person) PPO's candidates after 25 / 50 / 125
iterations scored 0.46 / 0.25 / 0.05 alone while AM-Q rated them −0.1 % / +0.5 % / +8.5 % (and accepted two in
between); their executed actions had moved 0.080 / 0.095 / 0.142 of the data's action std (8 / 9.5 / 14 mm) from
the deployed policy's at the same windows and noise. 5,000 more imitation steps move them 0.022. A candidate that
moved further than the round's bound would be judged where nothing was measured, so it is never evaluated.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from policies.rl.iql import IqlCritics, scale_actions
from policies.rl.transitions import ChunkTransitions


@dataclass(frozen=True)
class DynamicsConfig:
    """Ensemble size, elites, member size and the fit's budget; ``holdout``: fraction of episodes held out."""

    members: int = 7
    elites: int = 5
    hidden: int = 200
    layers: int = 3
    lr: float = 1e-3
    weight_decay: float = 1e-5
    steps: int = 3000
    batch_size: int = 256
    holdout: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        if not (1 <= self.elites <= self.members and 0.0 < self.holdout < 1.0 and self.layers >= 1):
            raise ValueError(f"dynamics config out of range: {self}")


class Prediction(NamedTuple):
    """The elites' predictions, leading dim = elite: next window (E, B, To, n), reward (E, B), p(done) (E, B)."""

    next_window: torch.Tensor
    reward: torch.Tensor
    done: torch.Tensor


class _EnsembleMlp(nn.Module):
    """``members`` independent Linear → LayerNorm → SiLU MLPs evaluated as one batched network on (E, B, d)."""

    def __init__(self, members: int, d_in: int, d_out: int, hidden: int, layers: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        widths = [d_in] + [hidden] * layers + [d_out]

        def uniform(*shape: int, fan_in: int) -> nn.Parameter:  # nn.Linear's default initialisation
            bound = 1.0 / math.sqrt(fan_in)
            return nn.Parameter((torch.rand(*shape, generator=generator) * 2 - 1) * bound)

        self.weights = nn.ParameterList(uniform(members, i, o, fan_in=i) for i, o in itertools.pairwise(widths))
        self.biases = nn.ParameterList(uniform(members, 1, o, fan_in=i) for i, o in itertools.pairwise(widths))
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(members, 1, hidden)) for _ in range(layers))
        self.shifts = nn.ParameterList(nn.Parameter(torch.zeros(members, 1, hidden)) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(b, x, w)
            if k < len(self.scales):
                x = nn.functional.layer_norm(x, x.shape[-1:]) * self.scales[k] + self.shifts[k]
                x = nn.functional.silu(x)
        return x


class DynamicsEnsemble(nn.Module):
    """Next window, chunk reward and termination of (window, executed chunk), learned from chunk transitions."""

    def __init__(
        self, obs_horizon: int, obs_dim: int, chunk: int, action_dim: int, config: DynamicsConfig = DynamicsConfig()
    ) -> None:
        super().__init__()
        self.obs_horizon, self.obs_dim, self.chunk, self.action_dim = obs_horizon, obs_dim, chunk, action_dim
        self.config = config
        self.window_size = obs_horizon * obs_dim
        d_in = self.window_size + chunk * action_dim
        self.net = _EnsembleMlp(config.members, d_in, self.window_size + 2, config.hidden, config.layers, config.seed)
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))
        self.register_buffer("action_low", -torch.ones(action_dim))
        self.register_buffer("action_high", torch.ones(action_dim))
        self.register_buffer("delta_mean", torch.zeros(self.window_size))
        self.register_buffer("delta_std", torch.ones(self.window_size))
        self.register_buffer("reward_mean", torch.zeros(()))
        self.register_buffer("reward_std", torch.ones(()))
        self.register_buffer("elites", torch.arange(config.elites))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def _inputs(self, window: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        scaled = scale_actions(actions, self.action_low, self.action_high)
        return torch.cat([((window - self.obs_mean) / self.obs_std).flatten(1), scaled.flatten(1)], dim=1)

    def _losses(self, out: torch.Tensor, delta: torch.Tensor, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """Per-member loss (E,) on (E, B, ·) outputs and standardised targets: next-window MSE on non-terminal rows
        (a terminal row has no recorded next window), reward MSE, done cross-entropy. Targets of shape (N, ·) are
        shared by every member."""
        done = done.expand_as(out[..., -1])
        alive = 1.0 - done
        window_error = ((out[..., : self.window_size] - delta).square().mean(-1) * alive).sum(-1)
        window_loss = window_error / alive.sum(-1).clamp_min(1.0)
        reward_loss = (out[..., -2] - reward).square().mean(-1)
        done_loss = nn.functional.binary_cross_entropy_with_logits(out[..., -1], done, reduction="none").mean(-1)
        return window_loss + reward_loss + done_loss

    def fit(self, transitions: ChunkTransitions) -> dict[str, float | list[float] | list[int]]:
        """Fit every member, hold out ``config.holdout`` of the episodes and keep the best ``elites`` members.

        The normalisers are set by the first fit and kept, as the critics' are (`policies.rl.iql`), so a later fit
        continues training the same members; the elites are chosen anew on each fit's held-out episodes.

        Returns ``train`` (members' mean final training loss), ``holdout`` (each member's held-out loss),
        ``holdout_window_mse`` (the elites' mean next-window squared error on held-out non-terminal transitions,
        relative to the residual's variance: 1 = no better than predicting the mean change) and ``elites``.
        Raises ValueError for fewer than two episodes or mismatched sizes, FloatingPointError if the fit diverges.
        """
        cfg = self.config
        got = (transitions.obs_horizon, transitions.obs_dim, transitions.chunk, transitions.action_dim)
        sizes = (self.obs_horizon, self.obs_dim, self.chunk, self.action_dim)
        if got != sizes:
            raise ValueError(f"transitions have (To, obs, chunk, action) sizes {got}, the ensemble {sizes}")
        episodes = np.unique(transitions.episode)
        if len(episodes) < 2:
            raise ValueError("the dynamics ensemble needs transitions of at least two episodes (one is held out)")
        rng = np.random.default_rng(cfg.seed)
        size = min(len(episodes) - 1, max(1, round(cfg.holdout * len(episodes))))
        held = rng.choice(episodes, size=size, replace=False)
        is_held = np.isin(transitions.episode, held)
        train, test = transitions.subset(~is_held), transitions.subset(is_held)
        if not bool(self.fitted):
            self._set_normalisers(train)
        x, delta, reward, done = self._targets(train)
        optimiser = torch.optim.AdamW(self.net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        generator = torch.Generator().manual_seed(cfg.seed)
        batch = min(cfg.batch_size, len(train))
        for step in range(cfg.steps):
            idx = torch.randint(len(train), (cfg.members, batch), generator=generator).to(x.device)
            losses = self._losses(self.net(x[idx]), delta[idx], reward[idx], done[idx])
            if not bool(torch.isfinite(losses).all()):
                raise FloatingPointError(f"the dynamics ensemble diverged: non-finite loss at step {step}")
            optimiser.zero_grad()
            losses.sum().backward()
            optimiser.step()
        with torch.no_grad():
            train_loss = self._losses(self._expand(x), delta, reward, done)
            tx, tdelta, treward, tdone = self._targets(test)
            out = self._expand(tx)
            held_loss = self._losses(out, tdelta, treward, tdone)
            if not bool(torch.isfinite(held_loss).all() and torch.isfinite(train_loss).all()):
                raise FloatingPointError("the dynamics ensemble diverged: non-finite held-out loss")
            self.elites.copy_(torch.argsort(held_loss)[: cfg.elites].sort().values)
            alive = tdone == 0
            window_mse = (out[self.elites][:, alive, : self.window_size] - tdelta[alive]).square().mean()
        return {
            "train": float(train_loss.mean()),
            "holdout": held_loss.tolist(),
            "holdout_window_mse": float(window_mse) if bool(alive.any()) else float("nan"),
            "elites": self.elites.tolist(),
        }

    def _expand(self, x: torch.Tensor) -> torch.Tensor:
        """Every member on the same rows: (E, N, ·)."""
        return self.net(x.expand(self.config.members, *x.shape))

    def _set_normalisers(self, train: ChunkTransitions) -> None:
        """Input and target scales from the training split (residuals of non-terminal rows: the others have none)."""
        device = self.obs_mean.device
        obs = torch.as_tensor(train.window.reshape(-1, self.obs_dim), device=device)
        self.obs_mean.copy_(obs.mean(0))
        self.obs_std.copy_(obs.std(0, unbiased=False).clamp_min(1e-6))
        flat = torch.as_tensor(train.actions.reshape(-1, self.action_dim), device=device)
        self.action_low.copy_(flat.min(0).values)
        self.action_high.copy_(flat.max(0).values)
        live = ~train.done
        raw = (train.next_window - train.window).reshape(len(train), -1)[live if live.any() else slice(None)]
        delta = torch.as_tensor(raw, dtype=torch.float32, device=device)
        self.delta_mean.copy_(delta.mean(0))
        self.delta_std.copy_(delta.std(0, unbiased=False).clamp_min(1e-6))
        reward = torch.as_tensor(train.reward, dtype=torch.float32, device=device)
        self.reward_mean.copy_(reward.mean())
        self.reward_std.copy_(reward.std(unbiased=False).clamp_min(1e-6))
        self.fitted.fill_(True)

    def _targets(self, t: ChunkTransitions) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Inputs and standardised targets (residual, reward) and done as float, on the ensemble's device."""
        device = self.obs_mean.device

        def tensor(a: np.ndarray) -> torch.Tensor:
            return torch.as_tensor(a, dtype=torch.float32, device=device)

        window = tensor(t.window)
        delta = (tensor(t.next_window).flatten(1) - window.flatten(1) - self.delta_mean) / self.delta_std
        reward = (tensor(t.reward) - self.reward_mean) / self.reward_std
        return self._inputs(window, tensor(t.actions)), delta, reward, tensor(t.done.astype(np.float32))

    @torch.no_grad()
    def predict(self, window: torch.Tensor, actions: torch.Tensor) -> Prediction:
        """Every elite's prediction for windows (B, To, n) and executed chunks (B, chunk, A), raw units."""
        out = self._expand(self._inputs(window, actions))[self.elites]
        delta = out[..., : self.window_size] * self.delta_std + self.delta_mean
        next_window = window + delta.view(len(self.elites), *window.shape)
        reward = out[..., -2] * self.reward_std + self.reward_mean
        return Prediction(next_window, reward, torch.sigmoid(out[..., -1]))


@dataclass(frozen=True)
class OpeEstimate:
    """An AM-Q estimate and what it rests on.

    Attributes:
        value: AM-Q, the mean over rollouts of each rollout's weighted mean min-Q.
        stderr: the standard error of ``value`` over rollouts.
        per_rollout: (B,) each rollout's value, in start-window order (paired differences for `compare`).
        disagreement: the elites' mean std of predicted next windows, in units of the data's observation std,
            averaged over dimensions and the rollouts' running steps: how far the rollouts left what the data covers.
        running: mean probability that a rollout is still running at a step (1: no rollout ended).
        horizon: chunk steps per rollout.
        setup: fingerprint of start windows, critics, elites, horizon, γ and seed; equal for comparable estimates.
    """

    value: float
    stderr: float
    per_rollout: np.ndarray
    disagreement: float
    running: float
    horizon: int
    setup: str


def am_q(
    act: Callable[[np.ndarray], np.ndarray],
    critics: IqlCritics,
    ensemble: DynamicsEnsemble,
    start_windows: np.ndarray,
    horizon: int,
    gamma: float = 1.0,
    seed: int = 0,
) -> OpeEstimate:
    """AM-Q of the policy ``act`` (windows (B, To, n) → executed chunks (B, chunk, A), raw units).

    ``start_windows`` (B, To, n): where rollouts begin, e.g. the windows of recorded episodes' first transitions
    (``t.window[t.step == 0]``). ``gamma`` weighs step t by γ^t in each rollout's mean (1: RL-100's plain mean).
    Raises ValueError for a policy answer of the wrong shape or with non-finite values.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    start = np.asarray(start_windows, dtype=np.float32)
    if start.ndim != 3 or start.shape[1:] != (ensemble.obs_horizon, ensemble.obs_dim) or len(start) == 0:
        raise ValueError(f"start_windows must be (B, {ensemble.obs_horizon}, {ensemble.obs_dim}), got {start.shape}")
    device = ensemble.obs_mean.device
    generator = torch.Generator().manual_seed(seed)
    count, n_elites = len(start), len(ensemble.elites)
    window = torch.as_tensor(start, device=device)
    running = torch.ones(count, dtype=torch.float64)
    weighted_q = torch.zeros(count, dtype=torch.float64)
    weights = torch.zeros(count, dtype=torch.float64)
    spread, spread_weight = 0.0, 0.0
    for t in range(horizon):
        actions = _policy_chunk(act, window, ensemble)
        with torch.no_grad():
            q = critics.q_torch(window[:, -1].to(critics.state_mean.device), actions.to(critics.state_mean.device))
        weight = gamma**t * running
        weighted_q += weight * q.double().cpu()
        weights += weight
        pick = torch.randint(n_elites, (count,), generator=generator).to(device)
        prediction = ensemble.predict(window, actions)
        std = (prediction.next_window.std(0, unbiased=False) / ensemble.obs_std).mean((1, 2)).double().cpu()
        spread += float((running * std).sum())
        spread_weight += float(running.sum())
        rows = torch.arange(count, device=device)
        window = prediction.next_window[pick, rows]
        running = running * (1.0 - prediction.done[pick, rows].double().cpu())
    per_rollout = (weighted_q / weights).numpy()
    steps_running = spread_weight / (count * horizon)
    return OpeEstimate(
        value=float(per_rollout.mean()),
        stderr=float(per_rollout.std(ddof=1) / math.sqrt(count)) if count > 1 else float("nan"),
        per_rollout=per_rollout,
        disagreement=spread / spread_weight if spread_weight > 0 else 0.0,
        running=steps_running,
        horizon=horizon,
        setup=_fingerprint(start, critics, ensemble, horizon, gamma, seed),
    )


def _policy_chunk(
    act: Callable[[np.ndarray], np.ndarray], window: torch.Tensor, ensemble: DynamicsEnsemble
) -> torch.Tensor:
    """The policy's chunks for ``window``, checked: the wrong shape or a NaN would silently poison the estimate."""
    actions = np.asarray(act(window.cpu().numpy()), dtype=np.float32)
    expected = (len(window), ensemble.chunk, ensemble.action_dim)
    if actions.shape != expected:
        raise ValueError(f"the policy returned chunks of shape {actions.shape}, AM-Q needs {expected}")
    if not np.isfinite(actions).all():
        raise ValueError("the policy returned non-finite actions")
    return torch.as_tensor(actions, device=window.device)


def _fingerprint(
    start: np.ndarray, critics: IqlCritics, ensemble: DynamicsEnsemble, horizon: int, gamma: float, seed: int
) -> str:
    """SHA-1 of everything but the policy that an estimate depends on."""
    digest = hashlib.sha1(start.tobytes())
    digest.update(f"{horizon}:{gamma!r}:{seed}:{ensemble.elites.tolist()}".encode())
    for module in (critics, ensemble):
        for name, tensor in module.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class ActionShift:
    """How far a candidate's executed chunks moved from the deployed policy's at the same windows and noise.

    Attributes:
        mean: mean over windows of each window's RMS difference (over the chunk's steps and action dimensions), in
            units of the data's per-dimension action std.
        p90: the 90th percentile of the per-window RMS differences, same units.
    """

    mean: float
    p90: float


def action_shift(candidate: np.ndarray, deployed: np.ndarray, scale: np.ndarray) -> ActionShift:
    """The `ActionShift` between two policies' executed chunks (B, chunk, A) at the same windows and noise.

    ``scale`` (A,): the data's action std per dimension (`ChunkTransitions.action_std`). Raises ValueError for chunks
    of different shapes, a non-positive scale or non-finite actions.
    """
    candidate, deployed = np.asarray(candidate, dtype=np.float64), np.asarray(deployed, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    if candidate.shape != deployed.shape or candidate.ndim != 3 or scale.shape != candidate.shape[-1:]:
        raise ValueError(f"chunks {candidate.shape} and {deployed.shape} with scale {scale.shape} do not match")
    if not (scale > 0).all():
        raise ValueError(f"the action scale must be positive, got {scale}")
    if not (np.isfinite(candidate).all() and np.isfinite(deployed).all()):
        raise ValueError("non-finite actions: no shift can be measured")
    per_window = np.sqrt((((candidate - deployed) / scale) ** 2).mean(axis=(1, 2)))
    return ActionShift(float(per_window.mean()), float(np.quantile(per_window, 0.9)))


class OpeVerdict(NamedTuple):
    """Whether the reference advances to the candidate, and why (for the round log)."""

    accepted: bool
    reason: str


def compare(candidate: OpeEstimate, reference: OpeEstimate, min_improvement: float = 0.05) -> OpeVerdict:
    """Accept the candidate only if its AM-Q exceeds the reference's by at least ``min_improvement`` · |reference|.

    The margin is relative to |reference|, so it means the same for negative values (−1.00 → accept from −0.95); a
    reference of exactly 0 needs any strict improvement. An equal or lower candidate is never accepted, nor a
    non-finite one. Raises ValueError for estimates of different setups (start windows, critics, elites, horizon,
    γ, seed): without common random numbers the difference would mostly be noise.
    """
    if min_improvement < 0:
        raise ValueError(f"min_improvement must be >= 0, got {min_improvement}")
    if candidate.setup != reference.setup:
        raise ValueError(
            "the estimates were made with different setups (start windows, critics, elites, horizon, gamma or seed): "
            "compare policies only under common random numbers"
        )
    c, r = candidate.value, reference.value
    if not (math.isfinite(c) and math.isfinite(r)):
        return OpeVerdict(False, f"non-finite estimate (candidate {c}, reference {r})")
    margin = min_improvement * abs(r)
    paired = candidate.per_rollout - reference.per_rollout
    noise = float(paired.std(ddof=1) / math.sqrt(len(paired))) if len(paired) > 1 else float("nan")
    detail = f"AM-Q {c:.4g} vs {r:.4g}: {c - r:+.4g} (paired stderr {noise:.2g}), needed > 0 and >= {margin:.4g}"
    if c > r and c - r >= margin:
        return OpeVerdict(True, f"candidate accepted: {detail}")
    return OpeVerdict(False, f"candidate rejected: {detail}")
