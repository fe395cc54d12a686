"""A private franka-sim per test (own network namespace, both enforcement flags on) and drivers on it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from real.franka.config import FrankaConfig
from real.franka.driver import FrankaDriver
from real.franka.sim_server import FrankaSim, FrankaSimError, franka_sim, franka_sim_executable


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here runs a 1 kHz loop whose deadlines are real (franka-sim enforces them): measured beside
    the parallel suite, stalls of 100 ms triggered genuine communication reflexes. `make test` runs them alone."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.realtime)


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        franka_sim_executable()
    except FrankaSimError as e:
        return str(e)
    return None


STALL_REFLEX = "communication_constraints_violation"


def only_recovered_stall_reflexes(stats: dict) -> bool:
    """No reflex, or only the one a real FR3 also raises when its client misses commands for ≥ 20 ms — what a host
    that steals our vCPUs (measured up to 39 % here) causes — each recovered. Any other reflex is the driver's fault."""
    kinds = {k for k in str(stats["reflex_kinds"]).split(", ") if k}
    return stats["reflexes"] == 0 or (kinds == {STALL_REFLEX} and stats["recoveries"] == stats["reflexes"])


@pytest.fixture
def sim() -> Iterator[FrankaSim]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    with franka_sim() as s:
        yield s


@pytest.fixture
def make_driver(sim: FrankaSim) -> Iterator[Callable[..., FrankaDriver]]:
    """``make_driver(mode, **safety_overrides)``: a started driver on the test's sim, stopped afterwards."""
    drivers: list[FrankaDriver] = []

    def make(mode: str = "joint_impedance", **safety: object) -> FrankaDriver:
        config = FrankaConfig.load(host=sim.host, mode=mode)
        config = replace(config, safety=replace(config.safety, **safety))
        driver = FrankaDriver(config)
        drivers.append(driver)
        with sim.client():
            return driver.start()

    yield make
    for d in drivers:
        d.stop()
