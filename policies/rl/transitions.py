"""Chunk-level transitions: the unit RL-100's critics (`policies.rl.iql`) and OPE (`policies.rl.ope`) work in.

RL-100 acts in chunks: at a decision step t the policy reads its observation history (To observations, the oldest
first, padded at the episode start by repeating the first, exactly as `policies.generative.data.ChunkWindows` pads
the policy's own windows) and the robot executes the next ``chunk`` actions (the Spec's execution horizon Ta). A
transition is one such decision: (window, executed chunk, Σ_{j<len} γ^j r_{t+j}, next window, done, γ^len), and
decision points are steps 0, chunk, 2·chunk, … of each episode.

How an episode's end is read from what the recorder writes (`real.record`: ``next.terminated``, ``next.truncated``,
``next.success`` per step, ``next.done`` also on the last step whatever the reason):

* **Success** ends the task: the episode is cut after the first step whose ``next.success`` is true (the same step is
  ``next.terminated`` when the env stops there; a dataset whose env went on after success has its later steps left
  out, since RL-100's sparse reward is paid once). The chunk holding that step is ``done``: no bootstrap.
* **Terminal failure** (``next.terminated`` on the last step without success: a failure detector fired): ``done``.
* **Anything else** is a truncation (time limit, stale state, non-finite observation, a recording stopped by hand):
  the state is no MDP terminal, so the last chunk bootstraps. The observation reached after the last step is not
  recorded (a row holds the observation *before* its action), so the last step itself is left out and the chunk
  before it bootstraps from the last recorded observation, exactly. Under the ``"success"`` reward that step's reward
  is 0 (a success would have been terminal); under ``"recorded"`` its reward is lost.

A ``done`` transition whose terminal step is the episode's last has no recorded next observation either: its
``next_window``/``next_state`` repeat the last recorded ones. Nothing should read them: the critics' bootstrap is
masked by ``done`` and the dynamics model fits next windows on non-terminal transitions only.

A chunk cut short by the episode's end pads its actions by repeating the last executed one and records the real
``length``; its ``discount`` is γ^length. Interventions are kept (IQL learns from any behaviour); ``by_policy`` says
whether the policy commanded every step of a chunk, for learners that want only its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Literal

import numpy as np

from reflexlab.dataset import Dataset
from reflexlab.spec import Spec

Reward = Literal["success", "recorded"]


@dataclass(frozen=True)
class ChunkTransitions:
    """N chunk transitions, row-aligned arrays (raw units; the learners standardise).

    Attributes:
        window: (N, To, obs_dim) the policy's observation history at the decision step, oldest first.
        state: (N, obs_dim) the observation at the decision step (``window[:, -1]``).
        actions: (N, chunk, A) the executed actions, padded past ``length`` by repeating the last one.
        length: (N,) how many of the chunk's steps were executed (< chunk only at an episode's end).
        reward: (N,) Σ_{j<length} γ^j r_{t+j}.
        next_window, next_state: the history and observation at the next decision step.
        done: (N,) the episode ended inside the chunk in success or a terminal failure: no bootstrap.
        discount: (N,) γ^length, the bootstrap factor.
        episode, step: where the transition starts, for bookkeeping.
        by_policy: (N,) no step of the chunk was a person's.
        gamma: the γ rewards and discounts were computed with.
    """

    window: np.ndarray
    state: np.ndarray
    actions: np.ndarray
    length: np.ndarray
    reward: np.ndarray
    next_window: np.ndarray
    next_state: np.ndarray
    done: np.ndarray
    discount: np.ndarray
    episode: np.ndarray
    step: np.ndarray
    by_policy: np.ndarray
    gamma: float

    def __len__(self) -> int:
        return len(self.reward)

    @property
    def obs_horizon(self) -> int:
        return int(self.window.shape[1])

    @property
    def obs_dim(self) -> int:
        return int(self.window.shape[2])

    @property
    def chunk(self) -> int:
        return int(self.actions.shape[1])

    @property
    def action_dim(self) -> int:
        return int(self.actions.shape[2])

    @property
    def action_std(self) -> np.ndarray:
        """(A,) the std of each action dimension over every executed step (padding left out); 1 where constant."""
        executed = self.actions[np.arange(self.chunk)[None, :] < self.length[:, None]]
        std = executed.std(axis=0) if len(executed) else np.ones(self.action_dim)
        return np.where(std > 0, std, 1.0)

    def subset(self, rows: np.ndarray) -> ChunkTransitions:
        """The transitions at ``rows`` (indices or a boolean mask): held-out splits, the policy's own chunks."""
        picked = {f.name: getattr(self, f.name)[rows] for f in fields(self) if f.name != "gamma"}
        return ChunkTransitions(**picked, gamma=self.gamma)


