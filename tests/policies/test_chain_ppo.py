"""PPO through the denoising chain (`policies.rl.chain_ppo`): probabilities, sampler formulas, and real learning.

The learning task: a 2-D observation that does not matter and 4-step chunks of one action, all +0.5 or all −0.5 in
equal shares. A tiny diffusion policy cloned on it samples both modes about equally; chain PPO, told that chunks
with a positive mean are good, must make the + mode dominant while every chunk stays on one of the two modes.
One thread: BC pre-training ~6 s, the 30 PPO iterations ~20 s on a shared 2-core machine.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import numpy as np
import pytest
import torch

from policies.generative.diffusion import Diffusion
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.policy import GenerativePolicy, PolicyConfig, PolicyOptions
from policies.generative.sampler import flush_denormals
from policies.rl.chain import ChainConfig, chain_log_prob, chain_steps, denoise_chain, sample_chain
from policies.rl.chain_ppo import Demos, PpoConfig, chain_ppo_update, make_optimizer, stored_chain_ppo_update

TINY = PolicyOptions(down_dims=(16,), time_embed_dim=32, encoder_hidden=64, encoder_dim=32)
CAMERA = PolicyOptions(
    down_dims=(16,),
    time_embed_dim=16,
    encoder_hidden=32,
    encoder_dim=16,
    image_keys=("side",),
    image_size=(16, 16),
    image_channels=(8, 16),
    image_keypoints=4,
    image_feature_dim=8,
)
MODE = 0.5  # the two modes' action value, ±MODE; the action normaliser's box is [-1, 1], so they sit inside it
NEAR = 0.25  # a chunk is on its mode when every action is this close to it (the modes are 2 MODE = 1 apart)


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def _policy(options: PolicyOptions, obs_dim: int = 2, action_dim: int = 1, obs_horizon: int = 1) -> GenerativePolicy:
    cfg = PolicyConfig("diffusion", obs_dim, action_dim, obs_horizon, horizon=4, options=options)
    box = torch.tensor([[-1.0], [1.0]])
    return GenerativePolicy(
        cfg, MinMaxNormalizer.fit(box.expand(2, obs_dim)), MinMaxNormalizer.fit(box.expand(2, action_dim))
    ).eval()


def _obs(n: int, policy: GenerativePolicy, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, policy.cfg.obs_horizon, policy.cfg.obs_dim, generator=g) * 2 - 1


@pytest.mark.parametrize("options", [PolicyOptions(down_dims=(16, 32)), CAMERA], ids=["state", "camera"])
def test_recomputed_log_probs_equal_recorded_ones(options: PolicyOptions) -> None:
    """Unchanged parameters: every step's ratio is 1 (up to float rounding of a B·K batch against K batches of B)."""
    torch.manual_seed(0)
    policy = _policy(options, obs_dim=3, action_dim=2, obs_horizon=2)
    obs = _obs(16, policy, seed=1)
    images = None
    if options.image_keys:
        images = torch.randint(0, 256, (16, 2, 1, 3, 16, 16), generator=torch.Generator().manual_seed(2))
        images = images.to(torch.uint8)
    config = ChainConfig()
    chain = sample_chain(policy, obs, images, config, torch.Generator().manual_seed(3))
    assert chain.latents.shape == (16, 11, 4, 2) and chain.log_probs.shape == (16, 10)
    # The executed chunk is the clipped last latent in raw units; the log-probs are of the unclipped Gaussian steps.
    torch.testing.assert_close(chain.actions, policy.action_norm.unnormalize(chain.latents[:, -1].clamp(-1, 1)))
    again = sample_chain(policy, obs, images, config, torch.Generator().manual_seed(3))
    torch.testing.assert_close(again.latents, chain.latents, rtol=0, atol=0)

    new = chain_log_prob(policy, obs, images, chain, config)
    assert new.requires_grad
    ratio = (new - chain.log_probs).exp()
    assert (ratio - 1).abs().max().item() < 1e-4, ratio
    new.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in policy.denoiser.parameters())


def test_sigmas_follow_eta_one_clipped_to_rl100_range() -> None:
    """K = 10 on the cosine schedule: η = 1 asks σ ≥ 0.14 before the last step (so σ_max everywhere) and 0 at it."""
    steps = chain_steps(Diffusion(100), ChainConfig())
    assert [s.k for s in steps] == [99, 89, 79, 69, 59, 49, 39, 29, 19, 9]
    assert [s.sigma for s in steps] == [0.1] * 9 + [0.0067]
    assert steps[-1].sqrt_ab_prev == 1.0 and steps[-1].dir_coef == 0.0  # the last mean is the clean estimate x̂₀


