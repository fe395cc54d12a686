"""`car-race`: procedural courses (geometry checked against its definitions), the MuJoCo car (steering, throttle,
brakes, walls), the events FastRLAP needs (collisions, stuck, checkpoints, laps) and the first-person camera."""

from __future__ import annotations

import numpy as np
import pytest

from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.config import PRIOR_COURSES, TEST_COURSE, CarRaceConfig
from reflexlab.tasks.car_race.course import Course, CourseShape
from reflexlab.tasks.car_race.expert import CarDriver
from sim.tasks.car_race.env import CarRaceEnv


@pytest.fixture(scope="module")
def env() -> CarRaceEnv:
    return CarRaceEnv(1, 400, CarRaceConfig(course=TEST_COURSE, odometry_noise_std=0.0))


def test_courses_are_drawn_per_seed_and_raceable() -> None:
    shape = CourseShape()
    courses = [Course.generate(seed) for seed in (TEST_COURSE, *PRIOR_COURSES)]
    for c in courses:
        assert c.problem(shape) is None and 25 < c.length < 70, (c.seed, c.length)
        assert np.all(np.abs(np.diff(c.s)) < 0.11), "points every 0.1 m"
    np.testing.assert_array_equal(Course.generate(3).centre, courses[3].centre)  # same seed, same course
    starts = np.array([c.centre[len(c.centre) // 3] for c in courses])
    assert len(np.unique(starts.round(1), axis=0)) == len(courses), "every course differs"
    with pytest.raises(ValueError, match=">= 0"):
        Course.generate(-1)


def test_projection_and_walls_follow_the_centreline() -> None:
    c = Course.generate(TEST_COURSE)
    rng = np.random.default_rng(0)
    for s, d in zip(rng.uniform(0, c.length, 20), rng.uniform(-0.6, 0.6, 20), strict=True):
        h = c.heading_at(s)
        p = c.point(s) + d * np.array([-np.sin(h), np.cos(h)])
        got_s, got_d = c.project(p)
        assert abs((got_s - s + c.length / 2) % c.length - c.length / 2) < 0.05 and abs(got_d - d) < 0.02
    walls = c.walls()
    offset = c.width / 2 + C.WALL_THICKNESS / 2
    for side, sign in ((0, 1.0), (1, -1.0)):  # left (inner) walls are left of the direction of travel
        lateral = np.array([c.project(xy)[1] for xy in walls[side, :, :2]])
        np.testing.assert_allclose(lateral, sign * offset, atol=0.03)
    ends = walls[..., :2] + walls[..., 2:3] * np.stack([np.cos(walls[..., 3]), np.sin(walls[..., 3])], axis=-1)
    starts_next = np.roll(
        walls[..., :2] - walls[..., 2:3] * np.stack([np.cos(walls[..., 3]), np.sin(walls[..., 3])], -1), -1, axis=1
    )
    assert np.linalg.norm(ends - starts_next, axis=-1).max() < C.WALL_THICKNESS, "the boxes leave no gaps"
    cps = c.checkpoints()
    gaps = np.linalg.norm(np.diff(np.vstack([c.point(0.0), cps]), axis=0), axis=1)
    assert np.all(np.abs(gaps - C.CHECKPOINT_SPACING) < 0.6) and np.allclose(cps[-1], c.point(0.0))


def test_the_car_steers_left_brakes_and_reverses(env: CarRaceEnv) -> None:
    env.reset([5])
    for _ in range(8):
        _, _, _, info = env.step(np.array([[0.3, 0.2]]))  # positive steering: left
        assert not info["collision"][0]
    assert env.yaw_rate()[0] > 0.2 and 0.9 < env.ground_speed()[0] < 1.3
    for _ in range(15):
        env.step(np.array([[0.0, 0.0]]))  # throttle 0: the wheel servos brake
    assert abs(env.ground_speed()[0]) < 0.05
    for _ in range(10):
        env.step(np.array([[-0.3, 0.0]]))
    assert env.ground_speed()[0] < -0.5


def test_commands_change_at_most_the_action_rate(env: CarRaceEnv) -> None:
    obs = env.reset([6])
    assert (obs[0, 5:] == 0).all()
    obs, *_ = env.step(np.array([[1.0, -1.0]]))
    np.testing.assert_allclose(obs[0, 5:], [0.5, -0.5])  # 5 per second at 10 Hz
    obs, *_ = env.step(np.array([[1.0, -1.0]]))
    np.testing.assert_allclose(obs[0, 5:], [1.0, -1.0])
    with pytest.raises(ValueError, match="non-finite"):
        env.step(np.array([[np.nan, 0.0]]))


def test_walls_are_felt_and_a_car_against_one_is_stuck(env: CarRaceEnv) -> None:
    env.reset([7])
    hits, stuck = [], []
    for _ in range(60):
        _, _, _, info = env.step(np.array([[0.5, -1.0]]))  # full right lock: into the outer wall
        hits.append(info["collision"][0])
        stuck.append(info["stuck"][0])
    first = hits.index(True)
    assert first < 20 and not any(stuck[: first + 1])
    assert any(stuck) and stuck.index(True) >= C.STUCK_STEPS - 1, "stuck needs STUCK_STEPS positions"
    _, lateral = env.courses()[0].project(env.pose()[0, :2])
    assert lateral < -C.TRACK_WIDTH / 2 + 0.35, "it stopped at the right-hand wall, not through it"


def test_the_scripted_driver_laps_without_touching_a_wall(env: CarRaceEnv) -> None:
    obs = env.reset([8])
    driver = CarDriver(np.random.default_rng(8), env.config, speed=2.5)
    collisions, slip = 0, []
    first = env.checkpoint()[0].copy()
    goal = obs[0, 2:5]
    assert np.isclose(np.linalg.norm(goal[:2]), 1.0) and abs(goal[2] - np.linalg.norm(first - env.pose()[0, :2])) < 1e-4
    while not env.done[0]:
        obs, progress, _, info = env.step(driver.act(*env.expert_inputs()[0]).target[None])
        collisions += int(info["collision"][0])
        slip.append(obs[0, 0] - env.ground_speed()[0])
    assert np.median(np.abs(slip)) < 0.05 and np.abs(slip).max() < 0.5, "the odometry reads the speed (wheels slip)"
    assert env.succeeded[0] and collisions == 0 and progress[0] > 0.95
    laps = env.lap_steps(0)
    course = env.courses()[0]
    assert len(laps) == 1 and course.length / 2.5 < laps[0] * C.CONTROL_DT < course.length / 1.5, laps
    assert env.episode_metrics()["success"][0]


def test_episodes_run_on_their_courses(env: CarRaceEnv) -> None:
    prior = CarRaceEnv(2, 10)
    prior.reset([3, 4])
    assert [c.seed for c in prior.courses()] == [PRIOR_COURSES[3], PRIOR_COURSES[4]]
    state = prior.environment_state()
    assert state.shape == (2, 4) and state[:, 3].tolist() == [PRIOR_COURSES[3], PRIOR_COURSES[4]]
    again = CarRaceEnv(1, 10)
    again.reset([4])
    np.testing.assert_allclose(again.pose()[0], prior.pose()[1])  # same seed, same course and start
    env.reset([3])
    assert env.courses()[0].seed == TEST_COURSE


def test_the_front_camera_looks_ahead_with_the_inner_wall_on_the_left(env: CarRaceEnv) -> None:
    env.reset([9])
    frame = env.render(C.CAMERA, 48, 64)[0].astype(int)
    assert frame.shape == (48, 64, 3)
    r, b = frame[..., 0] + 1, frame[..., 2] + 1
    blue = (b > 3 * r).mean(axis=0)  # the left wall's colour (the sky is far less blue), per image column
    red = (r > 3 * b).mean(axis=0)
    assert blue[:32].sum() > 3 * blue[32:].sum() and red[32:].sum() > 3 * red[:32].sum(), (blue, red)
    before = env.render(C.CAMERA, 48, 64)[0]
    for _ in range(5):
        env.step(np.array([[0.4, 0.0]]))
    assert np.abs(env.render(C.CAMERA, 48, 64)[0].astype(int) - before).mean() > 2, "the view moves with the car"
    assert env.render("top", 64, 64).shape == (1, 64, 64, 3)
