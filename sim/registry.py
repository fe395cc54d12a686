"""Tasks by name. A task registers its definition once; backends and the CLI look it up here.

Profiles are named starting configurations of a task (e.g. ``fast``: forward walking without
randomisation, ``full``: omnidirectional with randomisation and pushes), so that a user's
command line says which experiment it is rather than listing twenty flags.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reflexlab.spec import Spec


class UnknownTaskError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown task {self.name!r}; known tasks: {', '.join(sorted(TASKS))}"


class TaskKindError(ValueError):
    """A task used by a job that does not apply to it (e.g. PPO on a demonstration task)."""


@dataclass(frozen=True)
class TaskEntry:
    """A registered task.

    ``kind`` says which jobs apply: ``"vec"`` tasks are batched torch tasks for rsl-rl PPO
    (`sim.backends`); ``"demo"`` tasks are learned from demonstrations: ``task_class`` is their
    batched scene env and ``expert`` builds a scripted expert for one scene from an rng.
    """

    name: str
    task_class: type
    profiles: dict[str, Callable[[], Any]]  # profile name -> config factory
    default_profile: str
    kind: str = "vec"
    expert: Callable[..., Any] | None = None

    def require(self, kind: str, job: str) -> None:
        if self.kind != kind:
            others = ", ".join(sorted(n for n, e in TASKS.items() if e.kind == kind)) or "none"
            raise TaskKindError(
                f"{job} does not apply to task {self.name!r} (a {self.kind!r} task); tasks for it: {others}"
            )

    def config(self, profile: str | None = None) -> Any:
        profile = profile or self.default_profile
        if profile not in self.profiles:
            raise ValueError(f"task {self.name!r} has no profile {profile!r}; profiles: {', '.join(self.profiles)}")
        return self.profiles[profile]()

    def spec(self) -> Spec:
        return self.task_class.spec_factory(self.config())


TASKS: dict[str, TaskEntry] = {}


def register(entry: TaskEntry) -> None:
    TASKS[entry.name] = entry


def get_task(name: str) -> TaskEntry:
    _load_builtin_tasks()
    if name not in TASKS:
        raise UnknownTaskError(name)
    return TASKS[name]


def task_names() -> list[str]:
    _load_builtin_tasks()
    return sorted(TASKS)


def _load_builtin_tasks() -> None:
    import sim.tasks  # noqa: F401  (registers the built-in tasks)
