"""A policy-like stream for 30 s (20 Hz Cartesian figure-eight) against franka-sim with enforcement on."""

from __future__ import annotations

import json

from real.franka.bench import bench_franka, print_table
from tests.real.franka.conftest import only_recovered_stall_reflexes

# Above this much hypervisor steal during the run, franka-sim itself cannot publish at 1 kHz (measured:
# 14–37 % steal → 530–590 Hz; ≈0 % → 980–998 Hz), so the 900 Hz bar is not the driver's to meet.
STEAL_FREE_PERCENT = 5.0


def test_policy_stream_holds_1khz_without_reflexes(sim, record_property, capsys) -> None:
    del sim  # the fixture only skips when franka-sim or root is missing; the bench runs its own
    m = bench_franka(duration_s=30.0)
    print_table(m)
    report = capsys.readouterr().out + json.dumps(m)
    with capsys.disabled():
        print("\n" + report)
    for k in ("loop_rate_hz_mean", "cycle_time_p99_us", "command_success_rate_min", "command_success_rate_mean"):
        record_property(k, m[k])
    assert m["targets"] >= 0.9 * 30 * 20 and m["workspace_clips"] == 0, report
    if m["cpu_steal_percent"] < STEAL_FREE_PERCENT:
        # the machine delivered its CPUs: the loop must hold (close to) 1 kHz, without a single reflex
        assert m["reflexes"] == 0 and m["last_error"] is None, report
        assert m["loop_rate_hz_mean"] >= 900.0, report
        assert m["command_success_rate_mean"] >= 0.95 and m["command_success_rate_min"] >= 0.5, report
        assert m["tracking_error_mm_mean"] < 20.0, report
    else:
        # franka-sim runs on the same stolen vCPUs (a real FR3 would not), so the rate is the host's (39 % steal
        # measured 360 Hz); the driver must still degrade gracefully: most commands in time, the arm on its path,
        # and the only reflex allowed is the one a real FR3 also raises when its client stalls ≥ 20 ms, recovered
        assert only_recovered_stall_reflexes(m), report
        assert m["command_success_rate_mean"] >= 0.8, report
        assert m["tracking_error_mm_mean"] < 80.0, report
