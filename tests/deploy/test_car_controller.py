"""CarController (the car policy node's core, no ROS): frames reach the policy as training resizes them, the Twist
follows its action through the car's rate limit, and stale or bad input brakes the car, named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from deploy.car_controller import CarController
from deploy.controller import StateRejected
from real.car.config import load_car_config
from reflexlab.images import FrameResizer
from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.course import Course
from reflexlab.tasks.car_race.spec import twist_of

CONFIG = load_car_config("car")
COURSE = Course.generate(0)


def controller(car_policy) -> CarController:
    return CarController(car_policy.path, CONFIG, COURSE.checkpoints(), seed=0)


def feed(ctl: CarController, t: float, k: int, value: int = 200, speed: float = 1.0) -> None:
    start = COURSE.point(0.5)
    ctl.set_odometry(start, COURSE.heading_at(0.5), speed, k, t)
    ctl.set_imu(0.1, k, t)
    ctl.set_image("front", np.full((64, 64, 3), value, np.uint8), k, t)


def test_the_policy_drives_from_its_frames_through_the_rate_limit(car_policy) -> None:
    ctl = controller(car_policy)
    seen = []
    act = ctl.actor.act
    ctl.actor.act = lambda obs, images: seen.append((obs, images["front"])) or act(obs, images)  # the real actor
    commands = []
    for k in range(4):
        feed(ctl, 0.1 * k, k + 1, value=255)
        commands.append(ctl.step(0.1 * k))
    obs, frame = seen[0]
    assert frame.shape == (64, 64, 3) and np.allclose(obs[0], 1.0) and np.allclose(obs[1], 0.1)
    np.testing.assert_allclose(np.linalg.norm(obs[2:4]), 1.0, atol=1e-6)  # the goal's unit vector
    throttle = 0.3 + 0.4 * (FrameResizer(32, 32)(frame).mean() / 255 - 0.5)  # what TinyCarPolicy makes of it
    assert commands[-1][0] == pytest.approx(twist_of(throttle, ctl._applied[1])[0], abs=0.05 * C.MAX_SPEED)
    assert ctl.policy_steps == 4 and not ctl.brakes
    dim = controller(car_policy)
    for k in range(4):
        feed(dim, 0.1 * k, k + 1, value=0)
        dark = dim.step(0.1 * k)
    assert dark[0] < commands[-1][0] - 0.5, "a dark frame makes this policy slower: the frames reach it"


def test_stale_inputs_brake_and_are_named(car_policy) -> None:
    ctl = controller(car_policy)
    assert ctl.step(0.0) == (0.0, 0.0) and set(ctl.brakes) == {"stale:odometry,imu,front"}  # nothing yet
    for k in range(3):
        feed(ctl, 0.1 * k, k + 1)
        ctl.step(0.1 * k)
    assert ctl.step(0.3)[0] > 0  # 0.1 s after the last inputs: fresh
    t = 0.2 + CONFIG.safety.max_frame_age_s + 0.01
    ctl.set_odometry(COURSE.point(0.5), 0.0, 1.0, 10, t)
    ctl.set_imu(0.0, 10, t)
    speed, _ = ctl.step(t)  # the camera alone has gone quiet
    assert speed == 0.0 and ctl.brakes["stale:front"] == 1
    assert ctl.stale(t) == ["front"] and ctl.ages(t)["front"] == pytest.approx(t - 0.2)


def test_bad_input_is_rejected_by_reason(car_policy) -> None:
    ctl = controller(car_policy)
    with pytest.raises(StateRejected, match=r"\(32, 32, 3\), expected uint8 RGB \(64, 64, 3\) as the car's config"):
        ctl.set_image("front", np.zeros((32, 32, 3), np.uint8), 1, 0.0)
    with pytest.raises(StateRejected, match="not one the policy reads"):
        ctl.set_image("rear", np.zeros((64, 64, 3), np.uint8), 1, 0.0)
    with pytest.raises(StateRejected, match="non-finite"):
        ctl.set_odometry(np.array([math.nan, 0.0]), 0.0, 1.0, 1, 0.0)
    ctl.set_imu(0.0, 5, 0.0)
    with pytest.raises(StateRejected, match="older than the last"):
        ctl.set_imu(0.0, 4, 0.01)
    assert ctl.rejected == {
        "images.front.wrong_size": 1,
        "images.rear.unknown_camera": 1,
        "odometry.non_finite": 1,
        "imu.out_of_order": 1,
    }
    wrong = load_car_config("car").__class__(robot="reflexlab-car", wheelbase=0.32, cameras={})
    with pytest.raises(ValueError, match=r"reads camera\(s\) \['front'\]; the car's config lists \[\]"):
        CarController(car_policy.path, wrong, COURSE.checkpoints())
