"""PPO through the denoising chain of a diffusion policy (RL-100's offline and online policy update).

Each stochastic DDIM step of the sampler is a Gaussian policy step of a "denoising MDP" (DPPO, RL-100)::

    ε̂ = ε_θ(x_k, k, s)
    x̂₀ = clip((x_k − √(1−ᾱ_k) ε̂) / √ᾱ_k, −1, 1)                     (as `Diffusion.ddim_sample` clips it)
    σ_k = clip(η √((1−ᾱ_prev)/(1−ᾱ_k)) √(1 − ᾱ_k/ᾱ_prev), σ_min, σ_max)
    μ_θ = √ᾱ_prev x̂₀ + √max(1 − ᾱ_prev − σ_k², 0) ε̂
    x_prev ~ N(μ_θ, σ_k² I)

The *clipped* σ_k enters the mean as well as the noise: for any σ_k ≤ √(1−ᾱ_prev) this is a member of the DDIM
family, which keeps the marginals the network was trained on. Using η = 1's σ in the mean (the DDPM posterior mean)
but drawing with σ capped at 0.1 would shrink the first latent to ≈ 0.16 x̂₀ + 0.1 z where the network expects unit
variance. With K = 10 and the cosine schedule, η = 1 asks for σ ≥ 0.14 at every step but the last, so all of those
run at σ_max = 0.1; the last step (ᾱ_prev = 1, σ = 0) runs at σ_min = 0.0067 with mean x̂₀. As σ → 0 the chain is
exactly the deterministic DDIM sampler the policy deploys with.

The final latent x₀ is Gaussian and unclipped; the executed chunk is ``unnormalize(clip(x₀, −1, 1))``. The clip is a
fixed function of x₀, so the ratio of x₀'s densities is a valid importance weight for anything scored on the clipped
chunk (E_old[r · A(clip x₀)] = E_new[A(clip x₀)]): the chain's log-probabilities are those of the unclipped steps.

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

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from policies.generative.diffusion import Diffusion, EpsFn
from policies.generative.policy import GenerativePolicy
from policies.generative.sampler import flush_denormals

Coef = torch.Tensor | float
AdvantageFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class ChainConfig:
    """The stochastic sampler: K DDIM steps (trailing spacing), η and the clip on each step's σ (RL-100's values).

    ``frozen_steps``: the first steps from x_K are sampled (and recorded, replayed) but left out of PPO's ratios, as
    DPPO fine-tunes only its last denoising steps. Why: at the first step ᾱ_k ≈ 0, so x̂₀ divides the network's ε̂ by
    √ᾱ_k and the mean moves by tens of times what ε̂ does, against a σ clipped to 0.1. On panda-push-t one Adam step
    at lr 3e-6 (gradient clipped to 1) gave that step an approximate KL of 1.6 per chain against ≤ 3e-3 for every
    later one: its ratios swamp the objective and the KL limit stops PPO after one update.

    ``logprob_sigma_min``: the σ floor of the log-probabilities PPO's ratios compare (DPPO's
    ``min_logprob_denoising_std``), while the chain samples with σ clipped to [σ_min, σ_max]. A last step sampled at
    RL-100's σ_min 0.0067 keeps the policy as good as its deterministic sampler (push-T's SFT alone: 0.72 over 100
    episodes, against 0.04 with σ_min 0.1 at every step), but scored at 0.0067 its ratio swings over orders of
    magnitude with any update (on the 1-D reach no seed improved); scored at a 0.1 floor it is a smooth surrogate.
    0: the ratios use the sampling σ, the exact densities.
    """

    sampling_steps: int = 10
    eta: float = 1.0
    sigma_min: float = 0.0067
    sigma_max: float = 0.1
    frozen_steps: int = 0
    logprob_sigma_min: float = 0.0

    def __post_init__(self) -> None:
        if self.sampling_steps < 1 or self.eta < 0 or not 0 < self.sigma_min <= self.sigma_max:
            raise ValueError(f"chain config out of range (K ≥ 1, η ≥ 0, 0 < σ_min ≤ σ_max): {self}")
        if self.logprob_sigma_min < 0:
            raise ValueError(f"logprob_sigma_min must be ≥ 0: {self}")
        if not 0 <= self.frozen_steps < self.sampling_steps:
            raise ValueError(f"frozen_steps must leave PPO at least one of the K steps: {self}")


@dataclass(frozen=True)
class ChainStep:
    """One denoising step's constants: the network's time input and the coefficients of x̂₀, μ and σ."""

    k: int
    t: float
    sqrt_ab: float  # √ᾱ_k
    sqrt_one_minus_ab: float  # √(1 − ᾱ_k)
    sqrt_ab_prev: float  # √ᾱ_prev (1 at the last step)
    dir_coef: float  # √max(1 − ᾱ_prev − σ², 0)
    sigma: float
    sigma_logprob: float  # the σ PPO's log-probabilities use: max(σ, logprob_sigma_min)


def chain_steps(diffusion: Diffusion, config: ChainConfig) -> list[ChainStep]:
    """The K steps from x_K (pure noise: k = num_train_steps − 1) to x₀, σ clipped as the module docstring says."""
    ks = diffusion.ddim_timesteps(config.sampling_steps)
    ab = diffusion.alphas_cumprod.tolist()
    steps = []
    for i, k in enumerate(ks):
        ab_prev = ab[ks[i + 1]] if i + 1 < len(ks) else 1.0
        natural = config.eta * math.sqrt((1 - ab_prev) / (1 - ab[k]) * (1 - ab[k] / ab_prev))
        sigma = min(max(natural, config.sigma_min), config.sigma_max)
        steps.append(
            ChainStep(
                k=k,
                t=float(diffusion.time_input(k)),
                sqrt_ab=math.sqrt(ab[k]),
                sqrt_one_minus_ab=math.sqrt(1 - ab[k]),
                sqrt_ab_prev=math.sqrt(ab_prev),
                dir_coef=math.sqrt(max(1 - ab_prev - sigma**2, 0.0)),
                sigma=sigma,
                sigma_logprob=max(sigma, config.logprob_sigma_min),
            )
        )
    return steps


def _coefs(steps: list[ChainStep], field: str, like: torch.Tensor) -> torch.Tensor:
    """One coefficient of every step as a (1, K, 1, 1) tensor, to broadcast over a (B, K, H, A) batch of steps."""
    return torch.tensor([getattr(s, field) for s in steps], dtype=like.dtype, device=like.device).view(1, -1, 1, 1)


def _step_mean(
    x: torch.Tensor, eps: torch.Tensor, sqrt_ab: Coef, sqrt_one_minus_ab: Coef, sqrt_ab_prev: Coef, dir_coef: Coef
) -> torch.Tensor:
    """μ_θ of the module docstring, from one step's floats or every step's (1, K, 1, 1) tensors."""
    x0 = ((x - sqrt_one_minus_ab * eps) / sqrt_ab).clamp(-1.0, 1.0)
    return sqrt_ab_prev * x0 + dir_coef * eps


def _gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, sigma: torch.Tensor | float) -> torch.Tensor:
    """log N(x; mean, σ² I) summed over the chunk's last two axes (H, A)."""
    z = (x - mean) / sigma
    log_sigma = math.log(sigma) if isinstance(sigma, float) else sigma.log()
    return (-0.5 * z.square() - log_sigma - _HALF_LOG_2PI).sum(dim=(-2, -1))


