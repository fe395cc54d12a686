"""Built-in tasks; importing this package registers them."""

from sim.tasks import quadruped  # noqa: F401
