"""The car's env sim-as-real: `CarEnv` over rclpy to the car bridge in its own process, as it would drive the car.

The scripted driver (reading the env's odometry pose) drives through checkpoints taken from a recorded lap; a car
driven into a wall reports the impact, gets stuck and backs itself out; bad actions brake it. Checkpoints from a
lap that does not close are refused."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from real.car.env import CarEnv, CarEnvConfig
from real.car.ros_car import RosCar
from real.session import sim_bridge_process
from reflexlab.tasks.car_race import constants as C
from reflexlab.tasks.car_race.config import TEST_COURSE
from reflexlab.tasks.car_race.course import Course, lap_checkpoints
from reflexlab.tasks.car_race.expert import CarDriver

COURSE = Course.generate(TEST_COURSE)


@pytest.fixture(scope="module")
def car() -> Iterator[RosCar]:
    with sim_bridge_process("car-race"), RosCar() as car:
        car.wait_for_state(timeout_s=30.0)
        yield car


def test_checkpoints_come_from_a_lap_that_closes() -> None:
    lap = COURSE.point(np.linspace(10.0, 10.0 + COURSE.length, 500))  # one lap from s = 10 m, driven in order
    cps = lap_checkpoints(lap)
    np.testing.assert_allclose(cps[-1], lap[0])
    gaps = np.linalg.norm(np.diff(np.vstack([lap[0], cps]), axis=0), axis=1)
    assert np.all(np.abs(gaps - C.CHECKPOINT_SPACING) < 0.5) and len(cps) == round(COURSE.length / 3.0)
    with pytest.raises(ValueError, match=r"does not close a loop: it ends \d+\.\d m from where it began"):
        lap_checkpoints(lap[:400])
    with pytest.raises(ValueError, match="too short"):
        lap_checkpoints(lap[:20])
    with pytest.raises(ValueError, match=r"non-finite positions \(first at step 7\)"):
        lap_checkpoints(np.where(np.arange(500)[:, None] == 7, np.nan, lap))


def test_the_car_drives_through_its_checkpoints_sim_as_real(car: RosCar) -> None:
    env = CarEnv(car, COURSE.checkpoints(), CarEnvConfig(reset="sim", episode_time_s=6.0))
    obs, _ = env.reset(seed=2)
    driver = CarDriver(np.random.default_rng(2), speed=2.0)
    reached, rewards, done = [], [], False
    while not done:
        state = env._state
        direction, dist = obs[2:4], obs[4]
        np.testing.assert_allclose(np.linalg.norm(direction), 1.0, atol=1e-5)
        assert abs(dist - np.linalg.norm(env.tracker.goal - state.position)) < 1e-4
        action = driver.act(state.pose, state.speed, COURSE).target
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["collision"] and info["source"] == "policy"
        rewards.append(reward)
        if info["checkpoint"] >= 0:
            reached.append(info["checkpoint"])
        done = terminated or truncated
    assert len(reached) >= 2 and np.all(np.diff(reached) == 1), reached  # in order
    assert np.mean(rewards[10:]) > 1.0, "it drives towards its checkpoints"
    assert info["reason"] == "time limit (6 s)"
    env.config = CarEnvConfig(reset="recover")  # nothing went wrong: the next episode starts on the move
    obs, _ = env.reset(seed=3)
    np.testing.assert_allclose(obs[5:7], info["action"], atol=1e-6)  # the rate limit goes on from the last command
    assert obs[0] > 1.0


def test_a_crashed_car_feels_the_wall_gets_stuck_and_backs_out_by_itself(car: RosCar) -> None:
    env = CarEnv(car, COURSE.checkpoints(), CarEnvConfig(reset="sim", episode_time_s=12.0))
    env.reset(seed=3)
    collisions, done = 0, False
    while not done:
        _, _, terminated, truncated, info = env.step(np.array([0.6, -1.0]))  # full right lock: into the wall
        collisions += info["collision"]
        done = terminated or truncated
    assert info["stuck"] and info["reason"].startswith("stuck") and collisions >= 1
    stuck_at = env._state.position
    env.config = CarEnvConfig(reset="recover")  # no person, no simulator: the car backs out by itself
    env.reset(seed=4)
    assert np.linalg.norm(env._state.position - stuck_at) > 0.2
    assert not env._stuck()


def test_bad_actions_brake_the_car_and_are_named(car: RosCar) -> None:
    env = CarEnv(car, COURSE.checkpoints(), CarEnvConfig(reset="sim"))
    env.reset(seed=5)
    for _ in range(10):
        env.step(np.array([0.5, 0.0]))
    _, _, _, _, info = env.step(np.array([np.nan, 0.0]))
    assert info["source"] == "hold" and "not finite" in info["reason"] and info["action"][0] == pytest.approx(0.0)
    _, _, _, _, info = env.step(np.zeros(3))
    assert info["source"] == "hold" and "shape (3,)" in info["reason"]


def test_an_odometry_jump_brakes_and_ends_the_episode_naming_it(car: RosCar) -> None:
    env = CarEnv(car, COURSE.checkpoints(), CarEnvConfig(reset="sim"))
    env.reset(seed=5)
    for _ in range(3):
        env.step(np.array([0.3, 0.0]))
    starts = [np.random.default_rng(s).uniform(0.0, COURSE.length) for s in (5, 11)]
    assert np.linalg.norm(COURSE.point(starts[0]) - COURSE.point(starts[1])) > 2.0  # seed 11 starts far away
    car.request_sim_reset(11)  # the odometry's frame moves under the env, as a driver restart would move it
    _, reward, terminated, truncated, info = env.step(np.array([0.3, 0.0]))
    assert truncated and not terminated and reward == 0.0 and info["source"] == "hold"
    assert info["reason"].startswith("odometry jump: ") and "in one step" in info["reason"], info["reason"]
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.array([0.3, 0.0]))
