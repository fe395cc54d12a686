"""FrankaDriver against franka-sim (real pylibfranka, real FCI protocol, enforcement on): reflexes and
recovery, loss of the policy stream, the workspace box, and the errors a user meets first."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

from real.franka import netns
from real.franka.driver import FrankaUnreachableError, FrankaVersionError, connect
from real.franka.sim_server import FCI_PORT
from tests.real.franka.conftest import only_recovered_stall_reflexes


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll until ``condition()``; returns the seconds it took."""
    t0 = time.monotonic()
    while not condition():
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.005)
    return time.monotonic() - t0


def test_reflex_is_recovered_and_the_arm_holds(make_driver) -> None:
    driver = make_driver("joint_impedance")
    wait_for(lambda: driver.stats()["cycles"] > 200, 5, "the loop to run")
    driver._inject_discontinuity(np.array([5.0, 0, 0, 0, 0, 0, 0]))  # 5 Nm in 1 ms: 5000 Nm/s > 1000
    took = wait_for(lambda: driver.stats()["recoveries"] == 1, 10, "automatic error recovery")
    s = driver.stats()
    assert s["reflexes"] == 1 and "controller_torque_discontinuity" in s["last_error"]
    print(
        f"reflex→holding again: {took * 1e3:.0f} ms (recovery call + restart {s['recovery_time_s_max'] * 1e3:.0f} ms)"
    )
    q0 = driver.state().q
    time.sleep(0.5)
    st = driver.state()
    assert driver.running and st.robot_mode == "Move"
    assert np.abs(st.q - q0).max() < 0.01, "holding after the recovery"


def test_reflex_without_recovery_stops_and_reports(make_driver) -> None:
    driver = make_driver("joint_impedance", automatic_error_recovery=False)
    wait_for(lambda: driver.stats()["cycles"] > 200, 5, "the loop to run")
    driver._inject_discontinuity(np.array([0, 0, 0, 0, 3.0, 0, 0]))
    wait_for(lambda: not driver.running, 5, "the loop to stop")
    st, s = driver.state(), driver.stats()
    assert not st.running and "controller_torque_discontinuity" in st.last_error
    assert s["reflexes"] == 1 and s["recoveries"] == 0


def test_lost_stream_holds_position(make_driver) -> None:
    driver = make_driver("joint_impedance", command_timeout_s=0.2)
    q0 = driver.state().q
    t0 = time.monotonic()
    while (t := time.monotonic() - t0) < 1.0:  # a 20 Hz stream moving joints 1 and 4
        driver.set_joint_target(q0 + 0.15 * np.sin(np.pi * t) * np.array([1, 0, 0, 1, 0, 0, 0]))
        time.sleep(0.05)
    assert not driver.state().holding
    wait_for(lambda: driver.state().holding, 1.0, "the command timeout")
    wait_for(lambda: np.abs(driver.state().dq).max() < 0.01, 2.0, "the arm to come to rest")
    held_q, held_p = driver.state().q, driver.state().position
    time.sleep(1.5)
    st = driver.state()
    drift_rad, drift_mm = np.abs(st.q - held_q).max(), 1e3 * np.linalg.norm(st.position - held_p)
    print(f"hold drift over 1.5 s: {drift_rad * 1e3:.2f} mrad, EE {drift_mm:.2f} mm")
    assert drift_rad < 0.005 and drift_mm < 2.0
    assert driver.stats()["timeouts"] == 1 and only_recovered_stall_reflexes(driver.stats()), driver.stats()
    driver.set_joint_target(held_q)  # a resumed stream is followed again
    assert not driver.state().holding or wait_for(lambda: not driver.state().holding, 0.1, "resume") < 0.1


def test_workspace_box_clips_ee_targets(make_driver) -> None:
    driver = make_driver("cartesian_impedance", workspace_max=(0.65, 0.4, 0.8))  # x face 0.1 m ahead
    st = driver.state()
    box_max = np.asarray(driver.config.safety.workspace_max)
    far = np.array([1.5, 0.0, st.position[2] - 0.05])  # x far outside the box
    assert driver.set_ee_target(far, st.quaternion_wxyz) is True
    for _ in range(40):  # the policy insists
        driver.set_ee_target(far, st.quaternion_wxyz)
        time.sleep(0.05)
    p = driver.state().position
    assert p[0] == pytest.approx(box_max[0], abs=0.02), "stopped at the box face, not at the target"
    s = driver.stats()
    assert s["workspace_clips"] >= 40 and only_recovered_stall_reflexes(s), s
    with pytest.raises(ValueError, match="set_joint_target needs mode 'joint_impedance'"):
        driver.set_joint_target(st.q)


def test_unreachable_host_says_what_to_check() -> None:
    with netns.namespace("reflexlab-test") as ns, netns.entered(ns), pytest.raises(FrankaUnreachableError) as e:
        connect("127.0.0.1")  # nothing listens in a fresh namespace
    msg = str(e.value)
    assert "127.0.0.1" in msg and "FCI" in msg and "powered" in msg and "network" in msg


# A robot on FCI protocol version 7: answers libfranka's Connect request with kIncompatibleLibraryVersion.
_OLD_ROBOT = f"""
import socket, struct, sys
with socket.create_server(("127.0.0.1", {FCI_PORT})) as listener:
    print("listening", flush=True)
    conn, _ = listener.accept()
    with conn:
        command, command_id, size = struct.unpack("<III", conn.recv(12))
        conn.recv(size - 12)
        conn.sendall(struct.pack("<III", command, command_id, 15) + struct.pack("<BH", 1, 7))
        conn.recv(1)
"""


def test_version_mismatch_names_both_versions() -> None:
    """Real libfranka refuses a robot on another protocol version; we name both and what to install.

    The fake robot is a separate process: pylibfranka holds the GIL while it connects.
    """
    with netns.namespace("reflexlab-test") as ns:
        robot = subprocess.Popen(
            netns.exec_argv(ns, [sys.executable, "-c", _OLD_ROBOT]), stdout=subprocess.PIPE, text=True
        )
        try:
            assert robot.stdout.readline().strip() == "listening"
            with netns.entered(ns), pytest.raises(FrankaVersionError) as e:
                connect("127.0.0.1")
        finally:
            robot.kill()
            robot.wait()
    msg = str(e.value)
    assert "127.0.0.1" in msg and "version 7" in msg and "pip install pylibfranka" in msg
    assert "0.21.3" in msg and "version 10" in msg  # what is installed, and its protocol
