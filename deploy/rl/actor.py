"""The actor: collects episodes on a `SingleEnv` with the newest deployed policy, forever resumable.

Each episode runs the policy the store had when it started (versions are swapped between episodes, never inside
one, and the robot is never stopped for it) and is committed to the dataset with that ``policy_version`` on every
step. Episode k of the dataset runs seed ``seed + k`` and the actor stops when the dataset holds ``episodes``
episodes, so an actor killed at any moment and started again loses at most the episode in flight, repeats no
committed episode and counts none twice: the dataset's commit point is the only bookkeeping. A paced learner
(`PolicyStore.want`) says how many episodes it wants; the actor holds the robot between episodes once the dataset has
them, until the learner deploys the next version and asks for more.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from deploy.policy_store import PolicyFollower, PolicyStore, PolicyVersion
from real.record import NOISE_COLUMN, features_of, record_episodes
from reflexlab.dataset import INFO_PATH, DatasetWriter
from reflexlab.env import SingleEnv
from reflexlab.errors import UserFacingError


class NoPolicyError(RuntimeError, UserFacingError):
    """The learner deployed no usable version in time."""


@dataclass
class ActorOptions:
    """What the actor collects.

    Attributes:
        episodes: stop when the dataset holds this many episodes (a restarted actor goes on from where it is);
            None: until the learner says it is finished (`PolicyStore.finish`).
        seed: episode k of the dataset runs seed + k.
        wait_for_policy_s: how long to wait for the learner's first version before giving up.
        poll_s: how often to look for it meanwhile.
    """

    episodes: int | None = None
    seed: int = 0
    wait_for_policy_s: float = 600.0
    poll_s: float = 0.5


@dataclass
class ActorSummary:
    """What this run of the actor did (a restarted actor's earlier runs are in the dataset, not here)."""

    episodes: int = 0
    versions: dict[int, int] = field(default_factory=dict)  # policy version -> episodes run with it
    skipped: dict[int, str] = field(default_factory=dict)  # versions never deployed, and why


def run_actor(
    env: SingleEnv,
    dataset: Path,
    store: PolicyStore,
    options: ActorOptions,
    *,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> ActorSummary:
    """Collect episodes into ``dataset`` until it holds ``options.episodes`` or the learner has finished (checked
    between episodes); returns what this run did."""
    follower = PolicyFollower(store, env.spec, seed=options.seed)
    summary = ActorSummary()
    spec = env.spec
    waiting = False
    stored = _stored_noise_size(dataset)
    follower.max_noise_size = stored or None  # an existing column bounds what deploys; without one nothing is kept
    first = _wait_for_first_version(follower, options)
    log(f"actor: deployed version {first.version} (round {first.round}) from {first.path}")
    assert follower.actor is not None
    noise = follower.actor.noise_size if stored is None else stored  # a new dataset holds what the first one draws
    follower.max_noise_size = noise or None
    features = features_of(env) | ({NOISE_COLUMN: (noise,)} if noise else {})
    with DatasetWriter(dataset, spec.control_rate_hz, spec.robot, features, spec) as writer:
        while options.episodes is None or writer.num_episodes < options.episodes:
            if store.finished() is not None:
                log(f"actor: the learner has finished; stopping after {writer.num_episodes} episodes")
                break
            wanted = store.wanted()
            if wanted is not None and writer.num_episodes >= wanted:  # paced: the learner has what it asked for
                if not waiting:
                    log(f"actor: {writer.num_episodes} episodes collected, as the learner asked; holding")
                waiting = True
                time.sleep(options.poll_s)
                continue
            waiting = False
            deployed = follower.refresh()
            for version, why in follower.skipped.items():
                if version not in summary.skipped:
                    summary.skipped[version] = why
                    log(f"actor: version {version} not deployed, keeping version {follower.version}: {why}")
            if deployed is not None:
                log(f"actor: deployed version {deployed.version} (round {deployed.round}) from {deployed.path}")
            actor = follower.actor
            assert actor is not None  # deployed before the writer opened; never undeployed
            k = writer.num_episodes
            record_episodes(
                env,
                writer,
                actor.act,
                1,
                seed=options.seed + k,
                policy_version=follower.version,
                reset_actor=actor.reset,
                columns=(lambda a=actor: {NOISE_COLUMN: a.noise_row(noise)}) if noise else None,
            )
            summary.episodes += 1
            summary.versions[follower.version] = summary.versions.get(follower.version, 0) + 1
            log(f"actor: episode {k} (seed {options.seed + k}, version {follower.version}) committed")
    return summary


def _stored_noise_size(dataset: Path) -> int | None:
    """Floats per step of an existing dataset's ``policy.noise`` column (0: recorded without one, and it stays so);
    None before the dataset exists, when the first deployed version's draw per chunk sets it (0 for a plain
    policy)."""
    info = dataset / INFO_PATH
    if not info.exists():
        return None
    stored = json.loads(info.read_text())["features"].get(NOISE_COLUMN)
    return 0 if stored is None else int(stored["shape"][0])


def _wait_for_first_version(follower: PolicyFollower, options: ActorOptions) -> PolicyVersion:
    deadline = time.monotonic() + options.wait_for_policy_s
    while (first := follower.refresh()) is None:
        if time.monotonic() > deadline:
            skipped = "; ".join(follower.skipped.values()) or "none published"
            raise NoPolicyError(
                f"no policy deployed in {follower.store.root} after {options.wait_for_policy_s:g} s ({skipped}): "
                "is the learner running?"
            )
        time.sleep(options.poll_s)
    return first
