"""`panda-peg-insert` in MuJoCo: a Franka Panda inserts a square peg into a 1 mm-clearance hole it sees through
a noisy tracker (learned from demonstrations)."""

from reflexlab.tasks.panda_peg_insert.config import PegInsertConfig
from reflexlab.tasks.panda_peg_insert.constants import TASK_NAME
from reflexlab.tasks.panda_peg_insert.expert import PegInsertExpert
from sim.task_entry import TaskEntry
from sim.tasks.panda_peg_insert.env import SCENE_XML, PegInsertEnv
from sim.tasks.panda_peg_insert.realtime import RealtimePegInsert

ENTRY = TaskEntry(
    TASK_NAME,
    PegInsertEnv,
    {"default": PegInsertConfig},
    "default",
    SCENE_XML,
    kind="demo",
    expert=PegInsertExpert,
    realtime=RealtimePegInsert,
)
