"""The reflexlab quadruped (model, constants, tasks, randomisation)."""

from sim.registry import TaskEntry, register
from sim.tasks.quadruped.randomize import RandomizationConfig
from sim.tasks.quadruped.walk import TASK_NAME, CommandRanges, QuadrupedWalk, WalkConfig


def _fast() -> WalkConfig:
    """Forward walking on nominal physics: the 10-minute profile."""
    return WalkConfig(commands=CommandRanges.forward(), randomization=RandomizationConfig.off())


def _full() -> WalkConfig:
    """Omnidirectional commands with randomisation and pushes: the 30-minute profile."""
    return WalkConfig()


register(TaskEntry(TASK_NAME, QuadrupedWalk, {"fast": _fast, "full": _full}, default_profile="fast"))
