"""A scripted person at the deadman: the stand-in for a human intervener in sim and sim-as-real RL runs.

Real-world RL needs someone who takes over when the policy goes wrong and hands back when it is back on track;
benchmarks over seeds cannot wait for a person. `ScriptedPerson` watches the task's progress and decides when to
intervene; while it does, a noisy copy of the task's scripted expert is the person's hand. It acts only through
the real `teleop.arbiter.InterventionArbiter`, exactly as a device does (`ScriptedIntervention`: the deadman
"button" is the person's decision), so takeover counts, handback blending and the ``is_intervention`` marks are the
ones a human run records.

When it takes over (each with the reason in ``ScriptedPerson.last_reason``):

* **stall**: the policy made no progress (``min_gain``) for ``stall_steps`` steps while the robot stood about
  (its ``effector`` stayed within ``idle_radius`` of where it was over those steps), or for ``patience_steps``
  whatever it did. A robot on its way somewhere is not stalled: push-T's policy travels 0.3–0.5 m to the block
  before any coverage changes and walks round it to push another face, and a person who took over after 1.5 s
  without progress took over 89 % of the episodes the SFT policy finishes alone (the first takeover 1.6 s in,
  the pusher 17–19 cm from where it was); ``idle_radius`` None judges progress alone;
* **unsafe**: the observation left the safety region (``safe(obs)`` is False);
* **regress**: progress fell ``regress`` below its best since the policy took over: about to fail.

It hands back once progress rose ``handback_gain`` since it took over, or after ``max_steps`` (an intervention
never lasts for ever), then lets the policy drive ``grace_steps`` before judging it again.
"""

from __future__ import annotations

import time
from collections import deque
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
    idle_radius: float | None = None  # m; None: stalled means no progress, however the robot moves
    patience_steps: int | None = None  # no progress for this long is a stall even while the robot moves
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
        effector: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        if config.idle_radius is not None and effector is None:
            raise ValueError("idle_radius needs the effector's position (effector=...) to tell idle from busy")
        self.expert, self.progress, self.safe, self.config, self.effector = expert, progress, safe, config, effector
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
        self._path: deque[np.ndarray] = deque(maxlen=self.config.stall_steps)  # the effector, newest last

    def wants_control(self, obs: np.ndarray) -> bool:
        """This step's decision (call once per step, before the step's action is chosen)."""
        c, now = self.config, float(self.progress(obs))
        self._steps += 1
        if self.effector is not None:
            self._path.append(np.asarray(self.effector(obs), dtype=np.float64))
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
        elif self._stalled(self._steps - self._best_at):
            reason = "stall"
        if reason:
            self.engaged, self._steps, self._start, self.last_reason = True, 0, now, reason
            self._reset_expert()  # the expert plans afresh from where the policy left the scene
        return self.engaged

    def _stalled(self, without_progress: int) -> bool:
        """No progress for ``without_progress`` steps: long enough, given how much the robot moved meanwhile?"""
        c = self.config
        if c.patience_steps is not None and without_progress >= c.patience_steps:
            return True
        if without_progress < c.stall_steps:
            return False
        if c.idle_radius is None:
            return True
        recent = np.array(self._path)  # the last stall_steps positions (the deque's length)
        return bool(np.linalg.norm(recent - recent.mean(0), axis=1).max() <= c.idle_radius)

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

# panda-push-t's person. Measured with a 200-demonstration SFT (0.725 alone over 40 episodes, seeds 200000-39,
# `ScriptedPersonConfig()` before this): that person took over 93 % of the episodes the SFT finishes alone (3.1
# takeovers an episode, 56 % of the steps; 0.975 with it), most 1.6 s in while the pusher travelled to the block.
# Stalled only while the pusher stands within 1 cm, else after 6 s: 72 % (0.85 with the person); coverage also
# drops 0.15-0.3 while a successful push turns the T, so regress 0.3: 55 %, 1.0 takeovers an episode, 15 % of the
# steps, but it rescued only 55 % of the failures (0.825), handing back after +0.1; handing back after +0.3
# (this): 55 %, 24 % of the steps, 73 % rescued, 0.875. A 4 s patience: 76 % and 0.90. No coverage rule tells a
# T being turned from a T being lost, so some good episodes are always cut.
PUSH_T_PERSON = ScriptedPersonConfig(idle_radius=0.01, patience_steps=60, regress=0.3, handback_gain=0.3, max_steps=80)


def scripted_person(task: str, config: ScriptedPersonConfig | None = None, seed: int = 0) -> ScriptedPerson:
    """The stand-in for ``task``: its expert as the hand, its progress measure and safety region as the judgement.

    ``config`` None: the task's own (`PUSH_T_PERSON`, `PEG_INSERT_PERSON`). The effector the person watches is the
    pusher (push-T observations start with its x, y) or the peg tip (x, y, z first).
    """
    if task == "panda-push-t":
        from reflexlab.tasks.panda_push_t.expert import expert_policy
        from reflexlab.tasks.panda_push_t.spec import block_in_workspace, coverage_of

        config = config or PUSH_T_PERSON
        return ScriptedPerson(expert_policy, coverage_of, block_in_workspace, config, seed, lambda obs: obs[:2])
    if task == "panda-peg-insert":
        from reflexlab.tasks.panda_peg_insert.expert import expert_policy as peg_expert
        from reflexlab.tasks.panda_peg_insert.spec import in_safety_region, progress_of

        config = config or PEG_INSERT_PERSON
        return ScriptedPerson(peg_expert, progress_of, in_safety_region, config, seed, lambda obs: obs[:3])
    raise ValueError(f"no scripted person for task {task!r}: it needs the task's expert and a progress measure")
