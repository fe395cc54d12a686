"""`panda-push-t` in MuJoCo: a Franka Panda pushes a T block to a goal pose (learned from demonstrations)."""

from dataclasses import dataclass

from reflexlab.tasks.panda_push_t.constants import EPISODE_STEPS, TASK_NAME
from reflexlab.tasks.panda_push_t.expert import PushTExpert
from sim.task_entry import TaskEntry
from sim.tasks.panda_push_t.env import SCENE_XML, PushTEnv
from sim.tasks.panda_push_t.realtime import RealtimePushT


@dataclass
class PushTConfig:
    episode_steps: int = EPISODE_STEPS


ENTRY = TaskEntry(
    TASK_NAME,
    PushTEnv,
    {"default": PushTConfig},
    "default",
    SCENE_XML,
    kind="demo",
    expert=PushTExpert,
    realtime=RealtimePushT,
)
