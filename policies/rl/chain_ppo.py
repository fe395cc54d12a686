"""PPO through the denoising chain of a diffusion policy (RL-100's offline and online policy update).

The chain, its σ and its log-probabilities are `policies.rl.chain`.

PPO: one clipped ratio per denoising step and chain, each step's log-probability summed over the chunk (the exact
Gaussian ratio, not DPPO's per-dimension mean), the chain's one advantage (the caller's A = min Q(s, a₀) − V(s))
shared by its K steps and normalised per batch. The policy runs in eval mode throughout: the only train/eval
difference in `GenerativePolicy` is the cameras' random crop, which would give the old and new log-probabilities
different conditions.

Checkpoints: start from ``GenerativePolicy.load(ckpt)`` (the EMA weights, i.e. the policy that was deployed and
evaluated); PPO updates those weights in place, without an EMA (the trust region is relative to the policy that
sampled the chains, which an averaged copy is not). Save with ``policy.save(path, {**stored_extra, ...})``, passing
the loaded checkpoint's ``extra`` on (its ``spec`` is read by fine-tuning, distillation and deployment); with no
``ema`` the file stores the updated weights as both what `load` returns with and without ``use_ema``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from policies.generative.policy import GenerativePolicy
from policies.generative.sampler import flush_denormals
from policies.rl.chain import Chain, ChainConfig, chain_log_prob, sample_chain

AdvantageFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class PpoConfig:
    """PPO-clip over the chain. Defaults: RL-100's offline stage (ε 0.25; online uses 0.2, lr 3e-6).

    ``bc_weight`` > 0 adds ``bc_weight`` × the policy's own diffusion loss on a minibatch of ``Demos`` to every PPO
    minibatch. The ratio clip bounds each update relative to the sampling policy only; over many offline rounds the
    policy can still drift to chunks where the IQL critics, fit in-sample, are wrong. The BC term anchors it to the
    data at the cost of bias towards the demonstrations' (possibly worse) behaviour; RL-100's own anchor is the OPE
    gate, so it is off by default. At weight 1 it did not hold the panda-push-t policy above (0.72 → 0.0 alone over
    50 episodes after the candidate OPE accepted at 150 iterations, on 60 episodes and the demonstrations).

    ``target_kl``: stop an iteration's epochs before the update that would follow a minibatch whose approximate
    KL to the sampling policy exceeds 1.5 × ``target_kl`` (Stable-Baselines3's early stop). A chain step's
    log-probability sums 16 × A Gaussian dimensions at σ ≤ 0.1, so it is sensitive: on panda-push-t
    (200-demonstration SFT, 0.97 success with the scripted person) 150 unlimited iterations (approximate KL
    0.07–0.12, averaged over each iteration's 4 updates) raised AM-Q by 29 %, OPE accepted three candidates, and the
    deployed policy collapsed to 0.2 with the person taking 86 % of the steps. At 0.01 one Adam step at lr 1e-5
    already passed the limit (50–54 updates per 50 iterations). The limit bounds each iteration, not where the
    iterations lead: the same round's ~200 updates moved weights by up to 1.8e-3 (the 2e-3 that 200 steps of lr 1e-5
    allow: one consistent direction), the executed actions by 13 mm on average, and the policy fell from 0.72 to 0.0
    alone (50 episodes) while AM-Q said +18 %. None: no limit.
    """

    clip: float = 0.25
    lr: float = 3e-6
    epochs: int = 4
    minibatch_size: int = 256
    max_grad_norm: float = 1.0
    normalize_advantage: bool = True
    bc_weight: float = 0.0
    target_kl: float | None = None

    def __post_init__(self) -> None:
        ok = 0 < self.clip < 1 and self.lr > 0 and self.epochs >= 1 and self.minibatch_size >= 1
        ok = ok and (self.target_kl is None or self.target_kl > 0)
        if not (ok and self.max_grad_norm > 0 and self.bc_weight >= 0):
            raise ValueError(f"PPO config out of range: {self}")


@dataclass(frozen=True)
class Demos:
    """Demonstration windows for the optional BC term: raw obs (N, To, n), raw chunks (N, H, A), camera frames."""

    obs: torch.Tensor
    actions: torch.Tensor
    images: torch.Tensor | None = None


@dataclass(frozen=True)
class PpoStats:
    """One `chain_ppo_update`, averaged over its minibatch steps unless named otherwise."""

    mean_advantage: float  # of the raw advantages, before normalisation
    advantage_std: float  # likewise
    loss: float  # the PPO surrogate loss (+ BC term)
    bc_loss: float | None  # the BC term's unweighted diffusion loss; None without one
    clip_fraction: float  # share of (chain, step) ratios outside [1 − ε, 1 + ε]
    clip_fraction_per_step: tuple[float, ...]  # the same per trained denoising step (after the frozen ones)
    approx_kl: float  # mean of (r − 1) − log r, ≥ 0 (Schulman's estimator of KL(old ‖ new))
    ratio_min: float  # over every ratio seen
    ratio_max: float
    grad_norm: float  # before clipping to ``max_grad_norm``
    updates: int  # optimiser steps taken
    stopped_early: bool = False  # the target KL ended the epochs before all their minibatches


def make_optimizer(policy: GenerativePolicy, config: PpoConfig) -> torch.optim.Optimizer:
    """Adam over the policy's trainable parameters; pass it to successive updates to keep its moments."""
    return torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=config.lr)


