"""The bench's verdict on the issue's bars, from measured rows."""

from __future__ import annotations

import pytest

from reflexlab.cli.bench.distill import select_execution_horizon
from reflexlab.cli.bench.distill_report import bars


def _row(cov: float, succ: float, p50: float, p99: float, ccw: float, both: float) -> dict[str, list[float]]:
    return {
        "mean_max_coverage": [cov],
        "success_rate": [succ],
        "latency_p50_us": [p50],
        "latency_p99_us": [p99],
        "mode_ccw_fraction": [ccw],
        "mode_cw_fraction": [1 - ccw],
        "states_with_both_modes_fraction": [both],
    }


def test_a_good_student_meets_every_bar_and_a_collapsed_slow_one_none() -> None:
    rows = {
        "diffusion@100": _row(0.80, 0.40, 90_000, 95_000, 0.55, 0.95),
        "diffusion@1": _row(0.30, 0.00, 900, 1_000, 0.5, 0.9),
        "consistency@1": _row(0.78, 0.39, 500, 800, 0.52, 0.9),
        "meanflow@1": _row(0.60, 0.10, 4_000, 5_000, 0.9, 0.3),
    }
    got = bars(rows, "diffusion", ("consistency", "meanflow"), (100, 10, 1))
    good = {k: v for k, v in got.items() if k.startswith("consistency")}
    bad = {k: v for k, v in got.items() if k.startswith("meanflow")}
    assert len(good) == 6 and all(good.values()), good
    assert not any(v for k, v in bad.items() if "teacher@1 +" not in k), bad  # all but the gain over teacher@1
    assert bad["meanflow: mean max coverage >= teacher@1 + 0.1"]


def test_modes_are_judged_against_the_teachers_own() -> None:
    rows = {
        "diffusion@100": _row(0.9, 0.7, 90_000, 95_000, 0.65, 0.75),  # commits to one way at a quarter of states
        "diffusion@1": _row(0.3, 0.0, 900, 1_000, 0.5, 0.8),
        "kept@1": _row(0.9, 0.7, 500, 800, 0.66, 0.70),
        "collapsed@1": _row(0.9, 0.7, 500, 800, 0.95, 0.70),  # rarer way only 5 % of the samples
        "fewer@1": _row(0.9, 0.7, 500, 800, 0.6, 0.55),  # both ways at too few states
    }
    got = bars(rows, "diffusion", ("kept", "collapsed", "fewer"), (100, 1))
    assert got["kept: both modes kept"]
    assert not got["collapsed: both modes kept"] and not got["fewer: both modes kept"]


def test_a_teacher_that_never_succeeds_gives_no_ratio_to_meet() -> None:
    rows = {n: _row(0.4, 0.0, 1000, 1000, 0.5, 1.0) for n in ("diffusion@100", "diffusion@1", "consistency@1")}
    got = bars(rows, "diffusion", ("consistency",), (100, 1))
    assert got["consistency: success_rate >= 95% of teacher@100"] is False


def test_ratio_bars_are_judged_on_the_bar_episodes_when_both_have_them() -> None:
    rows = {
        "diffusion@100": {**_row(0.95, 0.92, 90_000, 95_000, 0.65, 0.75), "bar_success_rate": [0.90]},
        "diffusion@1": _row(0.3, 0.0, 900, 1_000, 0.5, 0.8),
        "lucky@1": {**_row(0.95, 0.89, 500, 800, 0.66, 0.7), "bar_success_rate": [0.80]},  # 0.89 on few episodes
        "steady@1": {**_row(0.95, 0.84, 500, 800, 0.66, 0.7), "bar_success_rate": [0.86]},
    }
    got = bars(rows, "diffusion", ("lucky", "steady"), (100, 1))
    assert not got["lucky: success_rate >= 95% of teacher@100"]
    assert got["steady: success_rate >= 95% of teacher@100"]
    assert got["steady: mean_max_coverage >= 95% of teacher@100"]  # no bar episodes for it: the sweep's


def test_a_policy_is_scored_at_its_best_execution_horizon() -> None:
    row = {
        "ta8_mean_max_coverage": [0.87, 0.85],
        "ta8_success_rate": [0.41, 0.45],
        "ta2_mean_max_coverage": [0.94, 0.96],
        "ta2_success_rate": [0.80, 0.84],
        "ta4_mean_max_coverage": [0.95, 0.95],  # more coverage, fewer successes: success decides
        "ta4_success_rate": [0.70, 0.74],
    }
    assert select_execution_horizon(row, (8, 4, 2)) == 2
    assert row["execution_horizon"] == [2.0]
    assert row["mean_max_coverage"] == [0.94, 0.96] and row["success_rate"] == [0.80, 0.84]
    assert row["ta8_success_rate"] == [0.41, 0.45]  # every horizon's scores stay


def test_equal_success_is_decided_by_coverage_and_a_missing_horizon_is_named() -> None:
    row = {"ta8_mean_max_coverage": [0.5], "ta8_success_rate": [0.0], "ta2_mean_max_coverage": [0.6],
           "ta2_success_rate": [0.0]}  # fmt: skip
    assert select_execution_horizon(row, (8, 2)) == 2
    with pytest.raises(KeyError, match="ta4_success_rate"):
        select_execution_horizon(row, (8, 4))
