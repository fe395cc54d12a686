"""A scripted person at the deadman: the stand-in for a human intervener in sim and sim-as-real RL runs.

Real-world RL needs someone who takes over when the policy goes wrong and hands back when it is back on track;
benchmarks over seeds cannot wait for a person. `ScriptedPerson` watches the task's progress and decides when to
intervene; while it does, a noisy copy of the task's scripted expert is the person's hand. It acts only through
the real `teleop.arbiter.InterventionArbiter`, exactly as a device does (`ScriptedIntervention`: the deadman
"button" is the person's decision), so takeover counts, handback blending and the ``is_intervention`` marks are the
ones a human run records.

When it takes over (each with the reason in ``ScriptedPerson.last_reason``):

* **stall**: the policy made no progress (``min_gain``) for ``stall_steps`` steps;
* **unsafe**: the observation left the safety region (``safe(obs)`` is False);
* **regress**: progress fell ``regress`` below its best since the policy took over: about to fail.

It hands back once progress rose ``handback_gain`` since it took over, or after ``max_steps`` (an intervention
never lasts for ever), then lets the policy drive ``grace_steps`` before judging it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from teleop.arbiter import ArbiterStep, InterventionArbiter
from teleop.config import ArbiterConfig
from teleop.devices.base import TeleopReading

Policy = Callable[[np.ndarray], np.ndarray]
ExpertFactory = Callable[[int], tuple[Policy, Callable[[], None]]]  # seed -> (act(obs), reset)


@dataclass(frozen=True)
class ScriptedPersonConfig:
    """When the scripted person takes over and hands back (steps at the control rate; progress in task units)."""

    stall_steps: int = 15
    min_gain: float = 0.01
    regress: float = 0.15
    handback_gain: float = 0.1
    max_steps: int = 40
    grace_steps: int = 10
    noise_std: float = 0.005  # the person's imprecision, in action units (m for an end-effector target)


class ScriptedPerson:
    """Decides, step by step, whether to command the robot, and commands it with the noisy expert when it does."""

    def __init__(
        self,
        expert: ExpertFactory,
        progress: Callable[[np.ndarray], float],
        safe: Callable[[np.ndarray], bool] = lambda obs: True,
        config: ScriptedPersonConfig = ScriptedPersonConfig(),
        seed: int = 0,
    ) -> None:
        self.expert, self.progress, self.safe, self.config = expert, progress, safe, config
        self.last_reason = ""
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """A new episode (the expert and the noise reseeded from ``seed``)."""
        self._act, self._reset_expert = self.expert(seed)
        self._rng = np.random.default_rng(seed + 7919)
        self.engaged = False
        self._steps = 0  # steps in the current mode (watching or intervening)
        self._best = -np.inf  # best progress while the policy drove (since the last handback)
        self._best_at = 0
        self._start = 0.0  # progress when this intervention began
        self._grace = 0

    def wants_control(self, obs: np.ndarray) -> bool:
        """This step's decision (call once per step, before the step's action is chosen)."""
        c, now = self.config, float(self.progress(obs))
        self._steps += 1
        if self.engaged:
            if now - self._start >= c.handback_gain or self._steps >= c.max_steps:
                self.engaged, self._steps, self._grace = False, 0, c.grace_steps
                self._best, self._best_at = now, 0
                self.last_reason = "handback: on track" if now - self._start >= c.handback_gain else "handback: timeout"
            return self.engaged
        if now > self._best + c.min_gain:
            self._best, self._best_at = now, self._steps
        if self._grace > 0:
            self._grace -= 1
            return False
        reason = ""
        if not self.safe(obs):
            reason = "unsafe"
        elif self._best - now >= c.regress:
            reason = "regress"
        elif self._steps - self._best_at >= c.stall_steps:
            reason = "stall"
        if reason:
            self.engaged, self._steps, self._start, self.last_reason = True, 0, now, reason
            self._reset_expert()  # the expert plans afresh from where the policy left the scene
        return self.engaged

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The person's action: the expert's, with the person's imprecision."""
        action = np.asarray(self._act(obs), dtype=np.float64)
        return action + self._rng.normal(0.0, self.config.noise_std, size=action.shape)


