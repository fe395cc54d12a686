"""A scripted peg-in-hole expert that finds the hole by feel, from the same observation a policy gets.

It never sees the true hole: only the tracker's biased, jittery reports (`config`). Averaging them over the
episode removes the jitter but not the bias, and with 0.5 mm clearance a side a bias of a millimetre or two
lands the peg on the rim. So, as people and robot programs do it:

1. **approach**: fly the tip to a hover point ``HOVER`` above the estimated hole, lined up to 0.4 mm;
2. **descend**: come down at ~20 mm/s; the tip passing below the rim means the peg went in;
3. **search**: stalled on the rim, press down lightly (``PRESS``, ~20 N with the env's force limit) and
   sweep an Archimedean spiral round the estimate (pitch below the 1 mm window the clearance leaves) until
   the peg drops in; the spiral restarts once it has gone past where the bias could plausibly put the hole;
4. **insert**: follow the walls down (no lateral push: the target's x, y is the tip's own); when the peg jams
   (it stops going down above the success depth) **wiggle**: lift a millimetre and shift the lateral target
   by a random fraction of the clearance, then press again. An expert that takes over a peg already in the
   hole (the scripted person) starts here; one that takes over a peg on the rim near the hole starts searching
   there, as a person would, rather than lifting it back to the hover point (measured with an SFT policy and
   the scripted person over 60 episodes: the person's share of steps 0.18 → 0.11, success 0.92 → 0.98, and
   fine-tuning on the person's steps cost the policy 0.04 success instead of 0.11).

A lateral integrator corrects the target for how far the arm's compliance lets the tip lag while it presses
(pressing down also drags a stiff-jointed arm sideways). Every target gets the config's action noise, so
the demonstrations are imperfect and varied. Each step reports its phase for the dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from reflexlab.tasks.panda_peg_insert import constants as C
from reflexlab.tasks.panda_peg_insert.config import PegInsertConfig

PHASES = ("approach", "descend", "search", "insert")
LINED_UP = 0.0004  # m: lateral error at which the hover point counts as reached
DESCENT = 0.003  # m below the tip per step while descending or inserting
PRESS = 0.002  # m below the rim while searching
SPIRAL_PITCH = 0.0008  # m between turns: under the 1 mm window the clearance leaves
SPIRAL_STEP = 0.0012  # m of spiral per step
LATERAL_BOOST = 0.002  # m: the most the lateral target aims past where the tip should go
JAM_STEPS = 2  # steps without going down that make a jam
DROPPED = 0.0005  # m below the rim: the peg has started into the hole (on the rim it sinks in < 0.01 mm)


@dataclass
class ExpertStep:
    """One step of the expert: what it commands, and which phase it is in (`sim.demos` records it)."""

    target: np.ndarray  # peg tip target (x, y, z)
    phase: int  # index into PHASES


class PegInsertExpert:
    """Closed-loop scripted inserter for one scene; ``rng`` draws its action noise and its wiggles."""

    def __init__(self, rng: np.random.Generator, config: PegInsertConfig | None = None) -> None:
        config = config or PegInsertConfig()
        self.rng = rng
        self.noise_std = config.expert_noise_std
        self.max_move = C.MAX_TIP_SPEED * C.CONTROL_DT
        # Search as far as a bias of 3 sigma on both axes at once puts the hole (4.2 sigma from the estimate).
        self.search_radius = max(3.0 * np.hypot(config.hole_bias_std, config.hole_bias_std), 0.002)
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self._hole_sum = np.zeros(2)
        self._hole_n = 0
        self._theta = 0.0
        self._correction = np.zeros(2)
        self._last_z = np.inf
        self._stuck = 0

    def act(self, obs: np.ndarray) -> ExpertStep:
        """The next tip target from an observation (tip x, y, z, tracked hole x, y)."""
        obs = np.asarray(obs, dtype=np.float64)
        first = self._hole_n == 0
        tip, hole = obs[:3], self._estimate(obs[3:5])
        if self.phase != "insert" and tip[2] < C.HOLE_TOP - DROPPED:  # in the hole (also when taking over there)
            self.phase, self._stuck = "insert", 0
        elif first and tip[2] < C.HOLE_TOP + 0.001 and np.linalg.norm(tip[:2] - hole) < self.search_radius:
            self.phase, self._theta = "search", 0.0  # taking over a peg on the rim near the hole: feel for it there
        elif self.phase == "insert" and tip[2] > C.HOLE_TOP + 0.001:  # back out on the rim: search on
            self.phase = "search"
        if self.phase == "approach":
            target = self._approach(tip, hole)
        elif self.phase == "descend":
            target = self._descend(tip, hole)
        elif self.phase == "search":
            target = self._search(tip, hole)
        else:
            target = self._insert(tip)
        self._last_z = tip[2]
        target = target + self.rng.normal(0.0, self.noise_std, 3)
        return ExpertStep(target, PHASES.index(self.phase))

    def _estimate(self, tracked: np.ndarray) -> np.ndarray:
        """The episode's mean tracked hole position: the jitter averages out, the bias stays."""
        self._hole_sum += tracked
        self._hole_n += 1
        return self._hole_sum / self._hole_n

    def _approach(self, tip: np.ndarray, hole: np.ndarray) -> np.ndarray:
        hover = np.array([*hole, C.HOLE_TOP + C.HOVER])
        if np.linalg.norm(tip[:2] - hole) < LINED_UP and abs(tip[2] - hover[2]) < 0.0015:
            self.phase, self._correction = "descend", np.zeros(2)
            return self._descend(tip, hole)
        return _toward(tip, hover, self.max_move)

    def _descend(self, tip: np.ndarray, hole: np.ndarray) -> np.ndarray:
        on_rim = tip[2] < C.HOLE_TOP + 0.001 and self._last_z - tip[2] < 0.0005
        if on_rim:
            self.phase, self._theta = "search", 0.0
            return self._search(tip, hole)
        return np.array([*self._lateral(tip, hole), tip[2] - DESCENT])

    def _search(self, tip: np.ndarray, hole: np.ndarray) -> np.ndarray:
        """The next point of the spiral round the hole estimate (restarting once past the search radius)."""
        radius = SPIRAL_PITCH * self._theta / (2 * np.pi)
        if radius > self.search_radius:
            self._theta = radius = 0.0
        self._theta += SPIRAL_STEP / max(radius, SPIRAL_PITCH)
        point = hole + radius * np.array([np.cos(self._theta), np.sin(self._theta)])
        return np.array([*self._lateral(tip, point), C.HOLE_TOP - PRESS])

    def _insert(self, tip: np.ndarray) -> np.ndarray:
        self._stuck = self._stuck + 1 if self._last_z - tip[2] < 0.0003 else 0
        if self._stuck >= JAM_STEPS:  # jammed on a wall: lift a little and shift within the clearance
            self._stuck = 0
            shift = self.rng.uniform(-0.5, 0.5, 2) * (C.HOLE_SIZE - C.PEG_SIZE)
            return np.array([*(tip[:2] + shift), tip[2] + 0.001])
        return np.array([*tip[:2], tip[2] - DESCENT])

    def _lateral(self, tip: np.ndarray, desired: np.ndarray) -> np.ndarray:
        """The x, y target that brings the tip to ``desired`` despite friction and the arm's compliance (pressing
        down drags a stiff-jointed arm sideways): an integral correction, bounded so a caught peg is not forced."""
        self._correction = np.clip(self._correction + 0.25 * (desired - tip[:2]), -LATERAL_BOOST, LATERAL_BOOST)
        return desired + self._correction


def _toward(a: np.ndarray, b: np.ndarray, max_move: float) -> np.ndarray:
    d = b - a
    n = np.linalg.norm(d)
    return b if n <= max_move else a + d * (max_move / n)


def expert_policy(
    seed: int, config: PegInsertConfig | None = None
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[], None]]:
    """The expert as a policy of the task's observation: (act, reset)."""
    expert = PegInsertExpert(np.random.default_rng(seed), config)

    def act(obs: np.ndarray) -> np.ndarray:
        return expert.act(obs).target

    return act, expert.reset
