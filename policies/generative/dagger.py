"""DAgger rounds for one-step students: the teacher labels the states the student itself visits.

Distillation on the dataset's windows teaches the student the teacher's map where the *expert*
went. Executed, the student drifts a little off those states (a one-step generator underfits its
teacher's map), and there the teacher's behaviour was never shown to it: on panda-push-t students
reached the teacher's coverage but finished fewer pushes (0.84 against 0.92 success at Ta 2). A
round of DAgger (Ross et al., 2011; as in policy distillation) rolls the student out on seeded
episodes of its task, keeps the observation history at each re-plan of every scene still running,
draws the teacher's samples there (``draws_per_state`` noises each, the teacher's deterministic
sampler at the distillation's steps), adds them to the samples trained on so far and trains the
student on the aggregate for ``steps`` more optimiser steps. The labels of every round are kept in
the run folder (``dagger_samples.pt``), so a run that goes on from a checkpoint (``distill
--init``) aggregates them too and numbers its rounds (and seeds) on from there.

Rollout seeds start at ``seed`` (far from the demonstrations' seeds, 0…, and from `bench distill`'s
evaluation seeds, 10000…), so no evaluation episode is ever labelled. State-only students: a
student with cameras would need the rendered frames of every visited state kept and encoded.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.chunk_eval import evaluate_chunks
from policies.generative.methods import METHODS
from policies.generative.policy import GenerativePolicy
from policies.generative.sampler import TorchSampler
from policies.generative.teacher_samples import TeacherSamples
from reflexlab.io import replace_atomically
from reflexlab.spec import Spec

LABELS_FILE = "dagger_samples.pt"


@dataclass(frozen=True)
class DaggerConfig:
    """``rounds`` of: ``episodes`` student rollouts, teacher labels at the visited states, ``steps`` more
    optimiser steps on all samples so far."""

    rounds: int | None = 0  # None: the method's `default_dagger_rounds` for a state-only student, 0 with cameras
    episodes: int = 100
    steps: int = 10_000
    draws_per_state: int = 2
    seed: int = 50_000

    def __post_init__(self) -> None:
        for name in ("rounds", "episodes", "steps", "draws_per_state", "seed"):
            least = 0 if name in ("rounds", "seed") else 1
            if getattr(self, name) is not None and getattr(self, name) < least:
                raise ValueError(f"DAgger {name} must be >= {least}")

    def for_student(self, method: str, cameras: bool) -> DaggerConfig:
        """``rounds`` made definite: the method's default, none for a student with cameras (its visited
        frames are not kept)."""
        if self.rounds is not None:
            return self
        return dataclasses.replace(self, rounds=0 if cameras else METHODS[method].default_dagger_rounds)

    def round_seeds(self, r: int) -> list[int]:
        """Round ``r``'s (from 0) episode seeds: new scenes every round."""
        first = self.seed + r * self.episodes
        return list(range(first, first + self.episodes))


@dataclass(frozen=True)
class Visits:
    """What one round's rollouts saw: the histories to label and how the student did on them."""

    states: torch.Tensor  # (M, To, n) raw observation histories at re-plans of running scenes
    success_rate: float
    mean_max_coverage: float


def visited_states(student: GenerativePolicy, spec: Spec, seeds: list[int], noise_seed: int) -> Visits:
    """Roll ``student`` (one step, receding horizon with the Spec's Ta) out on ``seeds``; keep each running
    scene's observation history at each re-plan."""
    if student.image_keys:
        raise ValueError(f"DAgger rounds are for state-only students; this one reads {list(student.image_keys)}")
    kept: list[np.ndarray] = []

    def keep(histories: np.ndarray, running: np.ndarray) -> None:
        kept.append(histories[running])

    res = evaluate_chunks(TorchSampler(student, 1), spec, seeds, noise_seed=noise_seed, on_plan=keep)
    summary = res.summary()
    return Visits(torch.from_numpy(np.concatenate(kept)), summary["success_rate"], summary["mean_max_coverage"])


@dataclass(frozen=True)
class Labels:
    """The teacher's samples at the visited states of every round so far, and each round's record."""

    samples: TeacherSamples | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return 0 if self.samples is None else len(self.samples)

    def add(self, new: TeacherSamples, record: dict[str, Any]) -> Labels:
        samples = new if self.samples is None else self.samples + new
        return Labels(samples, [*self.rounds, {**record, "labels_after": len(samples)}])

    def save(self, run_dir: Path) -> None:
        assert self.samples is not None
        state = {"obs": self.samples.obs, "noise": self.samples.noise, "chunk": self.samples.chunk}
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        replace_atomically(Path(run_dir) / LABELS_FILE, lambda tmp: torch.save(state, tmp))

    @classmethod
    def load(cls, run_dir: Path, rounds: list[dict[str, Any]]) -> Labels:
        """The labels a checkpoint's ``rounds`` were trained on, from its run folder; refused if they are not there."""
        if not rounds:
            return cls()
        path = Path(run_dir) / LABELS_FILE
        want = rounds[-1]["labels_after"]
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            samples = TeacherSamples(state["obs"], state["noise"], state["chunk"])
        except Exception as e:  # missing, truncated or foreign: the aggregate cannot be rebuilt
            raise ValueError(f"the DAgger labels of the {len(rounds)} round(s) to go on from, {path}: {e}") from e
        if len(samples) < want:
            raise ValueError(f"{path} holds {len(samples)} DAgger labels, the checkpoint was trained on {want}")
        # A later round of the same run may have saved more: take what this checkpoint had.
        return cls(TeacherSamples(samples.obs[:want], samples.noise[:want], samples.chunk[:want]), list(rounds))
