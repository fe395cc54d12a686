"""policies.rl.ope: the dynamics ensemble, AM-Q and the reference-advance rule, on synthetic tasks with known answers.

Episodes go through the real dataset writer and `chunk_transitions`, as a learner round would read them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.rl.iql import IqlConfig, IqlCritics
from policies.rl.ope import ActionShift, DynamicsConfig, DynamicsEnsemble, OpeEstimate, action_shift, am_q, compare
from policies.rl.transitions import ChunkTransitions, chunk_transitions
from reflexlab.dataset import DatasetWriter, load_dataset
from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec

DYNAMICS = DynamicsConfig(hidden=64, layers=2, steps=1500, batch_size=128, lr=3e-3)


def spec(obs_dim: int, action_dim: int) -> Spec:
    names = tuple(f"a{i}" for i in range(action_dim))
    task = Spec(
        "toy", "synthetic", (ObsGroup("policy", (ObsTerm("x", obs_dim, "m"),)),), "policy",
        ActionSpec("ee_position", names, 1.0, (0.0,) * action_dim, (-1.0,) * action_dim, (1.0,) * action_dim),
        10.0, 10.0,
    )  # fmt: skip
    return dataclasses.replace(task, observation_horizon=2, action_chunk=3, execution_horizon=2)  # To 2, chunk 2


def linear_system(root: Path) -> ChunkTransitions:
    """s' = A s + B a, a lightly damped rotation driven by random actions; episodes end on the time limit."""
    rng = np.random.default_rng(0)
    angle = 0.3
    a_mat = 0.95 * np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    b_mat = np.array([[0.5, 0.0], [0.0, 0.5], [0.3, -0.3]])
    policy = spec(3, 2)
    with DatasetWriter(root, 10, "toy", {"observation.state": (3,), "action": (2,)}, policy.task_interface()) as w:
        for _ in range(40):
            s = rng.normal(0, 1, 3)
            for t in range(31):
                a = rng.uniform(-1, 1, 2)
                w.add_frame({"observation.state": s, "action": a}, truncated=t == 30)
                s = a_mat @ s + b_mat @ a
            w.save_episode("synthetic")
    return chunk_transitions(load_dataset(root), policy, 0.95)


