"""Built-in tasks; importing this package registers them."""

from sim.tasks import panda_push_t, quadruped  # noqa: F401
