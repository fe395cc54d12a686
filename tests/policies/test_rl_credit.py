"""policies.rl: intervention-aware credit, the critics it trains, and HABC's gate and weights.

Episodes come through the real dataset writer and reader (the columns an actor records), so the credit rules are
checked on what a real-world RL round actually stores.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.rl.credit import CreditError, episode_credit, segments
from policies.rl.critics import CriticConfig, ValueCritic, cross_fitted_values
from policies.rl.habc import HabcWeighting, gate, lambda_advantage, merged_advantage, transition_weights
from policies.rl.rounds import ended_under_intervention
from reflexlab.dataset import DatasetWriter, load_dataset


def steps(person: list[int], success_at_end: bool) -> dict[str, np.ndarray]:
    success = np.zeros(len(person), dtype=bool)
    success[-1] = success_at_end
    return {"is_intervention": np.array(person, dtype=bool), "next.success": success}


def test_segments_are_maximal_runs_of_one_commander() -> None:
    assert segments(np.array([0, 0, 1, 1, 0], dtype=bool)) == [(0, 2), (2, 4), (4, 5)]
    assert segments(np.zeros(3, dtype=bool)) == [(0, 3)] and segments(np.zeros(0, dtype=bool)) == []


def test_outcomes_go_only_to_the_policy_segment_that_earned_them() -> None:
    credit = episode_credit(steps([0, 0, 1, 1, 0, 0, 0], success_at_end=True), episode=3, gamma_efficiency=0.5)
    np.testing.assert_array_equal(credit.segment, [0, 0, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(credit.by_policy, [1, 1, 0, 0, 1, 1, 1])
    # the first policy segment ended in a takeover: 0, whatever the episode's outcome
    np.testing.assert_array_equal(credit.viability[:2], [0.0, 0.0])
    assert np.isnan(credit.viability[2:4]).all() and np.isnan(credit.efficiency[:4]).all()  # the person's: no label
    np.testing.assert_array_equal(credit.viability[4:], [1.0, 1.0, 1.0])  # γ_v = 1: it succeeded from here
    np.testing.assert_array_equal(credit.efficiency[4:], [0.25, 0.5, 1.0])  # how soon
    np.testing.assert_array_equal(np.isnan(credit.outcome_next), [1, 0, 1, 1, 1, 1, 0])
    assert credit.outcome_next[1] == 0.0 and credit.outcome_next[6] == 1.0


def test_the_ablation_lets_credit_cross_every_boundary() -> None:
    credit = episode_credit(steps([0, 0, 1, 1, 0], success_at_end=True), episode=0, aware=False)
    np.testing.assert_array_equal(credit.viability, np.ones(5))  # the takeover's steps and the person's too
    assert (credit.segment == 0).all()


def test_a_person_who_finishes_the_task_gives_the_policy_no_success() -> None:
    credit = episode_credit(steps([0, 0, 0, 1, 1], success_at_end=True), episode=0)
    np.testing.assert_array_equal(credit.viability[:3], [0.0, 0.0, 0.0])
    assert np.isnan(credit.efficiency).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40), st.booleans())
def test_no_label_ever_crosses_an_intervention_boundary(person: list[bool], success: bool) -> None:
    credit = episode_credit(steps([int(p) for p in person], success), episode=0)
    runs = segments(np.array(person))
    for k, (start, end) in enumerate(runs):
        labels = credit.viability[start:end]
        if person[start]:
            assert np.isnan(labels).all()
        elif end < len(person):
            assert (labels == 0).all()  # ended in a takeover
        else:
            assert (labels == float(success)).all()
        assert (credit.segment[start:end] == k).all()


def test_an_episode_without_outcomes_is_named() -> None:
    with pytest.raises(CreditError, match=r"episode 7 has no 'next\.success' column"):
        episode_credit({"is_intervention": np.zeros(3, dtype=bool)}, episode=7)


def test_credit_of_episodes_as_the_actor_records_them(tmp_path: Path) -> None:
    features = {"observation.state": (2,), "action": (2,)}
    with DatasetWriter(tmp_path, 10, "toy", features) as writer:
        episodes = [([0, 0, 1, 1, 0, 0], True), ([0, 0, 0, 0], False), ([0, 0, 1, 1, 1], False)]
        for episode, (person, success) in enumerate(episodes):
            for t, p in enumerate(person):
                last = t == len(person) - 1
                writer.add_frame(
                    {"observation.state": np.full(2, t), "action": np.zeros(2)},
                    is_intervention=bool(p), success=last and success, terminated=last and success,
                    truncated=last and not success, policy_version=min(episode, 1),
                )  # fmt: skip
            writer.save_episode("reach")
    ds = load_dataset(tmp_path)
    first, second = (episode_credit(ds.episode(i), episode=i) for i in range(2))
    np.testing.assert_array_equal(first.viability[[0, 1, 4, 5]], [0, 0, 1, 1])
    np.testing.assert_array_equal(second.viability, np.zeros(4))  # a time-out: failure
    # an intervention that never ends: the takeover labels the policy's steps 0, the person's stay unlabelled data
    third = episode_credit(ds.episode(2), episode=2)
    np.testing.assert_array_equal(third.viability[:2], [0, 0])
    assert np.isnan(third.viability[2:]).all() and not third.by_policy[2:].any()
    assert ended_under_intervention(ds, version=1) == [2] and ended_under_intervention(ds, version=0) == []


def test_the_gate_hands_over_from_viability_to_efficiency() -> None:
    w = HabcWeighting(theta=0.6, kappa=20.0)
    g = gate(np.array([0.0, 0.3, 0.6, 0.9, 1.0]), w)
    assert np.all(np.diff(g) > 0) and g[2] == pytest.approx(0.5) and g[0] < 0.01 and g[-1] > 0.99


def test_advantages_reward_steps_that_raise_the_chance_and_weights_keep_the_loss_scale() -> None:
    w = HabcWeighting(theta=0.5, kappa=10.0, beta=0.1, max_weight=5.0, gamma_efficiency=0.9, lam=0.0)
    v_via = np.array([0.2, 0.6, 0.55, 0.9])
    v_eff = np.array([0.5, 0.5, 0.5, 0.8])
    outcome_next = np.array([np.nan, np.nan, np.nan, 1.0])  # the segment succeeded after its last step
    adv = merged_advantage(v_via, v_eff, outcome_next, w)
    g = gate(v_via, w)
    assert adv[0] == pytest.approx((1 - g[0]) * 0.4 + g[0] * (0.9 * 0.5 - 0.5))  # mostly viability: +0.4
    assert adv[0] > 0 and adv[1] < 0  # 0.2 → 0.6 helped; 0.6 → 0.55 (and no sooner) did not
    assert adv[3] == pytest.approx((1 - g[3]) * 0.1 + g[3] * (0.9 * 1.0 - 0.8))
    by_policy = np.array([True, True, False, True])
    weights = transition_weights(adv, by_policy, w)
    assert weights[2] == w.human_weight and weights[by_policy].mean() == pytest.approx(1.0)
    assert weights[0] > weights[3] > weights[1]
    scaled = transition_weights(adv, by_policy, dataclasses.replace(w, policy_weight=0.25))
    np.testing.assert_allclose(scaled[by_policy], 0.25 * weights[by_policy])  # the policy's steps count for less
    assert scaled[2] == w.human_weight
    with pytest.raises(FloatingPointError, match="critics diverged"):
        transition_weights(np.array([np.nan, 0.0]), np.array([True, True]), w)
    with pytest.raises(ValueError, match="out of range"):
        HabcWeighting(policy_weight=-1.0)


def test_lambda_advantages_carry_each_segments_outcome_back_and_stop_at_its_end() -> None:
    values = np.array([0.5, 0.6, 0.7, 0.4, 0.3, 0.2, 0.9])
    # a policy segment taken over (outcome 0 after step 2), the person's steps 3-4, a policy segment that succeeded
    outcome_next = np.array([np.nan, np.nan, 0.0, np.nan, np.nan, np.nan, 1.0])
    one_step = lambda_advantage(values, outcome_next, gamma=1.0, lam=0.0)
    np.testing.assert_allclose(one_step[[0, 1, 2, 5, 6]], [0.1, 0.1, -0.7, 0.7, 0.1])
    monte_carlo = lambda_advantage(values, outcome_next, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(monte_carlo[:3], 0.0 - values[:3])  # every step of the failed segment: 0 − V(s)
    np.testing.assert_allclose(monte_carlo[5:], 1.0 - values[5:])
    discounted = lambda_advantage(values, outcome_next, gamma=0.9, lam=0.5)
    assert discounted[5] == pytest.approx((0.9 * 0.9 - 0.2) + 0.45 * (0.9 * 1.0 - 0.9))


def test_cross_fitted_values_do_not_remember_the_steps_they_judge() -> None:
    """Outcomes that no state predicts: a critic fit on them memorises each label, the cross-fitted values do not."""
    rng = np.random.default_rng(0)
    episode = np.repeat(np.arange(20), 10)
    obs = rng.normal(size=(200, 4))
    targets = np.repeat(rng.integers(0, 2, size=20), 10).astype(np.float64)
    config = CriticConfig(hidden=64, steps=1500, seed=0)
    memorised, _ = cross_fitted_values(obs, targets, episode, folds=1, config=config)
    held_out, _ = cross_fitted_values(obs, targets, episode, folds=5, config=config)
    assert np.abs(memorised - targets).mean() < 0.1  # the advantage target − V would be ~0 for every step
    assert np.abs(held_out - targets).mean() > 0.3  # coin flips stay coin flips: advantages keep their sign


def test_a_critic_learns_the_chance_of_success_from_labelled_steps() -> None:
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, size=(4000, 3))
    chance = 1 / (1 + np.exp(-4 * obs[:, 0]))  # success more likely the larger x
    targets = (rng.uniform(size=4000) < chance).astype(np.float64)
    targets[::5] = np.nan  # a person's steps: no label
    critic = ValueCritic(3, CriticConfig(hidden=32, steps=600, seed=1))
    critic.fit(obs, targets)
    grid = np.zeros((5, 3))
    grid[:, 0] = np.linspace(-1, 1, 5)
    values = critic.values(grid)
    assert np.all(np.diff(values) > 0)
    np.testing.assert_allclose(values, 1 / (1 + np.exp(-4 * grid[:, 0])), atol=0.08)
    with pytest.raises(ValueError, match="no labelled steps"):
        critic.fit(obs[:3], np.full(3, np.nan))