class ScriptedIntervention:
    """`ScriptedPerson` behind the real arbiter: the `real.env.Intervention` hook (``decide``/``reset``).

    ``observe`` turns the env's state into the task observation the person judges by (identity for
    `sim.single_env.SimSingleEnv`, the task's ``observation`` for `real.env.RealEnv`).
    """

    def __init__(
        self,
        person: ScriptedPerson,
        observe: Callable[[Any], np.ndarray] = np.asarray,
        arbiter: InterventionArbiter | None = None,
    ) -> None:
        self.person, self.observe = person, observe
        self.arbiter = arbiter or InterventionArbiter(ArbiterConfig(engage="deadman"))
        self._episodes = 0

    def decide(self, policy_action: np.ndarray, hold_action: np.ndarray, state: Any) -> ArbiterStep:
        obs = np.asarray(self.observe(state), dtype=np.float64)
        engaged = self.person.wants_control(obs)
        reading = TeleopReading(np.zeros(6), {self.arbiter.config.deadman_button: engaged}, time.monotonic())
        step = self.arbiter.step(policy_action, reading, hold_action, lambda _: self.person.act(obs))
        reason = self.person.last_reason if engaged and step.source == "teleop" else step.reason
        return ArbiterStep(step.action, step.is_intervention, step.source, reason)

    def reset(self, seed: int | None = None) -> None:
        """A new episode: the person's noise and the expert are seeded from the episode's seed, so an episode
        replays the same after an actor restart (the count of episodes seen is the fallback without one)."""
        self._episodes += 1
        self.arbiter.reset()
        # the episode's seed also draws the scene (hole, bias): a stream of its own keeps the two independent
        person_seed = int(np.random.SeedSequence([seed, 0x7E1E]).generate_state(1)[0]) if seed is not None else None
        self.person.reset(self._episodes if person_seed is None else person_seed)


# panda-peg-insert's person (used when no config is given): a 5 mm shaky hand never finds a 0.5 mm gap, and
# handing back after +0.1 progress returned the peg to the policy after two steps of approach or 2.5 mm of depth.
# Measured with a policy that only holds the arm (seeds 0-9, 15 s): 1 mm noise 7/10 successes; 0.5 mm 8/10,
# 2 mm 5/10; push-T's config 0/10. Patience: searching the rim by feel makes no progress for seconds, so a person
# who takes over after 1.5 s of it (push-T's 15 steps) took over 2/3 of the episodes the SFT policy would have
# finished alone and labelled them failures. Measured with an SFT policy that succeeds in 70 % of 40 episodes
# alone: stall 15 steps / regress 0.15 took over 0.93 times per episode and let it finish 20 % alone; 50 / 0.5
# (this) 0.38 times, 57 % alone, 90 % success with the person; 80 steps left the person too little time (72 %).
PEG_INSERT_PERSON = ScriptedPersonConfig(stall_steps=50, regress=0.5, handback_gain=0.5, max_steps=60, noise_std=0.001)


def scripted_person(task: str, config: ScriptedPersonConfig | None = None, seed: int = 0) -> ScriptedPerson:
    """The stand-in for ``task``: its expert as the hand, its progress measure and safety region as the judgement.

    ``config`` None: the task's own (push-T: `ScriptedPersonConfig`'s defaults; peg-insert: `PEG_INSERT_PERSON`).
    """
    if task == "panda-push-t":
        from reflexlab.tasks.panda_push_t.expert import expert_policy
        from reflexlab.tasks.panda_push_t.spec import block_in_workspace, coverage_of

        return ScriptedPerson(expert_policy, coverage_of, block_in_workspace, config or ScriptedPersonConfig(), seed)
    if task == "panda-peg-insert":
        from reflexlab.tasks.panda_peg_insert.expert import expert_policy as peg_expert
        from reflexlab.tasks.panda_peg_insert.spec import in_safety_region, progress_of

        return ScriptedPerson(peg_expert, progress_of, in_safety_region, config or PEG_INSERT_PERSON, seed)
    raise ValueError(f"no scripted person for task {task!r}: it needs the task's expert and a progress measure")
