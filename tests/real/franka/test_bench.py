"""A policy-like stream for 30 s (20 Hz Cartesian figure-eight) against franka-sim with enforcement on."""

from __future__ import annotations

import json

from real.franka.bench import bench_franka, print_table
from tests.real.franka.conftest import only_recovered_stall_reflexes

# Above this much hypervisor steal during the run, franka-sim itself cannot publish at 1 kHz (measured:
# 14–37 % steal → 530–590 Hz; ≈0 % → 980–998 Hz), so keeping pace with it is not the driver's to do.
STEAL_FREE_PERCENT = 5.0
# The loop answers the states franka-sim publishes; how many that is per second is the host's. Measured on
# one 2-vCPU machine: 860–880 Hz when idle, 988 Hz with a training job beside it (idle vCPUs wake late from
# franka-sim's sleeps). So the absolute 1 kHz bar lives in `reflexlab bench franka` (loop_rate_bar_met), and
# this test holds what the driver controls: the ratio of its loop rate to franka-sim's publish rate.
KEEPS_PACE = 0.98


def test_policy_stream_keeps_pace_with_the_robot_without_reflexes(sim, record_property, capsys) -> None:
    del sim  # the fixture only skips when franka-sim or root is missing; the bench runs its own
    m = bench_franka(duration_s=30.0)
    print_table(m)
    report = capsys.readouterr().out + json.dumps(m)
    with capsys.disabled():
        print("\n" + report)
    for k in (
        "loop_rate_hz_mean",
        "sim_publish_rate_hz_mean",
        "cycle_time_p99_us",
        "command_success_rate_min",
        "command_success_rate_mean",
    ):
        record_property(k, m[k])
    assert m["targets"] >= 0.9 * 30 * 20 and m["workspace_clips"] == 0, report
    if m["cpu_steal_percent"] < STEAL_FREE_PERCENT:
        # the machine delivered its CPUs: the loop must answer (nearly) every state the robot sends, in
        # time, without a single reflex
        assert m["reflexes"] == 0 and m["last_error"] is None, report
        assert m["sim_publish_rate_hz_mean"] > 0.0, "no publish rate in franka-sim's log\n" + report
        assert m["loop_rate_hz_mean"] >= KEEPS_PACE * m["sim_publish_rate_hz_mean"], report
        assert m["command_success_rate_mean"] >= 0.95 and m["command_success_rate_min"] >= 0.5, report
        assert m["tracking_error_mm_mean"] < 20.0, report
    else:
        # franka-sim runs on the same stolen vCPUs (a real FR3 would not), so the rate is the host's (39 % steal
        # measured 360 Hz); the driver must still degrade gracefully: most commands in time, the arm on its path,
        # and the only reflex allowed is the one a real FR3 also raises when its client stalls ≥ 20 ms, recovered
        assert only_recovered_stall_reflexes(m), report
        assert m["command_success_rate_mean"] >= 0.8, report
        assert m["tracking_error_mm_mean"] < 80.0, report