def test_vanishing_noise_gives_the_deployed_ddim_sampler() -> None:
    """With σ → 0 the chain from the same x_K is `Diffusion.ddim_sample` (η = 0, K = 10), what the policy deploys."""
    torch.manual_seed(0)
    policy = _policy(PolicyOptions(down_dims=(16, 32)), obs_dim=3, action_dim=2, obs_horizon=2)
    obs = _obs(32, policy, seed=1)
    chain = sample_chain(
        policy, obs, None, ChainConfig(sigma_min=1e-7, sigma_max=1e-7), torch.Generator().manual_seed(4)
    )
    noise = torch.randn(32, 4, 2, generator=torch.Generator().manual_seed(4))  # x_K: the chain's first draw
    torch.testing.assert_close(chain.latents[:, 0], noise, rtol=0, atol=0)
    with torch.no_grad():
        deployed = policy.sample(obs, noise, steps=10)
    torch.testing.assert_close(chain.actions, deployed, rtol=0, atol=1e-4)


def test_eta_one_over_every_training_step_is_ddpm() -> None:
    """K = 100, η = 1, σ unclipped: each step is DDPM's ancestral step (posterior mean and variance β̃).

    The ε-model is exact for Gaussian data N(m, s²): E[ε | x_k] = √(1−ᾱ)(x − √ᾱ m)/(ᾱ s² + 1 − ᾱ). The two samplers
    differ only where the clean estimate is clipped (DDPM's mean reads x_k, the chain's ε̂); with the data 4.5 s inside
    the box that never happens, so fed the same noise stream they must agree to rounding. (With s = 0.3, 0.4 % of
    the samples' clean estimates left the box and differed by up to 0.06.)
    """
    diffusion, m, s = Diffusion(100), 0.1, 0.2
    ab = diffusion.alphas_cumprod

    def exact_eps(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = ab[(t * diffusion.num_train_steps).round().long()].view(-1, 1, 1)
        return (1 - a).sqrt() * (x - a.sqrt() * m) / (a * s**2 + 1 - a)

    config = ChainConfig(sampling_steps=100, eta=1.0, sigma_min=1e-9, sigma_max=10.0)
    g = torch.Generator().manual_seed(5)
    noise = torch.randn(2000, 4, 1, generator=g, dtype=torch.float64)
    ddpm = diffusion.ddpm_sample(exact_eps, noise, g)
    # The chain's generator continues past the draw of x_K, as ddpm_sample's does.
    g = torch.Generator().manual_seed(5)
    latents, log_probs = denoise_chain(
        diffusion, exact_eps, torch.randn(noise.shape, generator=g, dtype=torch.float64), config, g
    )
    torch.testing.assert_close(latents[:, -1], ddpm, rtol=0, atol=1e-6)
    assert torch.isfinite(log_probs).all()
    # Both land on the data's mean (not its std: β̃ with a plug-in x̂₀ loses spread, 0.185 here against 0.2).
    assert abs(ddpm.mean().item() - m) < 0.01


@pytest.fixture(scope="module")
def cloned() -> GenerativePolicy:
    """The tiny policy after 400 BC steps on the ±MODE data (~6 s): both modes, about half each."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = _policy(TINY).train()
    n, g = 512, torch.Generator().manual_seed(0)
    obs = _obs(n, policy, seed=0)
    actions = (MODE * torch.tensor([1.0, -1.0]).repeat(n // 2)).view(n, 1, 1).expand(n, 4, 1).contiguous()
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    start = time.monotonic()
    with flush_denormals():
        for _ in range(400):
            idx = torch.randint(n, (128,), generator=g)
            loss, _ = policy.loss(obs[idx], actions[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    print(f"BC pre-training: 400 steps in {time.monotonic() - start:.1f} s")
    return policy.eval()


def _modes(policy: GenerativePolicy, n: int = 400, seed: int = 9) -> tuple[float, float]:
    """(share of chunks with a positive mean, share whose every action lies within NEAR of the mean's mode)."""
    with flush_denormals():
        chunks = sample_chain(policy, _obs(n, policy, seed), None, ChainConfig(), torch.Generator().manual_seed(seed))
    mean = chunks.actions.mean(dim=(1, 2))
    error = (chunks.actions - MODE * torch.sign(mean).view(-1, 1, 1)).abs().amax(dim=(1, 2))
    return float((mean > 0).float().mean()), float((error < NEAR).float().mean())


def _plus_is_good(windows: np.ndarray, chunks: np.ndarray) -> np.ndarray:
    assert windows.shape[1:] == (1, 2) and chunks.shape[1:] == (4, 1)
    return np.where(chunks.mean(axis=(1, 2)) > 0, 1.0, -1.0)


def test_chain_ppo_makes_the_rewarded_mode_dominant(cloned: GenerativePolicy) -> None:
    """From ~0.55 to > 0.8 of chunks on the + mode, nearly every chunk still on a mode.

    lr 2e-4 (not RL-100's 3e-6: with Adam each weight moves ~lr per step, and this network is tiny), ε 0.25, 4
    epochs of 4 minibatches of 64 per iteration of 256 chains, 30 iterations. Observed over four seeds: + share
    0.90–0.96, on-mode share 0.91–0.99 (within 0.15 instead of NEAR: 0.78–0.93; the ±1 advantage does not
    penalise chunks between the modes, and some pass through there on their way to +). lr 3e-4 learnt faster but
    left more chunks between the modes, lr 1e-3 scattered them (on-mode share 0.3); ε 0.1 learnt too slowly.
    """
    policy = copy.deepcopy(cloned)
    before, near_before = _modes(policy)
    assert 0.35 <= before <= 0.65 and near_before >= 0.9, (before, near_before)
    config = PpoConfig(lr=2e-4, clip=0.25, epochs=4, minibatch_size=64)
    g = torch.Generator().manual_seed(1)
    opt = make_optimizer(policy, config)
    start = time.monotonic()
    for i in range(30):
        obs = _obs(256, policy, seed=100 + i)
        stats = chain_ppo_update(policy, obs, None, _plus_is_good, config, generator=g, optimizer=opt)
        assert stats.updates == 16 and stats.ratio_min <= 1.0 <= stats.ratio_max and stats.approx_kl >= 0
        assert len(stats.clip_fraction_per_step) == 10 and stats.bc_loss is None
    after, near_after = _modes(policy)
    print(f"30 PPO iterations in {time.monotonic() - start:.1f} s: + share {before:.2f} → {after:.2f}, "
          f"on-mode {near_before:.2f} → {near_after:.2f}; last {stats}")  # fmt: skip
    assert after > 0.8 and near_after >= 0.85, (after, near_after)
    assert not policy.training


def _kl_to(before: GenerativePolicy, after: GenerativePolicy, obs: torch.Tensor) -> float:
    """Mean approximate KL(before ‖ after) of chains sampled by ``before``, per denoising step."""
    with flush_denormals(), torch.no_grad():
        chain = sample_chain(before, obs, None, ChainConfig(), torch.Generator().manual_seed(3))
        log_ratio = chain_log_prob(after, obs, None, chain, ChainConfig()) - chain.log_probs
    return float(((log_ratio.exp() - 1) - log_ratio).mean())


def test_target_kl_stops_the_epochs_before_the_policy_runs_away(cloned: GenerativePolicy) -> None:
    """One iteration at a step size that moves the chain far: the limit ends it after the minibatch that passed
    1.5 × the target, so the policy stays near the one that sampled, where the unlimited iteration does not."""
    obs = _obs(256, cloned, seed=20)
    free, limited = copy.deepcopy(cloned), copy.deepcopy(cloned)
    config = PpoConfig(lr=3e-3, clip=0.25, epochs=4, minibatch_size=64)
    full = chain_ppo_update(free, obs, None, _plus_is_good, config, generator=torch.Generator().manual_seed(4))
    capped = dataclasses.replace(config, target_kl=0.01)
    cut = chain_ppo_update(limited, obs, None, _plus_is_good, capped, generator=torch.Generator().manual_seed(4))
    assert full.updates == 16 and not full.stopped_early
    assert cut.stopped_early and 1 <= cut.updates < 16, cut
    kl_free, kl_limited = _kl_to(cloned, free, obs), _kl_to(cloned, limited, obs)
    print(f"KL to the sampling policy after one iteration: unlimited {kl_free:.3g} ({full.updates} updates), "
          f"target 0.01 {kl_limited:.3g} ({cut.updates} updates)")  # fmt: skip
    assert kl_limited < kl_free / 2, (kl_limited, kl_free)
    with pytest.raises(ValueError, match="PPO config"):
        PpoConfig(target_kl=0.0)


def test_stored_chains_train_only_the_steps_after_the_frozen_ones(cloned: GenerativePolicy) -> None:
    """PPO on recorded chains (RL-100's online stage) reads no ratio of a frozen step: garbage in those steps' stored
    log-probabilities leaves the update bit for bit the same. With ``first_free`` off, a policy already past the KL
    limit of the chains' behaviour policy takes no update at all."""
    obs = _obs(256, cloned, seed=30)
    frozen = ChainConfig(frozen_steps=2)
    chain = sample_chain(cloned, obs, None, frozen, torch.Generator().manual_seed(5))
    advantages = _plus_is_good(obs.numpy(), chain.actions.numpy())
    garbage = dataclasses.replace(chain, log_probs=chain.log_probs.clone())
    garbage.log_probs[:, :2] += 5.0
    config = PpoConfig(lr=2e-4, clip=0.25, epochs=2, minibatch_size=64)
    moved = {}
    for name, stored in (("clean", chain), ("garbage", garbage)):
        policy = copy.deepcopy(cloned)
        stats = stored_chain_ppo_update(
            policy, obs, stored, advantages, config, frozen, torch.Generator().manual_seed(6)
        )
        assert stats.updates == 8 and len(stats.clip_fraction_per_step) == 8
        moved[name] = policy
    for a, b in zip(moved["clean"].parameters(), moved["garbage"].parameters(), strict=True):
        assert torch.equal(a, b)
    late = dataclasses.replace(config, target_kl=1e-9)
    again = stored_chain_ppo_update(moved["clean"], obs, chain, advantages, late, frozen, first_free=False)
    assert again.updates == 0 and again.stopped_early
    with pytest.raises(ValueError, match="frozen_steps must leave PPO at least one"):
        ChainConfig(sampling_steps=10, frozen_steps=10)


def test_bc_term_pulls_towards_the_demos(cloned: GenerativePolicy) -> None:
    """Advantages all equal (normalised to 0: no PPO gradient) and + mode demos: BC alone moves the policy there."""
    policy = copy.deepcopy(cloned)
    before, _ = _modes(policy)
    demo_obs = _obs(128, policy, seed=7)
    demos = Demos(demo_obs, torch.full((128, 4, 1), MODE))
    config = PpoConfig(lr=3e-4, epochs=2, minibatch_size=64, bc_weight=1.0)
    stats = chain_ppo_update(
        policy,
        _obs(256, policy, seed=8),
        None,
        lambda w, c: np.ones(len(w)),
        config,
        None,
        torch.Generator().manual_seed(0),
        demos=demos,
    )
    after, near = _modes(policy)
    assert stats.mean_advantage == 1.0 and stats.bc_loss is not None and math.isfinite(stats.bc_loss)
    assert after > before + 0.2 and near >= 0.85, (before, after, near)


def test_refusals(cloned: GenerativePolicy) -> None:
    """Bad advantages, a BC weight without demos, a non-diffusion policy and diverged weights are named."""
    policy = copy.deepcopy(cloned)
    obs = _obs(8, policy, seed=0)
    with pytest.raises(ValueError, match="shape"):
        chain_ppo_update(policy, obs, None, lambda w, c: np.ones(3))
    with pytest.raises(FloatingPointError, match="advantage"):
        chain_ppo_update(policy, obs, None, lambda w, c: np.full(len(w), np.nan))
    with pytest.raises(ValueError, match="demos"):
        chain_ppo_update(policy, obs, None, _plus_is_good, PpoConfig(bc_weight=0.5))
    flow = GenerativePolicy(PolicyConfig("flow", 2, 1, 1, 4, TINY))
    with pytest.raises(ValueError, match="diffusion"):
        sample_chain(flow, obs)
    with pytest.raises(ValueError):
        ChainConfig(sigma_min=0.2, sigma_max=0.1)
    with torch.no_grad():
        policy.denoiser.final[-1].bias.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="loss"):
        chain_ppo_update(policy, obs, None, _plus_is_good)
