"""The one-step head a real-world RL run ends with: every policy the robot serves is a one-step generator.

A method improves the multi-step diffusion policy round by round; its last round distils that policy into a
consistency student (`policies.generative.train.distill_student`) on the observations of the demonstrations and of
every episode the robot ran, and deploys it exported with one sampling step. RL-100 does this in its ``distill``
stage; `ThenHead` gives the same last round to any other method (``reflexlab rl select --head``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from policies.generative.policy import GenerativePolicy
from policies.generative.train import TrainConfig, distill_student
from policies.imitation import load_episodes
from policies.rl.limits import HEAD_STEPS
from policies.rl.rounds import RoundOutcome, RoundUpdate
from reflexlab.spec import Spec


def head_train(steps: int = HEAD_STEPS) -> TrainConfig:
    """The head's training: regress one step onto the teacher's 10-step DDIM samples (the sampler the rounds
    deployed), two noise draws per window. 100-step targets made better students of the imitation teacher (README)
    but cost 10× as much to draw for every window of the demonstrations and episodes.

    The steps: on panda-push-t (RL-100's online policy, 0.775 alone over 200 episodes; 200 demonstrations and 350
    episodes of windows) a 3,000-step head kept 0.56 of it (0.72×); 20,000-step heads 0.755 and 0.72 (seeds 0, 1:
    0.97× and 0.93×), and 0.695 of the random-advantage control's 0.73 (0.95×). The seed-0 run's checkpoints at
    5,000 / 10,000 / 15,000 steps, before its learning rate decayed, scored 0.635 / 0.68 / 0.73: still rising.
    20,000 steps take ~27–29 min on one CPU core: the learner's time, not the robot's."""
    return TrainConfig(
        method="consistency",
        max_steps=steps,
        lr=1e-3,
        teacher_steps=10,
        teacher_samples_per_window=2,
        checkpoint_every=10**9,
    )


def multistep_spec(policy: GenerativePolicy, extra: dict[str, Any], checkpoint: Path, who: str) -> Spec:
    """The Spec of a multi-step, state-only policy, which is what ``who`` (RL-100's rounds, the head) works on: a
    one-step student has no denoising chain to improve or distil, and the critics and teacher samples read states."""
    if policy.objective is None:
        raise ValueError(f"{checkpoint} is a {policy.method} student: {who} the multi-step policy")
    if policy.image_keys:
        raise ValueError(f"{checkpoint} reads cameras {list(policy.image_keys)}: {who} policies of the state only")
    return Spec.from_dict(extra["spec"])


def distill_head(
    dataset: Path, checkpoint: Path, out: Path, demos: Path, train: TrainConfig, seed: int
) -> RoundOutcome:
    """The consistency head of ``checkpoint`` on the observations of ``demos`` and ``dataset``'s episodes (a student
    or a camera policy is refused, `multistep_spec`)."""
    policy, extra = GenerativePolicy.load(checkpoint)
    spec = multistep_spec(policy, extra, checkpoint, "the head distils")
    episodes = load_episodes(demos)[0] + load_episodes(dataset)[0]
    cfg = dataclasses.replace(train, seed=seed, progress=False)
    student = distill_student(checkpoint, episodes, cfg, out / "student", spec.to_json())
    numbers = {"teacher": str(checkpoint), "steps": cfg.max_steps, "windows_from_episodes": len(episodes)}
    return RoundOutcome(student, numbers, "distill", sampling_steps=1)


@dataclass(frozen=True)
class ThenHead:
    """``rounds`` rounds of a method's update, then one more that distils the last deployed policy into its head.

    The head's round is evaluated like any other: the actor runs it for a round's episodes before the learner ends.
    """

    update: RoundUpdate
    rounds: int
    demos: Path
    train: TrainConfig = field(default_factory=head_train)
    seed: int = 0

    def __call__(self, dataset: Path, checkpoint: Path, out: Path, round_: int) -> RoundOutcome:
        if round_ <= self.rounds:
            return self.update(dataset, checkpoint, out, round_)
        if round_ != self.rounds + 1:
            raise ValueError(f"{self.rounds} rounds and a head: there is no round {round_}")
        return distill_head(dataset, checkpoint, out, self.demos, self.train, self.seed)
