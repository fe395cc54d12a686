"""Tasks by name: the one place a simulated task is registered; backends and the CLI look it up here.

Profiles are named starting configurations of a task (e.g. ``fast``: forward walking without
randomisation, ``full``: omnidirectional with randomisation and pushes), so that a user's
command line says which experiment it is rather than listing twenty flags.

Loading is lazy (a task package loads its MuJoCo scene code) and one-way: this module imports the
task packages, which import only `sim.task_entry` and `reflexlab.tasks`.
"""

from __future__ import annotations

from functools import cache

from reflexlab.errors import UserFacingError
from sim.task_entry import TaskEntry, TaskKindError  # noqa: F401  (TaskKindError re-exported: callers catch it from here)


class UnknownTaskError(KeyError, UserFacingError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown task {self.name!r}; known tasks: {', '.join(task_names())}"


@cache
def _tasks() -> dict[str, TaskEntry]:
    """Every built-in task; adding a task is one line here."""
    from sim.tasks import car_race, panda_peg_insert, panda_push_t, quadruped

    return {e.name: e for e in (quadruped.ENTRY, panda_push_t.ENTRY, panda_peg_insert.ENTRY, car_race.ENTRY)}


def get_task(name: str) -> TaskEntry:
    if name not in _tasks():
        raise UnknownTaskError(name)
    return _tasks()[name]


def task_names() -> list[str]:
    return sorted(_tasks())


def sim_as_real_tasks() -> list[str]:
    """The tasks whose scene the arm bridge can run in real time behind the robot's topics."""
    return sorted(n for n, e in _tasks().items() if e.realtime is not None)


def require_kind(entry: TaskEntry, kind: str, job: str) -> None:
    """Refuse ``job`` on a task of another kind, naming the tasks it does apply to."""
    entry.require(kind, job, sorted(n for n, e in _tasks().items() if e.kind == kind))