def test_the_ensemble_learns_a_linear_system_and_keeps_the_best_members(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    data = linear_system(tmp_path / "ds")
    ensemble = DynamicsEnsemble(2, 3, 2, 2, DYNAMICS)
    report = ensemble.fit(data)
    assert report["holdout_window_mse"] < 0.02  # in units of the residual's variance: 1 = predicting the mean change
    holdout = np.array(report["holdout"])
    assert len(holdout) == 7 and sorted(report["elites"]) == sorted(np.argsort(holdout)[:5].tolist())
    prediction = ensemble.predict(torch.as_tensor(data.window[:50]), torch.as_tensor(data.actions[:50]))
    assert prediction.next_window.shape == (5, 50, 2, 3) and (prediction.done < 0.05).all()
    assert prediction.reward.abs().max() < 0.05  # no reward anywhere in the data
    with pytest.raises(ValueError, match="two episodes"):
        DynamicsEnsemble(2, 3, 2, 2, DYNAMICS).fit(data.subset(data.episode == 0))
    error = prediction.next_window.mean(0).numpy() - data.next_window[:50]
    assert np.abs(error).max() < 0.15 * data.next_window.std()


REACH_GOAL, REACH_FAIL, REACH_STEPS, STEP = 1.0, -1.5, 24, 0.2


def reach(root: Path) -> ChunkTransitions:
    """1-D reach: x += a per step; x ≥ 1 succeeds, x ≤ −1.5 fails (both terminal), else timeout after 24 steps.
    Each episode's behaviour drifts with its own bias, forward or backward, so the data covers both ways."""
    rng = np.random.default_rng(0)
    policy = spec(1, 1)
    with DatasetWriter(root, 10, "toy", {"observation.state": (1,), "action": (1,)}, policy.task_interface()) as w:
        for _ in range(120):
            x, bias = rng.uniform(-1.0, 0.6), rng.uniform(-STEP, STEP)
            for t in range(REACH_STEPS):
                a = float(np.clip(bias + rng.normal(0, 0.1), -0.25, 0.25))
                x_next = x + a
                success, failure = x_next >= REACH_GOAL, x_next <= REACH_FAIL
                w.add_frame(
                    {"observation.state": np.array([x]), "action": np.array([a])},
                    success=success, terminated=success or failure,
                    truncated=not (success or failure) and t == REACH_STEPS - 1,
                )  # fmt: skip
                x = x_next
                if success or failure:
                    break
            w.save_episode("synthetic")
    return chunk_transitions(load_dataset(root), policy, 0.95)


def constant(step: float) -> Callable[[np.ndarray], np.ndarray]:
    """A policy that repeats ``step`` whatever it observes."""
    return lambda windows: np.full((len(windows), 2, 1), step, dtype=np.float32)


@pytest.fixture(scope="module")
def reach_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[ChunkTransitions, IqlCritics, DynamicsEnsemble]:
    torch.set_num_threads(1)
    data = reach(tmp_path_factory.mktemp("reach") / "ds")
    critics = IqlCritics(1, 2, 1, IqlConfig(expectile=0.8, gamma=0.95, hidden=64, steps=2000, lr=1e-3))
    critics.fit(data)
    ensemble = DynamicsEnsemble(2, 1, 2, 1, DYNAMICS)
    ensemble.fit(data)
    return data, critics, ensemble


def test_am_q_ranks_the_policy_that_reaches_the_goal_above_the_one_that_walks_away(
    reach_models: tuple[ChunkTransitions, IqlCritics, DynamicsEnsemble],
) -> None:
    data, critics, ensemble = reach_models
    starts = data.window[data.step == 0]
    forward = am_q(constant(STEP), critics, ensemble, starts, horizon=10, seed=3)
    backward = am_q(constant(-STEP), critics, ensemble, starts, horizon=10, seed=3)
    idle = am_q(constant(0.0), critics, ensemble, starts, horizon=10, seed=3)
    assert forward.value > idle.value > backward.value
    assert forward.value - backward.value > 10 * (forward.stderr + backward.stderr)
    assert forward.setup == backward.setup and forward.per_rollout.shape == (len(starts),)
    assert forward.running < idle.running  # forward rollouts reach the goal and end
    assert 0.0 <= forward.disagreement < 0.2
    accepted, reason = compare(forward, backward)
    assert accepted and "accepted" in reason
    assert not compare(backward, forward).accepted
    again = am_q(constant(STEP), critics, ensemble, starts, horizon=10, seed=3)
    np.testing.assert_array_equal(again.per_rollout, forward.per_rollout)  # common random numbers: reproducible
    other_seed = am_q(constant(-STEP), critics, ensemble, starts, horizon=10, seed=4)
    with pytest.raises(ValueError, match="different setups"):
        compare(forward, other_seed)
    with pytest.raises(ValueError, match="shape"):
        am_q(lambda w: np.zeros((len(w), 3, 1)), critics, ensemble, starts, horizon=2)
    with pytest.raises(ValueError, match="non-finite"):
        am_q(lambda w: np.full((len(w), 2, 1), np.nan), critics, ensemble, starts, horizon=2)


def estimate(value: float, per_rollout: tuple[float, ...] = (0.0, 0.0), setup: str = "s") -> OpeEstimate:
    return OpeEstimate(value, 0.0, np.array(per_rollout), 0.0, 1.0, 5, setup)


@pytest.mark.parametrize(
    ("candidate", "reference", "accepted"),
    [
        (1.05, 1.0, True),  # exactly 5 %
        (1.04, 1.0, False),
        (0.5, 1.0, False),
        (1.0, 1.0, False),  # equal: never
        (-0.95, -1.0, True),  # 5 % of |reference| toward and past zero
        (-0.96, -1.0, False),
        (1e-9, 0.0, True),  # a zero reference: any strict improvement
        (0.0, 0.0, False),
        (float("nan"), 1.0, False),
        (2.0, float("inf"), False),
    ],
)
def test_compare_accepts_only_an_improvement_of_five_percent(
    candidate: float, reference: float, accepted: bool
) -> None:
    verdict = compare(estimate(candidate), estimate(reference))
    assert verdict.accepted is accepted
    finite = np.isfinite([candidate, reference]).all()
    expected = "candidate accepted" if accepted else ("candidate rejected" if finite else "non-finite estimate")
    assert verdict.reason.startswith(expected)


def test_compare_refuses_other_setups_and_a_negative_margin() -> None:
    with pytest.raises(ValueError, match="different setups"):
        compare(estimate(2.0, setup="a"), estimate(1.0, setup="b"))
    with pytest.raises(ValueError, match="min_improvement"):
        compare(estimate(2.0), estimate(1.0), min_improvement=-0.1)
    assert compare(estimate(1.0), estimate(1.0 - 1e-12), min_improvement=0.0).accepted


def test_action_shift_is_the_rms_move_in_action_std_per_window() -> None:
    deployed = np.zeros((10, 2, 2))
    candidate = deployed.copy()
    candidate[:9, :, 0] = 0.3  # 9 windows moved 0.3 m in x (std 3 m: 0.1 std; RMS over x and y: 0.1 / sqrt 2)
    candidate[9] = [3.0, 4.0]  # one moved 3 m in x and 4 m in y (1 std in x, 2 in y: RMS sqrt 2.5)
    shift = action_shift(candidate, deployed, np.array([3.0, 2.0]))
    assert shift.mean == pytest.approx((9 * 0.1 / np.sqrt(2) + np.sqrt(2.5)) / 10)
    assert shift.p90 == pytest.approx(np.quantile([0.1 / np.sqrt(2)] * 9 + [np.sqrt(2.5)], 0.9))
    assert action_shift(deployed, deployed, np.ones(2)) == ActionShift(0.0, 0.0)
    with pytest.raises(ValueError, match="do not match"):
        action_shift(candidate[:, :1], deployed, np.ones(2))
    with pytest.raises(ValueError, match="positive"):
        action_shift(candidate, deployed, np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="non-finite"):
        action_shift(np.full_like(deployed, np.nan), deployed, np.ones(2))
