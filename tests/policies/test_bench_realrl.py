"""`reflexlab bench realrl --quick`: every method and stage runs through the real actor/learner code on both tasks.

CI-sized (a few optimiser steps, 3 s episodes), so the numbers mean nothing; what is checked is that the bench runs
what the issue names on one budget and reports it: each method's rounds collect exactly the episodes they ask for
(the paced actor), every policy is evaluated on the same seeds, RL-100 reports its OPE verdicts and its head's
latency, the task's bars are decided, and the plot is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def bench(tmp_path: Path, *args: str) -> dict:
    command = [sys.executable, "-m", "reflexlab.cli", "bench", "realrl", "--quick", "--json", "--train-seeds", "0"]
    command += ["--work-dir", str(tmp_path / "work"), "--out-dir", str(tmp_path / "out"), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(900)
def test_push_t_runs_every_method_on_one_budget(tmp_path: Path) -> None:
    metrics = bench(tmp_path, "--task", "panda-push-t")
    policies, rounds = metrics["policies"], metrics["rounds"]
    wanted = {"sft", "sft-longer", "awbc", "habc", "habc-unaware", "select", "select-head", "rl100-online"}
    assert wanted | {"rl100-head", "rl100-random-online", "rl100-random-head"} <= set(policies)
    for name, p in policies.items():
        (run,) = p["per_seed"]
        assert 0.0 <= run["success"] <= 1.0 and run["sampling_steps"] == (1 if name.endswith("-head") else 2)
    assert policies["rl100-head"]["latency_p99_us"] > 0 and policies["select-head"]["latency_p99_us"] > 0
    for method in ("awbc", "habc", "habc-unaware"):
        (run,) = rounds[method]["per_seed"]
        assert run["episodes_per_round"] == [2, 2] and run["verdicts"] == ["deployed", "final"]  # paced: no more
        assert 0 < run["robot_time_h"] <= 4 * 3.0 / 3600  # 4 episodes of at most 3 s
    (select,) = rounds["select"]["per_seed"]  # its round, then the head's: each version ran its 2 episodes
    assert select["episodes_per_round"] == [2, 2, 2] and select["verdicts"] == ["deployed", "deployed", "final"]
    (rl100,) = rounds["rl100"]["per_seed"]
    assert rl100["verdicts"][0] in ("deployed", "kept") and rl100["verdicts"][-1] == "final"
    checks = rl100["ope_accepted"] + rl100["ope_rejected"]  # one offline round, two OPE checks, unless its PPO
    assert checks == 2 or (checks < 2 and rl100["rounds_stopped_at_trust_region"] >= 1)  # stopped at the edge
    (control,) = rounds["rl100-random"]["per_seed"]  # the control ran the same rounds on the same episode seeds
    assert control["episodes_per_round"] == rl100["episodes_per_round"]
    gap = metrics["controls"]["rl100_online_minus_random_control"]["per_seed"]
    assert gap == [policies["rl100-online"]["success_mean"] - policies["rl100-random-online"]["success_mean"]]
    longer = metrics["controls"]["habc_minus_sft_longer"]["per_seed"]  # the imitation baseline, no robot time
    assert longer == [policies["habc"]["success_mean"] - policies["sft-longer"]["success_mean"]]
    trained = json.loads((tmp_path / "work" / "panda-push-t" / "seed0" / "sft-longer" / "sft_longer.json").read_text())
    assert trained["steps"] == 20 and trained["checkpoint"] == policies["sft-longer"]["per_seed"][0]["checkpoint"]
    assert "sft-longer" not in rounds
    assert {"rl100_success_ge_0.98", "rl100_robot_time_le_2h", "head_p99_le_1ms"} <= set(metrics["bars"])
    assert {"select_head_success_ge_0.97x_multistep", "select_head_p99_le_1ms"} <= set(metrics["bars"])
    assert all(isinstance(b["pass"], bool) for b in metrics["bars"].values())
    assert Path(metrics["plot"]).stat().st_size > 0
    assert json.loads((tmp_path / "out" / "realrl_panda-push-t.json").read_text())["bars"] == metrics["bars"]


@pytest.mark.timeout(600)
def test_peg_insert_decides_the_habc_bars(tmp_path: Path) -> None:
    methods = ("habc", "habc-unaware", "awbc", "habc-select", "select")
    metrics = bench(tmp_path, "--task", "panda-peg-insert", "--methods", *methods)
    assert set(metrics["policies"]) == {"sft", *methods, "select-head"}
    bars = metrics["bars"]
    assert {"habc_minus_sft_ge_0.30", "habc_above_awbc", "unaware_ablation_worse", "habc_robot_time_le_2h"} <= set(bars)
    assert {"habc_select_minus_sft_ge_0.30", "select_minus_sft_ge_0.30"} <= set(bars)
    assert "habc_interventions_falling" in bars and bars["habc_robot_time_le_2h"]["pass"] is True
    records = sorted((tmp_path / "work" / "panda-peg-insert" / "seed0" / "eval").glob("*.json"))
    assert sorted(r.stem for r in records) == sorted(metrics["policies"])
    written = [r.stat().st_mtime_ns for r in records]
    again = bench(tmp_path, "--task", "panda-peg-insert", "--methods", *methods)  # reused; the head's latency re-timed
    assert [r.stat().st_mtime_ns for r in records] == written
    assert {n: p["success_mean"] for n, p in again["policies"].items()} == {
        n: p["success_mean"] for n, p in metrics["policies"].items()
    }


def test_bars_judge_the_numbers_and_serialise() -> None:
    from reflexlab.cli.bench.realrl_report import bars

    def policy(success: float, tts: float | None = 10.0) -> dict:
        return {"success_mean": success, "time_to_success_s_mean": tts}

    run = {"success_per_round": [0.8, 0.2, 0.3], "episodes_per_round": [10, 10, 10]}
    rounds = {"rl100": {"robot_time_h_mean": 0.3, "per_seed": [run]}}
    policies = {
        "sft": policy(0.5),
        "rl100-online": policy(0.99, 7.0),
        "rl100-head": policy(0.97) | {"latency_p99_us": 900.0},
        "select": policy(0.8),
        "select-head": policy(0.7) | {"latency_p99_us": 1200.0},
    }
    got = json.loads(json.dumps(bars("panda-push-t", policies, rounds)))  # numpy scalars would not serialise
    assert got["rl100_success_ge_0.98"] == {"value": 0.99, "pass": True}
    assert got["rl100_time_to_success_le_0.8x_sft"]["pass"] is True  # 7 s vs 10 s
    assert got["head_success_ge_0.97x_multistep"]["pass"] is True and got["head_p99_le_1ms"]["pass"] is True
    assert got["select_head_success_ge_0.97x_multistep"] == {"value": pytest.approx(0.875), "head": 0.7, "pass": False}
    assert got["select_head_p99_le_1ms"] == {"value_us": 1200.0, "pass": False}
    drop = got["rl100_no_accepted_round_worse_by_1se"]  # 0.8 → 0.2 over 10 episodes: 4.7 standard errors
    assert drop["pass"] is False and abs(drop["worst_drop_in_se"] - 0.6 / (0.16 / 10) ** 0.5) < 1e-9


def test_the_control_gap_is_paired_per_seed_and_left_out_where_a_stage_deployed_nothing() -> None:
    from reflexlab.cli.bench.realrl_report import controls

    def seed(method: float, control: float, longer: float | None = None) -> dict:
        got = {"rl100-online": {"success": method}, "rl100-random-online": {"success": control}}
        return {"policies": got | ({} if longer is None else {"sft-longer": {"success": longer}})}

    got = controls({0: seed(0.8, 0.7), 1: seed(0.6, 0.7)} | {2: seed(0.75, 0.75)})
    assert set(got) == {"rl100_online_minus_random_control"}  # no offline or head policy, no sft-longer on any seed
    gap = got["rl100_online_minus_random_control"]
    assert gap["per_seed"] == pytest.approx([0.1, -0.1, 0.0]) and gap["mean"] == pytest.approx(0.0)
    assert gap["std"] == pytest.approx(0.1)
    got = controls({0: seed(0.8, 0.7, 0.85), 1: seed(0.6, 0.7, 0.5)})
    assert got["rl100_online_minus_sft_longer"]["per_seed"] == pytest.approx([-0.05, 0.1])
    assert got["rl100_random_online_minus_sft_longer"]["per_seed"] == pytest.approx([-0.15, 0.2])
    assert "rl100_online_minus_sft_longer" not in controls({0: seed(0.8, 0.7, 0.85), 1: seed(0.6, 0.7)})


def test_the_budgets_rl100_options_reach_the_rounds_config(tmp_path: Path) -> None:
    """What `bench realrl` sets for RL-100 is what its rounds run with (the same `reflexlab rl rl100` command)."""
    import dataclasses

    from reflexlab.cli.bench.realrl import RealRlBudget, _command

    budget = dataclasses.replace(RealRlBudget.quick(), progress_weight=0.5, ppo_bc_weight=0.25)
    for method, advantage in (("rl100", "critics"), ("rl100-random", "random")):
        command = _command(method, "panda-push-t", tmp_path / "demos", tmp_path / method, tmp_path / "sft", 2, budget)
        update, rounds = command._update()
        config = update.config
        assert (config.progress_weight, config.online_ppo.bc_weight, config.advantage) == (0.5, 0.25, advantage)
        assert rounds == budget.offline_rounds + budget.online_rounds + 1 and config.seed == 2000
