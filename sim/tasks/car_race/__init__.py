"""`car-race` in MuJoCo: a 1/10-scale car laps procedurally generated walled courses, seen by its own camera."""

from reflexlab.tasks.car_race.config import prior, test
from reflexlab.tasks.car_race.constants import TASK_NAME
from reflexlab.tasks.car_race.expert import CarDriver
from sim.task_entry import TaskEntry
from sim.tasks.car_race.env import CarRaceEnv

ENTRY = TaskEntry(
    TASK_NAME,
    CarRaceEnv,
    {"prior": prior, "test": test},
    "prior",
    None,  # the scene is built in code (sim.tasks.car_race.scene): its walls take each course's shape
    kind="demo",
    expert=CarDriver,
)