def _advantages(advantage_fn: AdvantageFn, obs: torch.Tensor, actions: torch.Tensor) -> np.ndarray:
    raw = np.asarray(advantage_fn(obs.detach().cpu().numpy(), actions.detach().cpu().numpy()), dtype=np.float64)
    if raw.shape != (obs.shape[0],):
        raise ValueError(f"advantage_fn returned shape {raw.shape}, expected ({obs.shape[0]},)")
    if not np.isfinite(raw).all():
        raise FloatingPointError("advantage_fn returned non-finite advantages: the critics diverged")
    return raw


def _check_parameters(policy: GenerativePolicy) -> None:
    for name, p in policy.named_parameters():
        if not torch.isfinite(p).all():
            raise FloatingPointError(f"chain PPO left non-finite values in parameter {name}")


def chain_ppo_update(
    policy: GenerativePolicy,
    obs: torch.Tensor,
    images: torch.Tensor | None,
    advantage_fn: AdvantageFn,
    config: PpoConfig | None = None,
    chain_config: ChainConfig | None = None,
    generator: torch.Generator | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    demos: Demos | None = None,
) -> PpoStats:
    """One PPO iteration on raw observation windows (B, To, n): sample chains, score them, ``epochs`` of minibatches.

    ``advantage_fn(windows (B, To, n), chunks (B, H, A)) → (B,)`` scores the sampled raw chunks (the caller knows
    which chunk steps are executed). ``generator`` drives the chains' noise, the minibatch order and the demo draws.
    ``optimizer``: from `make_optimizer`, to keep Adam's moments across iterations; a fresh one otherwise. Updates
    ``policy`` in place and leaves it in the mode it was in. Raises FloatingPointError naming what became
    non-finite (advantages, loss, gradient or a parameter).
    """
    config, chain_config = config or PpoConfig(), chain_config or ChainConfig()
    return _in_eval_mode(
        policy, config, demos,
        lambda: _update(policy, obs, images, advantage_fn, config, chain_config, generator, optimizer, demos),
    )  # fmt: skip


def _in_eval_mode(
    policy: GenerativePolicy, config: PpoConfig, demos: Demos | None, update: Callable[[], PpoStats]
) -> PpoStats:
    """Run ``update`` with the policy in eval mode (the module docstring says why) and denormals flushed, then give
    the policy its mode back; a BC term without demonstrations is refused first."""
    if config.bc_weight > 0 and demos is None:
        raise ValueError("bc_weight > 0 needs demos")
    was_training = policy.training
    policy.eval()
    try:
        with flush_denormals():
            return update()
    finally:
        policy.train(was_training)


def _update(
    policy: GenerativePolicy,
    obs: torch.Tensor,
    images: torch.Tensor | None,
    advantage_fn: AdvantageFn,
    config: PpoConfig,
    chain_config: ChainConfig,
    generator: torch.Generator | None,
    optimizer: torch.optim.Optimizer | None,
    demos: Demos | None,
) -> PpoStats:
    chain = sample_chain(policy, obs, images, chain_config, generator)
    raw = _advantages(advantage_fn, obs, chain.actions)
    return _epochs(policy, obs, images, chain, raw, config, chain_config, generator, optimizer, demos)


