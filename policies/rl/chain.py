"""The denoising chain of a diffusion policy as a Gaussian policy: sampling, replay, log-probabilities, export.

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

PPO on these chains is `policies.rl.chain_ppo`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from policies.generative.diffusion import Diffusion, EpsFn
from policies.generative.policy import GenerativePolicy

Coef = torch.Tensor | float
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
