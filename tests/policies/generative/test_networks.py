"""Building blocks: the U-Net, the normaliser, EMA and the dispersive regulariser."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from policies.generative.dispersive import dispersive_loss
from policies.generative.ema import EMA
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.policy import GenerativePolicy, PolicyConfig, PolicyOptions
from policies.generative.unet import ConditionalUnet1D


@pytest.fixture(autouse=True)
def one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("down_dims", [(16,), (16, 32, 64), (256, 512, 1024)])
def test_unet_keeps_the_chunk_shape(down_dims: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    net = ConditionalUnet1D(action_dim=3, cond_dim=10, down_dims=down_dims)
    x = torch.randn(2, 16, 3)
    out = net(x, torch.rand(2), torch.randn(2, 10))
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in net.modules())


def test_second_time_input_starts_ignored_and_is_required() -> None:
    torch.manual_seed(0)
    net = ConditionalUnet1D(2, 8, (8, 16), time_embed_dim=16, two_times=True)
    x, t, cond = torch.randn(4, 8, 2), torch.rand(4), torch.randn(4, 8)
    assert torch.equal(net(x, t, cond, torch.zeros(4)), net(x, t, cond, torch.ones(4)))
    nn.init.normal_(net.h_embed[-1].weight)
    assert not torch.allclose(net(x, t, cond, torch.zeros(4)), net(x, t, cond, torch.ones(4)))
    with pytest.raises(ValueError, match="two_times"):
        net(x, t, cond)


def test_policy_refuses_a_chunk_the_unet_cannot_halve() -> None:
    with pytest.raises(ValueError, match="multiple of 4"):
        GenerativePolicy(PolicyConfig("diffusion", 3, 2, 2, 6, PolicyOptions(down_dims=(8, 16, 32))))


def test_normalizer_maps_the_data_range_to_the_box_and_back() -> None:
    data = torch.stack([torch.linspace(-3, 5, 50), torch.full((50,), 7.0), torch.linspace(0, 1e-3, 50)], dim=1)
    norm = MinMaxNormalizer.fit(data)
    n = norm.normalize(data)
    assert torch.allclose(n[:, 0].min(), torch.tensor(-1.0)) and torch.allclose(n[:, 0].max(), torch.tensor(1.0))
    assert torch.equal(n[:, 1], torch.zeros(50)), "a constant dimension sits at 0, not at the box edge"
    assert n[:, 2].abs().max() <= 1.0 + 1e-6
    assert torch.allclose(norm.unnormalize(n), data, atol=1e-5)
    assert set(norm.state_dict()) == {"scale", "offset"}
    assert not list(norm.parameters()), "normalisers must not be trained"
    with pytest.raises(ValueError, match="non-finite"):
        MinMaxNormalizer.fit(torch.tensor([[0.0], [float("nan")]]))


def test_ema_schedule_and_averaging() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.GroupNorm(1, 2))
    ema = EMA(model)
    assert ema.decay() == 0.0
    ema.update(model)
    assert all(torch.equal(a, b) for a, b in zip(ema.model.parameters(), model.parameters(), strict=True))
    ema.updates = 10
    assert ema.decay() == pytest.approx(1 - 11**-0.75)
    ema.updates = 10**9
    assert ema.decay() == 0.9999
    fixed = EMA(model, fixed_decay=0.95)
    before = [p.clone() for p in fixed.model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    fixed.update(model)
    for avg, old, new in zip(fixed.model.parameters(), before, model.parameters(), strict=True):
        assert torch.allclose(avg, 0.95 * old + 0.05 * new)
    with pytest.raises(ValueError, match="BatchNorm"):
        EMA(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))


def test_dispersive_loss_prefers_spread_embeddings_and_stays_finite() -> None:
    torch.manual_seed(0)
    clustered, spread = 0.01 * torch.randn(16, 8), torch.randn(16, 8)
    assert dispersive_loss(clustered) > dispersive_loss(spread)
    assert dispersive_loss(torch.zeros(4, 3)).item() == pytest.approx(0.0, abs=1e-6)
    far = (100.0 * torch.randn(16, 8)).requires_grad_(True)
    loss = dispersive_loss(far)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(far.grad).all(), "exp underflow must not give -inf or NaN"
    same = torch.zeros(4, 3, requires_grad=True)
    dispersive_loss(same).backward()
    assert torch.isfinite(same.grad).all(), "identical embeddings (distance 0) must still have a gradient"
