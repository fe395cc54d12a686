"""The reflexlab quadruped in MuJoCo: its MJCF scene and the `quadruped-walk` profiles."""

from pathlib import Path

from reflexlab.tasks.quadruped.randomize import RandomizationConfig
from reflexlab.tasks.quadruped.walk import TASK_NAME, CommandRanges, QuadrupedWalk, WalkConfig
from sim.task_entry import TaskEntry
from sim.tasks.quadruped.evaluate import evaluate_task

SCENE_XML = Path(__file__).with_name("quadruped.xml")


def _fast() -> WalkConfig:
    """Forward walking on nominal physics: the 10-minute profile."""
    return WalkConfig(commands=CommandRanges.forward(), randomization=RandomizationConfig.off())


def _full() -> WalkConfig:
    """Omnidirectional commands with randomisation and pushes: the 30-minute profile."""
    return WalkConfig()


ENTRY = TaskEntry(TASK_NAME, QuadrupedWalk, {"fast": _fast, "full": _full}, "fast", SCENE_XML, evaluate=evaluate_task)
