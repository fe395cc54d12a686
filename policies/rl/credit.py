"""Who gets credit for an outcome: episodes cut into segments by who commanded them, and the critics' targets.

Real-world RL episodes mix the policy's steps and a person's (an intervention). An episode's outcome says how the
episode ended, not who earned it, so HABC (issue 22) gives outcome labels only to the segments the current policy
executed, never across an intervention boundary, and treats a person's segments as demonstrations of their own.
The rules, which the paper leaves to us:

* A **segment** is a maximal run of steps with one commander (``is_intervention`` constant).
* A policy segment that **ends the episode** carries the episode's outcome: 1 when a step of it succeeded, else 0.
* A policy segment that **ends in a takeover** carries 0: the person took over because it was going wrong (the
  HIL-SERL reading of an intervention). A person's decision is the only label such a segment has.
* Targets are Monte-Carlo, per step t of a labelled segment with n_t steps left in it: **viability**
  ``γ_v^n_t · outcome`` on every labelled policy segment (γ_v = 1: will it succeed from here), **efficiency**
  ``γ_e^n_t`` on successful ones only (how soon).
* A person's steps get no critic target; they are BC data with their own weight.

``aware=False`` is the ablation: one segment per episode labelled by the episode's outcome, credit crossing every
intervention boundary and reaching the person's steps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


class CreditError(ValueError):
    """An episode the credit rules cannot label; names the episode and why."""


@dataclass(frozen=True)
class Credit:
    """Per-step labels of one episode (all arrays of its length T).

    Attributes:
        segment: segment index of each step, 0, 1, … in order.
        by_policy: the policy commanded the step (else a person).
        viability: the viability target, NaN where the step has none (a person's step).
        efficiency: the efficiency target, NaN except on successful policy segments.
        outcome_next: the value the critics bootstrap from after each step: NaN inside a segment, the segment's
            outcome at its last step (0 at a takeover, the episode's outcome at the end).
    """

    segment: np.ndarray
    by_policy: np.ndarray
    viability: np.ndarray
    efficiency: np.ndarray
    outcome_next: np.ndarray


def segments(is_intervention: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of equal ``is_intervention``, in order."""
    flags = np.asarray(is_intervention, dtype=bool)
    if len(flags) == 0:
        return []
    cuts = np.flatnonzero(flags[1:] != flags[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(flags)]
    return list(itertools.pairwise(bounds))


def episode_credit(
    steps: dict[str, np.ndarray],
    *,
    episode: int,
    gamma_viability: float = 1.0,
    gamma_efficiency: float = 0.95,
    aware: bool = True,
) -> Credit:
    """The credit of one episode's steps (`reflexlab.dataset.Dataset.episode` columns: ``is_intervention`` and
    ``next.success`` are needed; a dataset without them has no outcomes to learn from)."""
    for key in ("is_intervention", "next.success"):
        if key not in steps:
            raise CreditError(f"episode {episode} has no {key!r} column: its outcome cannot be credited")
    person = np.asarray(steps["is_intervention"], dtype=bool)
    success = np.asarray(steps["next.success"], dtype=bool)
    length = len(person)
    if length == 0:
        raise CreditError(f"episode {episode} is empty")
    runs = segments(person) if aware else [(0, length)]
    segment = np.zeros(length, dtype=np.int64)
    viability = np.full(length, np.nan)
    efficiency = np.full(length, np.nan)
    outcome_next = np.full(length, np.nan)
    for k, (start, end) in enumerate(runs):
        segment[start:end] = k
        if aware and person[start]:
            continue  # a person's segment: demonstrations, no outcome label
        if not aware:
            outcome = float(success.any())
        elif end == length:
            outcome = float(success[start:end].any())
        else:
            outcome = 0.0  # the person took over
        left = np.arange(end - start)[::-1]  # steps remaining in the segment after each step
        viability[start:end] = gamma_viability**left * outcome
        if outcome:
            efficiency[start:end] = gamma_efficiency**left
        outcome_next[end - 1] = outcome
    return Credit(segment, ~person, viability, efficiency, outcome_next)
