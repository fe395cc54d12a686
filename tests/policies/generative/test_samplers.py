"""Noising conventions, losses and samplers checked against exact solutions, plus MeanFlow's JVP.

For a single target chunk A (a point mass) every method has a closed-form ideal network; with it
the training loss is zero and every sampler returns A in any number of steps. That pins down the
conventions (which end is noise, what the time input means) without any training.
"""

from __future__ import annotations

import pytest
import torch

from policies.generative.consistency import chunk_step_weights, distillation_loss
from policies.generative.diffusion import Diffusion, squaredcos_cap_v2
from policies.generative.flow import FlowMatching
from policies.generative.meanflow import MeanFlow, jvp_along_path
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.policy import GenerativePolicy, PolicyConfig, PolicyOptions


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


def _target(batch: int = 6) -> torch.Tensor:
    torch.manual_seed(0)
    return 1.6 * torch.rand(batch, 8, 2) - 0.8


def _exact_eps(diffusion: Diffusion, a: torch.Tensor):
    def eps(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        ab = diffusion.alphas_cumprod[torch.round(t * diffusion.num_train_steps).long()].float().view(-1, 1, 1)
        return (x - ab.sqrt() * a) / (1 - ab).sqrt()

    return eps


def test_cosine_schedule_and_trailing_ddim_timesteps() -> None:
    ab = squaredcos_cap_v2(100)
    assert ab.shape == (100,) and (ab.diff() < 0).all() and 0.999 < ab[0] < 1 and 0 < ab[-1] < 1e-6
    d = Diffusion()
    assert d.ddim_timesteps(10) == [99, 89, 79, 69, 59, 49, 39, 29, 19, 9]
    assert d.ddim_timesteps(1) == [99]
    assert d.ddim_timesteps(100) == list(range(99, -1, -1))
    for bad in (0, 101):
        with pytest.raises(ValueError, match=r"1\.\.100"):
            d.ddim_timesteps(bad)


def test_diffusion_with_the_exact_noise_predictor() -> None:
    d, a = Diffusion(), _target()
    eps = _exact_eps(d, a)
    assert d.loss(eps, a).max() < 1e-6
    noise = torch.randn_like(a)
    for steps in (1, 3, 10, 100):
        assert torch.allclose(d.ddim_sample(eps, noise, steps), a, atol=2e-3), steps
    assert torch.allclose(d.ddpm_sample(eps, noise, torch.Generator().manual_seed(0)), a, atol=2e-3)


def test_flow_and_meanflow_with_the_exact_velocity() -> None:
    """Path x_t = t·ε + (1 − t)·A: toward a point mass the velocity is (x − A)/t at every t, and the
    average velocity over any [r, t] is the same (the path is straight)."""
    a = _target()

    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return (x - a) / t.view(-1, 1, 1)

    flow = FlowMatching()
    assert flow.loss(velocity, a).max() < 1e-8
    noise = torch.randn_like(a)
    for steps in (1, 4):
        assert torch.allclose(flow.sample(velocity, noise, steps), a, atol=1e-5)
    for variant in ("mf", "imf"):
        mf = MeanFlow(variant)
        assert mf.loss(lambda z, t, r: velocity(z, t), a).max() < 1e-6, variant
        wrong = mf.loss(lambda z, t, r: velocity(z, t) + 0.1, a)
        assert wrong.min() > 0.1, f"{variant}: a wrong field must cost"
    for steps in (1, 3):
        assert torch.allclose(MeanFlow.sample(lambda z, t, r: velocity(z, t), noise, steps), a, atol=1e-5)


def test_chunk_step_weights_single_out_the_executed_steps() -> None:
    w = chunk_step_weights(16, 2, 8, 0.1)
    assert w.shape == (16,) and w.mean().item() == pytest.approx(1.0)
    assert (w[1:9] == w[1]).all() and (w[0] == w[9:]).all() and w[1] / w[0] == pytest.approx(10.0)
    assert torch.equal(chunk_step_weights(16, 2, 8, 1.0), torch.ones(16))
    with pytest.raises(ValueError, match="unexecuted chunk steps"):
        chunk_step_weights(16, 2, 8, 1.5)


def test_step_weights_decide_which_chunk_errors_cost() -> None:
    """An error only on unexecuted steps costs nothing at weight 0 and its full share at weight 1,
    in the consistency loss and in MeanFlow's (through a field that is wrong only there)."""
    torch.manual_seed(0)
    opts = PolicyOptions(down_dims=(8, 16), time_embed_dim=16, encoder_hidden=32, encoder_dim=16)
    student = GenerativePolicy(PolicyConfig("consistency", 3, 2, 2, 8, opts))
    obs, noise = torch.randn(4, 2, 3), torch.randn(4, 8, 2)
    with torch.no_grad():
        exact = student.action_norm.unnormalize(student.one_step_unclipped(noise, student.condition(obs)))
    off = exact.clone()
    off[:, 5:] += 0.3  # steps 5..7: after the execution horizon (steps 1..4)
    only_executed, uniform = chunk_step_weights(8, 2, 4, 0.0), chunk_step_weights(8, 2, 4, 1.0)
    assert distillation_loss(student, obs, noise, off, step_weights=only_executed)[0].item() < 1e-10
    assert distillation_loss(student, obs, noise, off, step_weights=uniform)[0].item() > 1e-3

    a = _target(4)
    mask = torch.zeros(1, 8, 1)
    mask[:, 5:] = 1.0

    def wrong_late(z: torch.Tensor, t: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (z - a) / t.view(-1, 1, 1) + 0.1 * mask

    mf = MeanFlow("imf")
    assert mf.loss(wrong_late, a, step_weights=only_executed).max() < 1e-6
    assert mf.loss(wrong_late, a, step_weights=uniform).min() > 0.1


def test_flow_training_times_favour_the_noisy_end() -> None:
    torch.manual_seed(0)
    t = FlowMatching().time_dist.sample((20000,))
    assert t.mean().item() == pytest.approx(0.6, abs=0.01)  # Beta(1.5, 1) has mean 0.6: t = 1 is noise


def test_meanflow_times() -> None:
    torch.manual_seed(0)
    t, r = MeanFlow(r_equals_t=0.5).sample_times(20000)
    assert ((r <= t) & (r > 0) & (t < 1)).all()
    assert (r == t).float().mean().item() == pytest.approx(0.5, abs=0.02)
    assert ((t > 0.95) & (r < 0.05)).any(), "the one-step jump (r ≈ 0, t ≈ 1) must be trained"


def test_meanflow_jump_fraction_trains_the_one_step_jump_itself() -> None:
    torch.manual_seed(0)
    t, r = MeanFlow(r_equals_t=0.5, jump_fraction=0.25).sample_times(20000)
    jump = (t == 1) & (r == 0)
    assert jump.float().mean().item() == pytest.approx(0.25, abs=0.02)
    assert (r[~jump] == t[~jump]).float().mean().item() == pytest.approx(0.5, abs=0.02), "the rest as before"
    with pytest.raises(ValueError, match="jump_fraction"):
        MeanFlow(jump_fraction=1.5)


def test_meanflow_endpoint_term_regresses_the_jump_onto_the_coupled_sample() -> None:
    """With coupled (noise, chunk) pairs the one-step jump's target is known: noise − chunk. A field exact
    everywhere costs nothing; one wrong only at (r, t) = (0, 1) costs only through the endpoint term."""
    a = _target(64)
    noise = torch.randn_like(a)

    def exact(z: torch.Tensor, t: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return (z - a) / t.view(-1, 1, 1)

    def wrong_jump(z: torch.Tensor, t: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        full_jump = ((t == 1) & (r == 0)).view(-1, 1, 1)
        return exact(z, t, r) + 0.1 * full_jump

    plain, anchored = MeanFlow("imf"), MeanFlow("imf", endpoint_weight=1.0)
    assert anchored.loss(exact, a, noise).max() < 1e-6
    assert plain.loss(wrong_jump, a, noise).max() < 1e-6, "no sampled (r, t) is exactly the jump"
    assert anchored.loss(wrong_jump, a, noise).min() > 0.5
    with pytest.raises(ValueError, match="coupled"):
        anchored.loss(exact, a)


def test_meanflow_jvp_matches_a_finite_difference() -> None:
    """du/dt = v·∂_z u + ∂_t u from one forward-mode product equals a central difference along the path."""
    torch.manual_seed(0)
    opts = PolicyOptions(down_dims=(8, 16), time_embed_dim=16, encoder_hidden=32, encoder_dim=16)
    policy = GenerativePolicy(PolicyConfig("meanflow", 3, 2, 2, 8, opts)).double()
    torch.nn.init.normal_(policy.denoiser.h_embed[-1].weight, std=0.1)  # make u depend on t − r
    cond = policy.condition(torch.randn(5, 2, 3, dtype=torch.float64))

    def u_fn(z: torch.Tensor, t: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        return policy.denoiser(z, t, cond, t - r)

    z, v = torch.randn(5, 8, 2, dtype=torch.float64), torch.randn(5, 8, 2, dtype=torch.float64)
    t = torch.tensor([0.3, 0.5, 0.7, 0.9, 0.99], dtype=torch.float64)
    r = t * torch.tensor([0.0, 0.2, 0.5, 0.9, 1.0], dtype=torch.float64)
    u, dudt = jvp_along_path(u_fn, z, t, r, v)
    h = 1e-6
    fd = (u_fn(z + h * v, t + h, r) - u_fn(z - h * v, t - h, r)) / (2 * h)
    assert torch.allclose(u, u_fn(z, t, r))
    assert (dudt - fd).abs().max() <= 1e-5 * dudt.abs().max(), (dudt - fd).abs().max()


def test_ddim_is_deterministic_given_the_noise_and_ddpm_given_the_generator() -> None:
    torch.manual_seed(0)
    opts = PolicyOptions(down_dims=(8, 16), time_embed_dim=16, encoder_hidden=32, encoder_dim=16)
    actions = 3 * torch.rand(100, 2) + 1
    policy = GenerativePolicy(
        PolicyConfig("diffusion", 3, 2, 2, 8, opts), action_normalizer=MinMaxNormalizer.fit(actions)
    ).eval()
    obs, noise = torch.randn(4, 2, 3), torch.randn(4, 8, 2)
    with torch.no_grad():
        for steps in (1, 7, 100):
            first = policy.sample(obs, noise, steps)
            assert torch.equal(first, policy.sample(obs, noise, steps))
            assert not torch.allclose(first, policy.sample(obs, torch.randn_like(noise), steps))
            assert first.min() >= 1 - 1e-5 and first.max() <= 4 + 1e-5, "clipped to the data's range in raw units"
        ddpm = [policy.sample(obs, noise, 100, "ddpm", torch.Generator().manual_seed(s)) for s in (1, 1, 2)]
    assert torch.equal(ddpm[0], ddpm[1]) and not torch.allclose(ddpm[0], ddpm[2])
    with pytest.raises(ValueError, match="DDPM"):
        policy.sample(obs, noise, 10, "ddpm")
