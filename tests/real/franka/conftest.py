"""A private franka-sim per test (own network namespace, both enforcement flags on) and drivers on it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from real.franka.config import FrankaConfig
from real.franka.driver import FrankaDriver
from real.franka.sim_server import FrankaSim, FrankaSimError, franka_sim, franka_sim_executable


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        franka_sim_executable()
    except FrankaSimError as e:
        return str(e)
    return None


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
