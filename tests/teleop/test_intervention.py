"""End to end: recorded SpaceMouse reports → frames → arbiter → the action a real env would send."""

from __future__ import annotations

import numpy as np

from teleop.arbiter import InterventionArbiter
from teleop.config import ArbiterConfig, FrameConfig
from teleop.devices.config import SpaceMouseConfig
from teleop.devices.spacemouse import SpaceMouse
from teleop.frames import FrameMapper
from teleop.intervention import DeviceIntervention
from tests.teleop.hid_replay import HidReplay, load_recordings

DT = 0.1


def test_push_forward_facing_robot_moves_ee_target_toward_minus_x_then_holds_on_unplug():
    model, reports = load_recordings()["compact_unplug"]  # a push forward, then the cable is pulled
    hid = HidReplay(model, reports[:1])
    mouse = SpaceMouse(SpaceMouseConfig(model=model), hid=hid)
    mouse.open()
    frames = FrameMapper(FrameConfig(operator="facing_robot", max_linear_speed=0.1))

    def teleop_action(reading, ee_state):  # EE position target += base-frame twist · dt
        position, quat = ee_state
        return position + frames.twist(reading.twist, quat)[:3] * DT

    hook = DeviceIntervention(mouse, InterventionArbiter(ArbiterConfig(engage="motion")), teleop_action)
    ee = (np.array([0.5, 0.0, 0.3]), np.array([0.0, 1.0, 0.0, 0.0]))
    step = hook.decide(np.array([0.6, 0.1, 0.3]), ee[0], ee)
    assert step.source == "teleop" and step.is_intervention
    np.testing.assert_allclose(step.action, [0.49, 0.0, 0.3], atol=1e-12)
    hid.feed(reports[1:])
    step = hook.decide(np.array([0.6, 0.1, 0.3]), ee[0], ee)
    assert step.source == "hold" and step.reason.startswith("teleop device disconnected: SpaceMouse")
    np.testing.assert_array_equal(step.action, ee[0])
