"""policies.rl.iql: chunk-level IQL on a two-stage chain whose values are known in closed form.

From a start state (phase 0) the behaviour plays a good chunk (actions ≈ +0.5) or a bad one (≈ −0.5) half the time
each: the good one leads to phase 1 after 2 steps (discount γ²), the bad one fails (terminal, reward 0). From phase
1 any chunk succeeds (reward 1, terminal). So Q(s1, ·) = V(s1) = 1, Q(s0, good) = γ², Q(s0, bad) = 0, and V(s0) is
the τ-expectile of {0, γ²} at equal odds: τγ², which approaches the good chunk's value as τ → 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from policies.rl.iql import IqlConfig, IqlCritics
from policies.rl.transitions import ChunkTransitions

GAMMA, CHUNK = 0.9, 2


def chain(n: int, seed: int = 0, gamma: float = GAMMA) -> ChunkTransitions:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n)
    phase = rng.random(n) < 0.4  # 40 % of rows are phase-1 states
    good = rng.random(n) < 0.5
    state = np.stack([x, phase.astype(float)], axis=1)
    sign = np.where(good, 0.5, -0.5)
    actions = np.where(phase, rng.uniform(-1, 1, n), sign)[:, None, None] + rng.normal(0, 0.05, (n, CHUNK, 1))
    next_state = np.stack([x, np.ones(n)], axis=1)
    done = phase | ~good
    reward = phase.astype(float)
    window = state[:, None]
    return ChunkTransitions(
        window=window.astype(np.float32), state=state.astype(np.float32), actions=actions.astype(np.float32),
        length=np.full(n, CHUNK), reward=reward, next_window=next_state[:, None].astype(np.float32),
        next_state=next_state.astype(np.float32), done=done, discount=np.full(n, gamma**CHUNK),
        episode=np.arange(n), step=np.zeros(n, dtype=np.int64), by_policy=np.ones(n, dtype=bool), gamma=gamma,
    )  # fmt: skip


CONFIG = IqlConfig(expectile=0.9, gamma=GAMMA, hidden=64, steps=2000, batch_size=256, lr=1e-3, target_polyak=0.02)


@pytest.fixture(scope="module")
def fitted() -> tuple[IqlCritics, dict[str, float]]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    critics = IqlCritics(2, CHUNK, 1, CONFIG)
    return critics, critics.fit(chain(4000))


def test_iql_values_match_the_chain_and_the_advantage_ranks_the_good_chunk_first(
    fitted: tuple[IqlCritics, dict[str, float]],
) -> None:
    critics, losses = fitted
    assert set(losses) == {"value", "q"} and losses["q"] < 0.01
    x = np.linspace(-0.9, 0.9, 7)
    s0 = np.stack([x, np.zeros(7)], axis=1)
    s1 = np.stack([x, np.ones(7)], axis=1)
    good = np.full((7, CHUNK, 1), 0.5)
    bad = np.full((7, CHUNK, 1), -0.5)
    np.testing.assert_allclose(critics.v(s1), 1.0, atol=0.05)
    np.testing.assert_allclose(critics.q(s0, good), GAMMA**2, atol=0.05)
    np.testing.assert_allclose(critics.q(s0, bad), 0.0, atol=0.05)
    np.testing.assert_allclose(critics.v(s0), CONFIG.expectile * GAMMA**2, atol=0.05)  # the 0.9-expectile: τγ²
    a_good, a_bad = critics.advantage(s0, good), critics.advantage(s0, bad)
    assert (a_good > 0.02).all() and (a_bad < -0.5).all()
    # the torch API agrees with the numpy one
    torch_a = critics.advantage_torch(torch.tensor(s0, dtype=torch.float32), torch.tensor(good, dtype=torch.float32))
    np.testing.assert_allclose(torch_a.detach().numpy(), a_good, rtol=1e-5, atol=1e-6)


def test_a_low_expectile_averages_the_behaviour_instead(fitted: tuple[IqlCritics, dict[str, float]]) -> None:
    torch.set_num_threads(1)
    median = IqlCritics(2, CHUNK, 1, IqlConfig(**{**CONFIG.__dict__, "expectile": 0.5}))
    median.fit(chain(4000))
    s0 = np.array([[0.0, 0.0]])
    assert median.v(s0)[0] == pytest.approx(0.5 * GAMMA**2, abs=0.05)  # the mean of {0, γ²}
    assert fitted[0].v(s0)[0] > median.v(s0)[0] + 0.2


def test_critics_round_trip_through_a_checkpoint_file(
    fitted: tuple[IqlCritics, dict[str, float]], tmp_path: Path
) -> None:
    critics = fitted[0]
    torch.save(critics.to_checkpoint(), tmp_path / "critics.pt")
    loaded = IqlCritics.from_checkpoint(torch.load(tmp_path / "critics.pt", weights_only=True))
    s = np.random.default_rng(1).uniform(-1, 1, (5, 2))
    a = np.random.default_rng(2).uniform(-1, 1, (5, CHUNK, 1))
    np.testing.assert_array_equal(loaded.q(s, a), critics.q(s, a))
    np.testing.assert_array_equal(loaded.v(s), critics.v(s))
    assert loaded.config == critics.config and bool(loaded.fitted)


def test_divergence_and_mismatched_transitions_are_refused() -> None:
    torch.set_num_threads(1)
    small = IqlConfig(gamma=GAMMA, hidden=8, steps=5)
    data = chain(64)
    poisoned = ChunkTransitions(**{**data.__dict__, "reward": np.full(64, np.nan)})
    with pytest.raises(FloatingPointError, match="twin Q critics"):
        IqlCritics(2, CHUNK, 1, small).fit(poisoned)
    with pytest.raises(ValueError, match="gamma"):
        IqlCritics(2, CHUNK, 1, small).fit(chain(64, gamma=0.5))
    with pytest.raises(ValueError, match="sizes"):
        IqlCritics(3, CHUNK, 1, small).fit(data)
    with pytest.raises(ValueError, match="expectile"):
        IqlConfig(expectile=1.0)
