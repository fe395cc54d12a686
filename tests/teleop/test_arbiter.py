"""InterventionArbiter: takeover, handback without a jump, and holding when the device drops."""

from __future__ import annotations

import numpy as np
import pytest

from teleop.arbiter import InterventionArbiter
from teleop.config import ArbiterConfig
from teleop.devices.base import TeleopReading, disconnected

POLICY = np.array([1.0, 1.0])
HOLD = np.array([0.0, 0.0])


def reading(*buttons: str, twist=(0, 0, 0, 0, 0, 0)) -> TeleopReading:
    return TeleopReading(np.array(twist, dtype=float), {b: True for b in buttons})


def teleop_action(r: TeleopReading) -> np.ndarray:
    """Stand-in for frames + "target += twist·dt": the teleop action is -1 in both dimensions."""
    return np.array([-1.0, -1.0])


def run(arb: InterventionArbiter, readings: list[TeleopReading]):
    return [arb.step(POLICY, r, HOLD, teleop_action) for r in readings]


def test_deadman_takeover_and_blended_handback():
    arb = InterventionArbiter(ArbiterConfig(engage="deadman", handback_steps=4))
    steps = run(arb, [reading(), reading("deadman"), reading("deadman"), *[reading()] * 5])
    assert [s.source for s in steps] == ["policy", "teleop", "teleop", *["handback"] * 4, "policy"]
    assert [s.is_intervention for s in steps] == [False, True, True, True, True, True, True, False]
    np.testing.assert_allclose([s.action[0] for s in steps], [1, -1, -1, -0.5, 0, 0.5, 1, 1])
    assert max(np.abs(np.diff([s.action[0] for s in steps[2:]]))) <= 0.5  # no jump: one blend step at most
    c = arb.counts
    assert (c.interventions, c.intervention_steps, c.teleop_steps, c.handback_steps) == (1, 6, 2, 4)


def test_regrab_during_handback_is_immediate():
    arb = InterventionArbiter(ArbiterConfig(handback_steps=10))
    steps = run(arb, [reading("deadman"), reading(), reading("deadman")])
    assert [s.source for s in steps] == ["teleop", "handback", "teleop"]
    assert arb.counts.interventions == 2


def test_toggle_is_edge_triggered():
    arb = InterventionArbiter(ArbiterConfig(engage="toggle", handback_steps=0))
    held = [reading("toggle"), reading("toggle"), reading(), reading(), reading("toggle"), reading()]
    assert [s.source for s in run(arb, held)] == ["teleop", "teleop", "teleop", "teleop", "policy", "policy"]


def test_motion_engages_and_releases_after_idle_steps():
    arb = InterventionArbiter(ArbiterConfig(engage="motion", motion_threshold=0.1, motion_release_steps=2))
    moving = reading(twist=(0, 0.5, 0, 0, 0, 0))
    steps = run(arb, [reading(twist=(0, 0.05, 0, 0, 0, 0)), moving, reading(), reading(), reading()])
    assert [s.source for s in steps] == ["policy", "teleop", "teleop", "handback", "handback"]


def test_unplug_mid_intervention_holds_until_reengaged():
    arb = InterventionArbiter(ArbiterConfig(handback_steps=2))
    gone = disconnected("gamepad 'Xbox' removed (SDL JOYDEVICEREMOVED)", 0.0)
    steps = run(arb, [reading("deadman"), gone, gone, reading(), reading(), reading("deadman"), reading()])
    assert [s.source for s in steps] == ["teleop", "hold", "hold", "hold", "hold", "teleop", "handback"]
    for s in steps[1:5]:
        np.testing.assert_array_equal(s.action, HOLD)
        assert s.is_intervention and s.reason.startswith("teleop device disconnected: gamepad 'Xbox' removed")
    assert "holding until the operator takes over" in steps[3].reason
    assert arb.counts.disconnects == 1 and arb.counts.hold_steps == 4 and arb.counts.interventions == 2


def test_unplug_during_handback_also_holds_and_acknowledge_hands_back():
    arb = InterventionArbiter(ArbiterConfig(handback_steps=2))
    gone = disconnected("unplugged", 0.0)
    steps = run(arb, [reading("deadman"), reading(), gone])
    assert [s.source for s in steps] == ["teleop", "handback", "hold"]
    arb.acknowledge()
    steps = run(arb, [gone, gone, gone])
    assert [s.source for s in steps] == ["handback", "handback", "policy"]
    np.testing.assert_allclose(steps[0].action, 0.5 * HOLD + 0.5 * POLICY)  # blends from the hold
    assert all("teleop device disconnected: unplugged" in s.reason for s in steps)
    assert not steps[2].is_intervention


def test_unplug_under_policy_continues_and_says_so_or_holds_if_configured():
    gone = disconnected("unplugged", 0.0)
    step = run(InterventionArbiter(), [gone])[0]
    assert step.source == "policy" and "nobody can intervene" in step.reason
    strict = InterventionArbiter(ArbiterConfig(hold_on_disconnect_under_policy=True))
    assert [s.source for s in run(strict, [gone, reading()])] == ["hold", "hold"]


def test_teleop_action_is_only_computed_while_the_person_drives():
    calls = []
    arb = InterventionArbiter()
    arb.step(POLICY, reading(), HOLD, lambda r: calls.append(r) or HOLD)
    assert not calls


def test_reset_clears_counts_but_not_a_hold():
    arb = InterventionArbiter()
    run(arb, [reading("deadman"), disconnected("x", 0.0)])
    arb.reset()
    assert arb.counts.interventions == 0 and arb.state == "hold"
    assert run(arb, [reading()])[0].source == "hold"


@pytest.mark.parametrize("engage", ["deadman", "toggle", "motion"])
def test_disconnected_reading_never_engages(engage):
    arb = InterventionArbiter(ArbiterConfig(engage=engage))
    assert run(arb, [disconnected("x", 0.0)])[0].source == "policy"