def stored_chain_ppo_update(
    policy: GenerativePolicy,
    obs: torch.Tensor,
    chain: Chain,
    advantages: np.ndarray,
    config: PpoConfig | None = None,
    chain_config: ChainConfig | None = None,
    generator: torch.Generator | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    demos: Demos | None = None,
    first_free: bool = True,
) -> PpoStats:
    """PPO on chains an actor ran (`replay_chain`) with their advantages from the episodes' returns: RL-100's online
    stage. ``epochs`` passes over all of them in minibatches; the ratios are against the chains' recorded
    log-probabilities (the behaviour policy's) throughout, and the target KL ends the passes at the first minibatch
    whose KL to it exceeds 1.5 × ``target_kl`` (``first_free``: except the call's first, as `chain_ppo_update`
    does; a caller that splits the passes over several calls frees only its first call's). Otherwise as
    `chain_ppo_update`.
    """
    config, chain_config = config or PpoConfig(), chain_config or ChainConfig()
    raw = np.asarray(advantages, dtype=np.float64)
    if raw.shape != (obs.shape[0],) or chain.log_probs.shape[0] != obs.shape[0]:
        raise ValueError(f"{obs.shape[0]} windows, {chain.log_probs.shape[0]} chains and {raw.shape} advantages")
    if not np.isfinite(raw).all():
        raise FloatingPointError("non-finite advantages: the value critic diverged")
    return _in_eval_mode(
        policy, config, demos,
        lambda: _epochs(policy, obs, None, chain, raw, config, chain_config, generator, optimizer, demos, first_free),
    )  # fmt: skip


def _epochs(
    policy: GenerativePolicy,
    obs: torch.Tensor,
    images: torch.Tensor | None,
    chain: Chain,
    raw: np.ndarray,
    config: PpoConfig,
    chain_config: ChainConfig,
    generator: torch.Generator | None,
    optimizer: torch.optim.Optimizer | None,
    demos: Demos | None,
    first_free: bool = True,
) -> PpoStats:
    """``config.epochs`` passes of clipped-ratio minibatch updates over ``chain`` with raw advantages ``raw``; the
    target KL stops them before any update but (``first_free``) the first."""
    adv = torch.as_tensor(raw, dtype=chain.log_probs.dtype, device=chain.log_probs.device)
    if config.normalize_advantage:
        adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
    opt = optimizer or make_optimizer(policy, config)
    params = [p for group in opt.param_groups for p in group["params"]]
    n, k = chain.log_probs.shape
    f = chain_config.frozen_steps
    totals = {"loss": 0.0, "bc": 0.0, "kl": 0.0, "grad": 0.0}
    clipped, ratio_min, ratio_max, updates, measured, seen = torch.zeros(k - f), math.inf, -math.inf, 0, 0, 0
    stopped = False
    for _ in range(config.epochs):
        for idx in torch.randperm(n, generator=generator).to(adv.device).split(config.minibatch_size):
            sub_images = None if images is None else images[idx]
            new = chain_log_prob(policy, obs[idx], sub_images, chain.take(idx), chain_config)
            log_ratio = (new - chain.log_probs[idx])[:, f:]
            ratio = log_ratio.exp()
            with torch.no_grad():
                kl = ((ratio - 1) - log_ratio).mean().item()
                clipped += ((ratio - 1).abs() > config.clip).float().sum(dim=0).cpu()
                ratio_min, ratio_max = min(ratio_min, ratio.min().item()), max(ratio_max, ratio.max().item())
            totals["kl"] += kl
            measured, seen = measured + 1, seen + len(idx)
            if config.target_kl is not None and (updates > 0 or not first_free) and kl > 1.5 * config.target_kl:
                stopped = True
                break
            a = adv[idx, None]
            loss = -torch.min(ratio * a, ratio.clamp(1 - config.clip, 1 + config.clip) * a).mean()
            if demos is not None and config.bc_weight > 0:
                pick = torch.randint(demos.obs.shape[0], (config.minibatch_size,), generator=generator)
                demo_images = None if demos.images is None else demos.images[pick]
                bc, _ = policy.loss(demos.obs[pick], demos.actions[pick], images=demo_images)
                loss = loss + config.bc_weight * bc
                totals["bc"] += bc.item()
            if not torch.isfinite(loss):
                raise FloatingPointError(
                    f"non-finite chain PPO loss ({loss.item()}) at update {updates + 1}; the parameters are as the "
                    f"previous update left them (ratios in [{ratio.min().item():.3g}, {ratio.max().item():.3g}])"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            if not torch.isfinite(grad_norm):
                raise FloatingPointError(f"non-finite chain PPO gradient norm at update {updates + 1}")
            opt.step()
            totals["loss"] += loss.item()
            totals["grad"] += grad_norm.item()
            updates += 1
        if stopped:
            break
    _check_parameters(policy)
    per_step = clipped / seen
    return PpoStats(
        mean_advantage=float(raw.mean()),
        advantage_std=float(raw.std()),
        loss=totals["loss"] / max(updates, 1),
        bc_loss=totals["bc"] / max(updates, 1) if demos is not None and config.bc_weight > 0 else None,
        clip_fraction=float(per_step.mean()),
        clip_fraction_per_step=tuple(per_step.tolist()),
        approx_kl=totals["kl"] / measured,
        ratio_min=ratio_min,
        ratio_max=ratio_max,
        grad_norm=totals["grad"] / max(updates, 1),
        updates=updates,
        stopped_early=stopped,
    )
