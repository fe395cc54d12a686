"""Serving action-chunk models: observation history in, one target per control step out.

A generator (`Spec.is_generator`) reads the last ``observation_horizon`` (To) policy observations
and predicts ``action_chunk`` (H) actions, one per policy step, index 0 aligned with the oldest
observation, so index To−1 is the action for the step of the newest observation. The controller
samples a chunk every policy period; the `ChunkExecutor` turns the chunks into the target to
command at any time t, which the node needs ten times per policy step (policy 100 Hz, commands
1 kHz):

* **receding horizon**: the latest chunk's actions To−1 … To−1+Ta−1 (Ta = ``execution_horizon``),
  one per policy period from the chunk's stamp. A chunk is trusted for Ta periods at most: if no
  newer chunk has come by then, the last of them holds and the exhaustion is counted.
* **temporal ensembling** (ACT): the action for a policy step is the average of every chunk's
  action for that step (within each chunk's Ta), weighted exp(−m·i) with i the chunk's age in
  policy steps. m > 0 favours newer chunks; ACT's paper counts i from the oldest chunk instead,
  which is m < 0 here.

Between policy steps the target either moves linearly from one step's action to the next
("linear": a 1 kHz stream without 100 Hz stairs) or holds ("hold", as a plain policy's does).

Plain numpy, no ROS: the policy node, a real-robot env and tests share it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from reflexlab.spec import Spec

ChunkExecution = Literal["receding", "ensemble"]
Interpolation = Literal["linear", "hold"]
_ROUND_OFF = 1e-9  # policy steps
CHUNK_EXECUTIONS: tuple[str, ...] = ("receding", "ensemble")
INTERPOLATIONS: tuple[str, ...] = ("linear", "hold")


@dataclass(frozen=True)
class ChunkConfig:
    """How chunks become targets; the policy node's ``chunk_execution``, ``ensemble_decay``, ``interpolation``."""

    execution: ChunkExecution = "receding"
    ensemble_decay: float = 0.01  # m in exp(−m·age); ACT's 0.01 makes ensembling close to a plain average
    interpolation: Interpolation = "linear"

    def __post_init__(self) -> None:
        if self.execution not in CHUNK_EXECUTIONS:
            raise ValueError(f"chunk_execution must be one of {CHUNK_EXECUTIONS}, got {self.execution!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if not math.isfinite(self.ensemble_decay):
            raise ValueError(f"ensemble_decay must be finite, got {self.ensemble_decay}")


class ObservationHistory:
    """The last ``length`` policy observations (or camera frames), oldest first: what a generator reads.

    Push once per policy step. The first push fills every slot with that observation, as training
    pads the start of an episode, so the first chunk can be sampled at once. A plain shift rather
    than a ring index: To is a handful of rows and the model wants them contiguous, oldest first.
    """

    def __init__(self, length: int, size: int | tuple[int, ...], dtype: type = np.float32) -> None:
        # size: an observation's length, or a frame's shape (a camera's (3, H, W) uint8 history)
        self._buf = np.zeros((length, *np.atleast_1d(size)), dtype=dtype)
        self._empty = True

    def reset(self) -> None:
        self._empty = True

    def push(self, obs: np.ndarray) -> np.ndarray:
        """Append the newest observation; returns a copy of the history (length, *size), oldest first."""
        if self._empty:
            self._buf[:] = obs
            self._empty = False
        else:
            self._buf[:-1] = self._buf[1:]
            self._buf[-1] = obs
        return self._buf.copy()


class ChunkExecutor:
    """Chunks stamped at the policy rate in, the action to command at any time t out; see the module docstring.

    Args:
        observation_horizon: To; the chunk's index To−1 is the action for the chunk's own stamp.
        execution_horizon: Ta; how many of a chunk's actions (from To−1) may be executed.
        action_chunk: H, the chunk length.
        policy_rate_hz: the spacing of a chunk's actions and of re-plans.
        config: receding/ensemble and linear/hold.
    """

    def __init__(
        self,
        observation_horizon: int,
        execution_horizon: int,
        action_chunk: int,
        policy_rate_hz: float,
        config: ChunkConfig | None = None,
    ) -> None:
        first = observation_horizon - 1
        if min(observation_horizon, execution_horizon) < 1 or first + execution_horizon > action_chunk:
            raise ValueError(
                f"execution_horizon {execution_horizon} from index {first} does not fit action_chunk {action_chunk}"
            )
        if not policy_rate_hz > 0:
            raise ValueError(f"policy rate must be positive, got {policy_rate_hz}")
        self.first = first
        self.horizon = execution_horizon
        self.chunk_length = action_chunk
        self.period = 1.0 / policy_rate_hz
        self.config = config or ChunkConfig()
        self.replans = 0  # chunks taken
        self.exhaustions = 0  # times the latest chunk's horizon ran out before a newer one came
        self.reset()

    @classmethod
    def from_spec(cls, spec: Spec, policy_rate_hz: float, config: ChunkConfig | None = None) -> ChunkExecutor:
        return cls(spec.observation_horizon, spec.execution_horizon, spec.action_chunk, policy_rate_hz, config)

    def reset(self) -> None:
        """Forget every chunk (the counters keep counting): the next `add` starts a fresh plan."""
        # Only the last Ta chunks can cover a step of the latest chunk's horizon.
        self._chunks: deque[tuple[float, np.ndarray]] = deque(maxlen=self.horizon)
        self._plan: np.ndarray | None = None  # (Ta, A): the action of each policy step from the latest stamp
        self._stamp = -math.inf
        self.exhausted = False

    def add(self, chunk: np.ndarray, stamp: float) -> None:
        """A new chunk (H, A) of raw actions, stamped with the time (s) of its newest observation.

        Raises ValueError for a wrong shape, non-finite values or a stamp that does not increase:
        such a chunk is not taken and the previous plan continues (towards its horizon).
        """
        c = np.array(chunk, dtype=np.float64)  # a copy: the caller may reuse its buffer
        size = None if self._plan is None else self._plan.shape[1]
        if c.ndim != 2 or c.shape[0] != self.chunk_length or size not in (None, c.shape[1]):
            want = f"({self.chunk_length}, {size or 'action size'})"
            raise ValueError(f"chunk has shape {np.shape(chunk)}, expected {want}")
        if not np.isfinite(c).all():
            raise ValueError("chunk has non-finite actions")
        if not stamp > self._stamp:
            raise ValueError(f"chunk stamp {stamp} s is not after the last one ({self._stamp} s)")
        self._chunks.append((stamp, c[self.first : self.first + self.horizon]))
        self._stamp = stamp
        self._plan = self._ensemble() if self.config.execution == "ensemble" else self._chunks[-1][1]
        self.exhausted = False
        self.replans += 1

    def __call__(self, t: float) -> np.ndarray | None:
        """The action (raw, float64) to command at time ``t`` (s, the stamps' clock); None before any chunk."""
        if self._plan is None:
            return None  # the safety filter holds on a missing target
        u = (t - self._stamp) / self.period  # policy steps since the latest chunk's stamp
        # A hair before a step boundary counts as on it: float round-off of t − stamp (1.2 − 1.0 =
        # 0.19999…) must not delay a step by a whole period.
        k = max(math.floor(u + _ROUND_OFF), 0)
        if k >= self.horizon:  # no newer chunk within Ta periods: hold the last trusted action
            if not self.exhausted:
                self.exhausted = True
                self.exhaustions += 1
            return self._plan[-1].copy()
        if self.config.interpolation == "hold" or k + 1 == self.horizon:
            return self._plan[k].copy()  # the horizon's last action has no successor to move towards
        return self._plan[k] + max(u - k, 0.0) * (self._plan[k + 1] - self._plan[k])

    def _ensemble(self) -> np.ndarray:
        """Per policy step of the latest chunk's horizon: the exp(−m·age)-weighted mean over the covering chunks."""
        plan = np.zeros_like(self._chunks[-1][1])
        weight = np.zeros(self.horizon)
        for stamp, actions in self._chunks:
            # Chunks come once per period with jitter: their age is a whole number of policy steps.
            age = round((self._stamp - stamp) / self.period)
            if age >= self.horizon:
                continue  # a gap in the re-plans left this chunk's horizon behind
            w = math.exp(-self.config.ensemble_decay * age)
            plan[: self.horizon - age] += w * actions[age:]
            weight[: self.horizon - age] += w
        return plan / weight[:, None]  # the latest chunk (age 0) covers every step: no zero weight
