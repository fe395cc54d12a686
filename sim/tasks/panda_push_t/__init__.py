"""`panda-push-t`: a Franka Panda pushes a T block to a goal pose (learned from demonstrations)."""

from dataclasses import dataclass

from sim.registry import TaskEntry, register
from sim.tasks.panda_push_t.constants import EPISODE_STEPS, TASK_NAME
from sim.tasks.panda_push_t.env import PushTEnv
from sim.tasks.panda_push_t.expert import PushTExpert


@dataclass
class PushTConfig:
    episode_steps: int = EPISODE_STEPS


register(TaskEntry(TASK_NAME, PushTEnv, {"default": PushTConfig}, "default", kind="demo", expert=PushTExpert))