def denoise_chain(
    diffusion: Diffusion,
    eps_fn: EpsFn,
    noise: torch.Tensor,
    config: ChainConfig,
    generator: torch.Generator | None = None,
    step_noise: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the stochastic chain from x_K = ``noise`` (B, H, A): latents (B, K+1, H, A) x_K … x₀ and log-probs (B, K).

    Step i's noise z_i is ``step_noise[:, i]`` when given (B, K, H, A): the draws an actor recorded, which replay its
    chain exactly. Otherwise it is drawn from ``generator`` on the CPU, in step order, shaped like ``noise``: the same
    stream `Diffusion.ddpm_sample` draws, so with K = num_train_steps and no σ clip the two samplers coincide. The
    last latent is unclipped (see the module docstring).
    """
    steps = chain_steps(diffusion, config)
    if step_noise is not None and step_noise.shape != (noise.shape[0], len(steps), *noise.shape[1:]):
        raise ValueError(f"step noise has shape {tuple(step_noise.shape)}, expected (B, K, H, A) with K = {len(steps)}")
    x, latents, log_probs = noise, [noise], []
    for i, s in enumerate(steps):
        t = torch.full((x.shape[0],), s.t, dtype=x.dtype, device=x.device)
        mean = _step_mean(x, eps_fn(x, t), s.sqrt_ab, s.sqrt_one_minus_ab, s.sqrt_ab_prev, s.dir_coef)
        if step_noise is None:
            z = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
        else:
            z = step_noise[:, i]
        x = mean + s.sigma * z
        latents.append(x)
        log_probs.append(_gaussian_log_prob(x, mean, s.sigma_logprob))
    return torch.stack(latents, dim=1), torch.stack(log_probs, dim=1)


@dataclass(frozen=True)
class Chain:
    """Denoising chains sampled for B observation windows: what PPO needs to recompute their probabilities."""

    latents: torch.Tensor  # (B, K+1, H, A), normalised units, x_K first, the unclipped x₀ last
    log_probs: torch.Tensor  # (B, K): log N(x_{k−1}; μ_old, σ_k²) of each step, summed over the chunk
    actions: torch.Tensor  # (B, H, A), raw units: unnormalize(clip(x₀, −1, 1)), what a robot would execute

    def take(self, index: torch.Tensor) -> Chain:
        """The chains at ``index`` (a minibatch)."""
        return Chain(self.latents[index], self.log_probs[index], self.actions[index])


def _diffusion(policy: GenerativePolicy) -> Diffusion:
    if not isinstance(policy.objective, Diffusion):
        raise ValueError(f"chain PPO needs a diffusion policy (ε-prediction, DDIM), not a {policy.method} policy")
    return policy.objective


def _eps_fn(policy: GenerativePolicy, cond: torch.Tensor) -> EpsFn:
    return lambda x, t: policy.denoiser(x, t, cond)


@torch.no_grad()
def sample_chain(
    policy: GenerativePolicy,
    obs: torch.Tensor,
    images: torch.Tensor | None = None,
    config: ChainConfig | None = None,
    generator: torch.Generator | None = None,
) -> Chain:
    """Sample one chain per raw observation window (B, To, n) from x_K ~ N(0, I), drawn first from ``generator``.

    Uses the policy in whatever mode it is in (see the module docstring for why PPO samples in eval mode).
    """
    config = config or ChainConfig()
    diffusion = _diffusion(policy)
    cond = policy.condition(obs, images)
    shape = (obs.shape[0], policy.cfg.horizon, policy.cfg.action_dim)
    noise = torch.randn(shape, generator=generator, dtype=cond.dtype).to(cond.device)
    latents, log_probs = denoise_chain(diffusion, _eps_fn(policy, cond), noise, config, generator)
    actions = policy.action_norm.unnormalize(latents[:, -1].clamp(-1.0, 1.0))
    return Chain(latents, log_probs, actions)


class ChainSampler(torch.nn.Module):
    """What an actor serves when its episodes feed chain PPO: raw obs (B, To, n), x_K ``noise`` (B, H, A) and the
    chain's per-step noise ``step_noise`` (B, K, H, A) → the raw executed chunk (B, H, A); traced, the loop unrolls.

    ``stochastic``: the chain of ``config`` (each step's σ as `chain_steps` clips it): the behaviour policy whose
    recorded noises `replay_chain` turns back into latents and log-probabilities. Otherwise every σ is 0, which is
    the deterministic DDIM sampler (η = 0) the policy deploys with, step for step (``step_noise`` is read and
    ignored), so a run's deterministic and exploring versions take the same inputs and record the same columns.
    """

    def __init__(self, policy: GenerativePolicy, config: ChainConfig, stochastic: bool) -> None:
        super().__init__()
        if policy.image_keys:
            raise ValueError("a chain sampler reads the state only; this policy has cameras")
        self.policy, self.stochastic = policy, stochastic
        steps = chain_steps(_diffusion(policy), config)
        if not stochastic:  # σ = 0: μ is DDIM η = 0's update, with the same x̂₀ clip
            steps = [
                dataclasses.replace(s, sigma=0.0, dir_coef=math.sqrt(max(1 - s.sqrt_ab_prev**2, 0.0))) for s in steps
            ]
        self.steps = steps

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, step_noise: torch.Tensor) -> torch.Tensor:
        cond = self.policy.condition(obs)
        x = noise
        for i, s in enumerate(self.steps):
            t = torch.full((x.shape[0],), s.t, dtype=x.dtype, device=x.device)
            eps = self.policy.denoiser(x, t, cond)
            mean = _step_mean(x, eps, s.sqrt_ab, s.sqrt_one_minus_ab, s.sqrt_ab_prev, s.dir_coef)
            x = mean + s.sigma * step_noise[:, i]
        return self.policy.action_norm.unnormalize(x.clamp(-1.0, 1.0))


@torch.no_grad()
def replay_chain(
    policy: GenerativePolicy, obs: torch.Tensor, noise: torch.Tensor, step_noise: torch.Tensor, config: ChainConfig
) -> Chain:
    """The chains an actor ran with this policy (the version it served), from the noises it recorded: x_K ``noise``
    (B, H, A) and ``step_noise`` (B, K, H, A) at raw observation windows (B, To, n). Their ``actions`` are what it
    executed (up to onnxruntime's float rounding), which is how a caller checks that the noises belong to this policy.
    """
    latents, log_probs = denoise_chain(
        _diffusion(policy), _eps_fn(policy, policy.condition(obs)), noise, config, step_noise=step_noise
    )
    return Chain(latents, log_probs, policy.action_norm.unnormalize(latents[:, -1].clamp(-1.0, 1.0)))


def chain_log_prob(
    policy: GenerativePolicy, obs: torch.Tensor, images: torch.Tensor | None, chain: Chain, config: ChainConfig
) -> torch.Tensor:
    """Each step's log-probability (B, K) under the current parameters, with grad; one network call for all steps.

    With the parameters that sampled ``chain`` it equals ``chain.log_probs`` up to float rounding (a batch of B·K
    evaluations instead of K of B).
    """
    diffusion = _diffusion(policy)
    steps = chain_steps(diffusion, config)
    b, k1, h, a = chain.latents.shape
    if k1 != len(steps) + 1:
        raise ValueError(f"the chain has {k1 - 1} steps but the config asks for {len(steps)}")
    x = chain.latents[:, :-1]
    coefs = [_coefs(steps, name, x) for name in ("sqrt_ab", "sqrt_one_minus_ab", "sqrt_ab_prev", "dir_coef")]
    t = torch.tensor([s.t for s in steps], dtype=x.dtype, device=x.device).repeat(b)
    cond = policy.condition(obs, images).repeat_interleave(len(steps), dim=0)
    eps = policy.denoiser(x.reshape(b * len(steps), h, a), t, cond).view_as(x)
    return _gaussian_log_prob(chain.latents[:, 1:], _step_mean(x, eps, *coefs), _coefs(steps, "sigma_logprob", x))


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
