"""The learning bars of the foundation issue, measured end to end (slow: 10 and 30 minutes).

Each trains through the CLI on a wall-clock budget, then evaluates 32 seeded 20 s episodes with
`reflexlab play`'s code path, and checks tracking, falls and gait quality together: a shuffling
gait fails whatever its tracking error. The fast run is then walked over ROS 2 (sim bridge +
policy node, real time) and must match in-process play within 10%.
"""

from pathlib import Path

import pytest

from policies.evaluate import EvalOptions, evaluate_run
from reflexlab.cli.train import train

MAX_SLIP_M_S = 0.1
MAX_STEPPING_HZ = 4.0


def _check_gait(s: dict) -> None:
    assert s["slip_m_s"] <= MAX_SLIP_M_S, s
    assert 0.5 <= s["stepping_hz"] <= MAX_STEPPING_HZ, s


@pytest.mark.slow
def test_fast_bar_forward_walk_in_10_minutes(tmp_path: Path) -> None:
    run = tmp_path / "fast"
    train(run_dir=run, profile="fast", num_envs=256, iterations=100_000, time_budget_s=600)
    s = evaluate_run(run, EvalOptions(episodes=32, command=(0.5, 0.0, 0.0)), progress=False)["summary"]
    assert s["lin_vel_error_m_s"] <= 0.1, s
    assert s["no_fall_rate"] >= 0.95, s
    _check_gait(s)
    # the same policy, exported, served by the ROS 2 policy node on the MuJoCo sim bridge
    from reflexlab.cli.bench.sim2sim import compare_with_play

    c = compare_with_play(run, command=(0.5, 0.0, 0.0), seconds=10.0, episodes=8)
    assert not c["ros_fell"], c
    assert 0.9 <= c["distance_ratio"] <= 1.1, c
    assert abs(c["ros_mean_speed_m_s"] / c["play_mean_speed_m_s"] - 1) <= 0.1, c
    assert abs(c["ros_lin_vel_error_m_s"] / c["play_lin_vel_error_m_s"] - 1) <= 0.1, c


@pytest.mark.slow
def test_full_bar_omnidirectional_with_randomisation_in_30_minutes(tmp_path: Path) -> None:
    run = tmp_path / "full"
    train(run_dir=run, profile="full", num_envs=256, iterations=100_000, time_budget_s=1800)
    s = evaluate_run(run, EvalOptions(episodes=32, command_map=True), progress=False)["summary"]
    assert s["lin_vel_error_m_s"] <= 0.15, s
    assert s["yaw_rate_error_rad_s"] <= 0.2, s
    assert s["no_fall_rate"] >= 0.95, s
    _check_gait(s)
