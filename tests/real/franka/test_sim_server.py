"""The franka-sim harness leaves nothing behind: server stopped and namespace deleted, also on errors."""

from __future__ import annotations

import os

import pytest

from real.franka.sim_server import franka_sim


class _Boom(Exception):
    pass


def test_teardown_even_on_error(sim) -> None:
    del sim  # the fixture only skips when franka-sim or root is missing
    with pytest.raises(_Boom), franka_sim() as inner:
        assert os.path.exists(f"/run/netns/{inner.namespace}") and inner.process.poll() is None
        raise _Boom
    assert inner.process.poll() is not None, "server stopped"
    assert not os.path.exists(f"/run/netns/{inner.namespace}"), "namespace deleted"