def chunk_transitions(
    ds: Dataset,
    spec: Spec,
    gamma: float,
    *,
    chunk: int | None = None,
    reward: Reward = "success",
) -> ChunkTransitions:
    """Every chunk transition of ``ds``'s episodes, decision points every ``chunk`` steps from step 0.

    ``spec``: the policy's (chunked) Spec: its ``observation_horizon`` sizes the windows and its
    ``execution_horizon`` is the default ``chunk``. ``reward``: ``"success"`` pays 1 on the step where
    ``next.success`` first becomes true and 0 elsewhere (sparse, so γ makes speed matter); ``"recorded"`` takes the
    dataset's ``next.reward`` column. Raises `SpecMismatchError` for a dataset recorded under another task's Spec,
    ValueError naming the episode for a missing column. A truncated episode of one step yields no transition (its only
    step has no recorded outcome) and is left out; a dataset of nothing else is refused.
    """
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    chunk = spec.execution_horizon if chunk is None else chunk
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if reward not in ("success", "recorded"):
        raise ValueError(f"reward must be 'success' or 'recorded', got {reward!r}")
    if ds.num_episodes == 0:
        raise ValueError("the dataset has no episodes to cut transitions from")
    if ds.spec is not None:  # episodes of another robot or task would be read as this policy's observations
        spec.task_interface().check_compatible(ds.spec.task_interface(), context="dataset vs policy Spec")
    every = [
        _episode_transitions(ds.episode(i), i, spec.observation_horizon, chunk, gamma, reward)
        for i in range(ds.num_episodes)
    ]
    parts = [p for p in every if p is not None]
    if not parts:
        raise ValueError(f"none of the dataset's {ds.num_episodes} episodes has a step with a recorded outcome")
    columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    return ChunkTransitions(**columns, gamma=float(gamma))


def concat_transitions(*parts: ChunkTransitions) -> ChunkTransitions:
    """One set of transitions from several datasets (their episode numbers are offset to stay distinct)."""
    offset, columns = 0, []
    for part in parts:
        columns.append(dataclasses.replace(part, episode=part.episode + offset))
        offset += int(part.episode.max()) + 1 if len(part) else 0
    merged = {
        f.name: np.concatenate([getattr(c, f.name) for c in columns])
        for f in fields(ChunkTransitions)
        if f.name != "gamma"
    }
    return ChunkTransitions(**merged, gamma=parts[0].gamma)


def _episode_transitions(
    steps: dict[str, np.ndarray], episode: int, obs_horizon: int, chunk: int, gamma: float, reward: Reward
) -> dict[str, np.ndarray] | None:
    """One episode's transitions as the columns of `ChunkTransitions` (see the module docstring for the end rules);
    None for a truncated episode of one step, whose only step has no recorded outcome."""
    needed = ["observation.state", "action", "next.terminated", "next.success", "is_intervention"]
    needed += ["next.reward"] if reward == "recorded" else []
    for key in needed:
        if key not in steps:
            raise ValueError(f"episode {episode} has no {key!r} column: chunk transitions need {', '.join(needed)}")
    obs = np.asarray(steps["observation.state"], dtype=np.float32)
    actions = np.asarray(steps["action"], dtype=np.float32)
    success = np.asarray(steps["next.success"], dtype=bool)
    person = np.asarray(steps["is_intervention"], dtype=bool)
    length = len(obs)
    if success.any():
        end, terminal = int(np.argmax(success)) + 1, True
    elif bool(np.asarray(steps["next.terminated"], dtype=bool)[-1]):
        end, terminal = length, True
    else:  # truncated: the last step's outcome is not recorded, so it cannot be a transition of its own
        end, terminal = length - 1, False
    if end < 1:  # e.g. a real episode stopped at its first step by a stale state: nothing to learn, nothing wrong
        return None
    if reward == "success":
        rewards = np.zeros(end)
        rewards[end - 1] = float(terminal and success[end - 1])
    else:
        rewards = np.asarray(steps["next.reward"], dtype=np.float64)[:end]

    starts = np.arange(0, end, chunk)
    offsets = np.arange(chunk)
    executed = np.minimum(starts + chunk, end) - starts  # real length of each chunk
    steps_of = np.minimum(starts[:, None] + offsets, starts[:, None] + executed[:, None] - 1)  # pad: repeat the last
    powers = gamma ** offsets.astype(np.float64)
    in_chunk = offsets < executed[:, None]
    chunk_rewards = (np.where(in_chunk, rewards[steps_of], 0.0) * powers).sum(axis=1)
    following = np.minimum(starts + executed, length - 1)  # the next decision step (the last recorded, at the end)
    done = terminal & (starts + executed == end)
    return {
        "window": _windows(obs, starts, obs_horizon),
        "state": obs[starts],
        "actions": actions[steps_of],
        "length": executed.astype(np.int64),
        "reward": chunk_rewards,
        "next_window": _windows(obs, following, obs_horizon),
        "next_state": obs[following],
        "done": done,
        "discount": gamma ** executed.astype(np.float64),
        "episode": np.full(len(starts), episode, dtype=np.int64),
        "step": starts.astype(np.int64),
        "by_policy": ~np.where(in_chunk, person[steps_of], False).any(axis=1),
    }


def _windows(obs: np.ndarray, steps: np.ndarray, obs_horizon: int) -> np.ndarray:
    """(len(steps), To, obs_dim) histories ending at ``steps``, the first observation repeated before the start."""
    index = np.clip(steps[:, None] - (obs_horizon - 1) + np.arange(obs_horizon), 0, None)
    return obs[index]
