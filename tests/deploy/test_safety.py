"""The safety filter never emits a non-finite, out-of-limit or too-fast command, whatever it is fed."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from deploy.safety import SafetyFilter, SafetyLimits
from sim.registry import get_task

SPEC = get_task("quadruped-walk").spec()
LIMITS = SafetyLimits.from_spec(SPEC)
RATE = 50.0
HOME = np.asarray(SPEC.action.offset)


def make(mode: str = "hold") -> SafetyFilter:
    f = SafetyFilter(LIMITS, RATE, stale_after_periods=3, stale_mode=mode)  # type: ignore[arg-type]
    f.reset(HOME)
    return f


anything = st.one_of(
    st.none(),
    arrays(np.float64, st.integers(0, 14), elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
    arrays(np.float64, 12, elements=st.floats(-1e9, 1e9)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(anything, st.floats(allow_nan=True, allow_infinity=True)), min_size=1, max_size=40))
def test_output_is_always_finite_in_limits_and_rate_limited(feed) -> None:
    f = make()
    last = f(HOME, 0.0)
    for target, age in feed:
        out = f(target, age)
        assert out.shape == (12,) and np.isfinite(out).all()
        assert (out >= f.lower).all() and (out <= f.upper).all()
        assert np.abs(out - last).max() <= f.max_step + 1e-12
        last = out


def test_each_intervention_is_counted_by_kind() -> None:
    f = make()
    bad = HOME.copy()
    bad[3] = math.nan
    f(bad, 0.0)
    f(np.zeros(11), 0.0)
    f(None, 0.0)
    f(HOME, age := 1.0)
    assert age > f.stale_after_s
    far = HOME + 10.0
    f(far, 0.0)
    assert f.interventions == {
        "non_finite": 1,
        "wrong_shape": 1,
        "missing_target": 1,
        "stale_state": 1,
        "position_limit": 1,
        "rate_limit": 1,
    }


def test_hold_keeps_the_last_safe_command_and_damp_follows_the_robot() -> None:
    hold, damp = make("hold"), make("damp")
    measured = HOME + 0.05
    nan = np.full(12, np.nan)
    np.testing.assert_array_equal(hold(nan, 0.0, measured), HOME)
    np.testing.assert_allclose(damp(nan, 0.0, measured), measured)
    np.testing.assert_array_equal(hold(HOME + 0.01, 5.0, measured), HOME)  # stale: ignore the policy
    np.testing.assert_allclose(damp(HOME + 0.01, 5.0, measured), measured)


def test_rate_limit_reaches_a_far_target_over_several_periods() -> None:
    f = make()
    target = np.clip(HOME + 1.0, f.lower, f.upper)
    steps = 0
    while not np.allclose(f(target, 0.0), target):
        steps += 1
        assert steps < 100
    assert steps >= math.floor(np.abs(target - HOME).max() / f.max_step) - 1


def test_misconfiguration_is_refused() -> None:
    with pytest.raises(ValueError, match="lower limit exceeds"):
        SafetyLimits(("a",), (1.0,), (0.0,), 1.0)
    with pytest.raises(ValueError, match="max_rate"):
        SafetyLimits(("a",), (0.0,), (1.0,), 0.0)
    with pytest.raises(RuntimeError, match="reset"):
        SafetyFilter(LIMITS, RATE)(HOME, 0.0)
    with pytest.raises(ValueError, match="12 finite joint positions"):
        SafetyFilter(LIMITS, RATE).reset(np.full(12, np.nan))
