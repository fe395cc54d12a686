"""What the simulator knows about a task: its batched scene env, its scene file, its profiles, its expert.

Each task package under `sim.tasks` builds one `TaskEntry` from its sim-free definition in
`reflexlab.tasks`; `sim.registry` lists them. Kept apart from the registry so that task packages
never import the registry that imports them (no cycle, not even a lazy one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflexlab.spec import Spec


class TaskKindError(ValueError):
    """A task used by a job that does not apply to it (e.g. PPO on a demonstration task)."""


@dataclass(frozen=True)
class TaskEntry:
    """A registered task.

    ``kind`` says which jobs apply: ``"vec"`` tasks are batched torch tasks for rsl-rl PPO
    (`sim.backends`); ``"demo"`` tasks are learned from demonstrations: ``task_class`` is their
    batched scene env and ``expert`` builds a scripted expert for one scene from an rng.
    ``scene_xml`` is the MJCF the backends load (None for a scene built in code, as `car-race`'s walls
    are). ``evaluate`` is the task's own evaluation of a policy (its metrics, video, options), called as
    ``evaluate(entry, act, policy_spec, context, cfg, profile, episodes, episode_s, seed, **options)`` by
    `policies.evaluate`, which names no task. ``realtime`` builds the task's scene stepped on the wall
    clock from a seed, for the sim-as-real arm bridge (`sim.ros.arm_bridge`); None for a task that has no
    robot-side twin.
    """

    name: str
    task_class: type
    profiles: dict[str, Callable[[], Any]]  # profile name -> config factory
    default_profile: str
    scene_xml: Path | None
    kind: str = "vec"
    expert: Callable[..., Any] | None = None
    evaluate: Callable[..., dict[str, Any]] | None = None
    realtime: Callable[[int], Any] | None = None

    def config(self, profile: str | None = None) -> Any:
        profile = profile or self.default_profile
        if profile not in self.profiles:
            raise ValueError(f"task {self.name!r} has no profile {profile!r}; profiles: {', '.join(self.profiles)}")
        return self.profiles[profile]()

    def spec(self) -> Spec:
        return self.task_class.spec_factory(self.config())

    def require(self, kind: str, job: str, tasks_of_kind: list[str] | None = None) -> None:
        """Refuse ``job`` unless this is a ``kind`` task; ``tasks_of_kind`` (the registry's) are named as the ones
        it applies to (`sim.registry.require_kind`)."""
        if self.kind != kind:
            which = (
                f"tasks for it: {', '.join(tasks_of_kind) or 'none'}"
                if tasks_of_kind is not None
                else f"it needs {kind!r}"
            )
            raise TaskKindError(f"{job} does not apply to task {self.name!r} (a {self.kind!r} task); {which}")
