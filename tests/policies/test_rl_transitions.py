"""policies.rl.transitions: chunk transitions cut from episodes the real dataset writer stores.

Observations encode (episode, step) so every window, next window and padding can be checked by value.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from policies.rl.transitions import chunk_transitions
from reflexlab.dataset import DatasetWriter, load_dataset
from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec, SpecMismatchError

SPEC = Spec(
    "toy", "reach", (ObsGroup("policy", (ObsTerm("x", 2, "m"),)),), "policy",
    ActionSpec("ee_position", ("dx", "dy"), 1.0, (0.0, 0.0), (-1.0, -1.0), (1.0, 1.0)), 10.0, 10.0,
)  # fmt: skip
POLICY = dataclasses.replace(SPEC, observation_horizon=2, action_chunk=4, execution_horizon=3)  # To 2, Ta 3
GAMMA = 0.9


def obs(episode: int, t: int) -> np.ndarray:
    return np.array([episode, t], dtype=np.float32)


def write(root: Path, episodes: list[dict]) -> None:
    """Each episode: length, how it ends ("success", "failure", "timeout"), a success "at" a step that goes on, and
    the steps a "person" commanded."""
    with DatasetWriter(root, 10, "toy", {"observation.state": (2,), "action": (2,)}, SPEC) as writer:
        for e, spec in enumerate(episodes):
            length, end = spec["length"], spec["end"]
            for t in range(length):
                last = t == length - 1
                success = (last and end == "success") or t == spec.get("at")
                writer.add_frame(
                    {"observation.state": obs(e, t), "action": np.array([t, -t], dtype=np.float32)},
                    reward=float(t),
                    success=success,
                    terminated=last and end in ("success", "failure"),
                    truncated=last and end == "timeout",
                    is_intervention=t in spec.get("person", ()),
                )
            writer.save_episode("reach")


def test_a_successful_episode_is_cut_into_chunks_with_padding_and_no_bootstrap(tmp_path: Path) -> None:
    write(tmp_path / "ds", [{"length": 7, "end": "success", "person": (4,)}])
    t = chunk_transitions(load_dataset(tmp_path / "ds"), POLICY, GAMMA)
    np.testing.assert_array_equal(t.step, [0, 3, 6])
    np.testing.assert_array_equal(t.length, [3, 3, 1])
    np.testing.assert_array_equal(t.window[0], [obs(0, 0), obs(0, 0)])  # padded by repeating the first
    np.testing.assert_array_equal(t.window[1], [obs(0, 2), obs(0, 3)])
    np.testing.assert_array_equal(t.state, [obs(0, 0), obs(0, 3), obs(0, 6)])
    np.testing.assert_array_equal(t.next_window[0], [obs(0, 2), obs(0, 3)])
    np.testing.assert_array_equal(t.actions[2, :, 0], [6, 6, 6])  # the short last chunk repeats its action
    np.testing.assert_allclose(t.reward, [0, 0, 1])  # sparse: 1 on the success step only
    np.testing.assert_array_equal(t.done, [False, False, True])
    np.testing.assert_allclose(t.discount, [GAMMA**3, GAMMA**3, GAMMA])
    np.testing.assert_array_equal(t.by_policy, [True, False, True])  # step 4 was a person's
    assert (t.obs_horizon, t.obs_dim, t.chunk, t.action_dim, len(t)) == (2, 2, 3, 2, 3)
    np.testing.assert_allclose(t.action_std, [np.std(np.arange(7)), np.std(np.arange(7))])  # padding left out


def test_success_late_in_a_chunk_is_discounted_and_speed_matters(tmp_path: Path) -> None:
    write(tmp_path / "ds", [{"length": 5, "end": "success"}, {"length": 3, "end": "success"}])
    t = chunk_transitions(load_dataset(tmp_path / "ds"), POLICY, GAMMA)
    np.testing.assert_array_equal(t.episode, [0, 0, 1])
    np.testing.assert_allclose(t.reward, [0, GAMMA**1, GAMMA**2])  # success at step 4 (2nd of its chunk), step 2
    np.testing.assert_allclose(t.discount, [GAMMA**3, GAMMA**2, GAMMA**3])


def test_a_timeout_bootstraps_from_the_last_recorded_observation(tmp_path: Path) -> None:
    write(tmp_path / "ds", [{"length": 7, "end": "timeout"}])
    t = chunk_transitions(load_dataset(tmp_path / "ds"), POLICY, GAMMA)
    np.testing.assert_array_equal(t.step, [0, 3])  # step 6's outcome is not recorded: it is left out
    assert not t.done.any() and (t.reward == 0).all()
    np.testing.assert_array_equal(t.next_state[1], obs(0, 6))
    np.testing.assert_array_equal(t.next_window[1], [obs(0, 5), obs(0, 6)])


def test_a_terminal_failure_ends_without_bootstrap_or_reward(tmp_path: Path) -> None:
    write(tmp_path / "ds", [{"length": 4, "end": "failure"}])
    t = chunk_transitions(load_dataset(tmp_path / "ds"), POLICY, GAMMA)
    np.testing.assert_array_equal(t.done, [False, True])
    np.testing.assert_array_equal(t.reward, [0, 0])
    np.testing.assert_array_equal(t.next_state[1], obs(0, 3))  # no next observation recorded: the last one, unread


def test_steps_after_a_first_success_that_did_not_end_the_episode_are_left_out(tmp_path: Path) -> None:
    write(tmp_path / "ds", [{"length": 9, "end": "timeout", "at": 3}])
    t = chunk_transitions(load_dataset(tmp_path / "ds"), POLICY, GAMMA)
    np.testing.assert_array_equal(t.step, [0, 3])
    np.testing.assert_array_equal(t.length, [3, 1])
    np.testing.assert_array_equal(t.done, [False, True])
    np.testing.assert_array_equal(t.next_state[1], obs(0, 4))  # recorded: the episode went on
    np.testing.assert_allclose(t.reward, [0, 1])


def test_recorded_rewards_and_a_chunk_size_other_than_the_spec(tmp_path: Path) -> None:
    write(tmp_path / "ds", [{"length": 5, "end": "failure"}])
    t = chunk_transitions(load_dataset(tmp_path / "ds"), POLICY, GAMMA, chunk=2, reward="recorded")
    np.testing.assert_allclose(t.reward, [0 + GAMMA * 1, 2 + GAMMA * 3, 4])  # the recorded reward at step t is t
    np.testing.assert_array_equal(t.length, [2, 2, 1])
    mask = t.subset(t.step > 0)
    np.testing.assert_array_equal(mask.step, [2, 4])
    assert mask.gamma == GAMMA


def test_bad_inputs_are_refused_naming_the_episode(tmp_path: Path) -> None:
    write(tmp_path / "ds", [{"length": 4, "end": "success"}, {"length": 1, "end": "timeout"}])
    ds = load_dataset(tmp_path / "ds")
    assert set(chunk_transitions(ds, POLICY, GAMMA).episode) == {0}  # a one-step truncated episode has no outcome
    write(tmp_path / "short", [{"length": 1, "end": "timeout"}])
    with pytest.raises(ValueError, match="none of the dataset's 1 episodes has a step with a recorded outcome"):
        chunk_transitions(load_dataset(tmp_path / "short"), POLICY, GAMMA)
    with pytest.raises(ValueError, match="gamma"):
        chunk_transitions(ds, POLICY, 0.0)
    other_task = dataclasses.replace(POLICY, task="push")
    with pytest.raises(SpecMismatchError, match="task"):
        chunk_transitions(ds, other_task, GAMMA)

    class WithoutOutcomes:  # a LeRobot-written dataset: no RL columns
        num_episodes, spec = 1, None

        def episode(self, i: int) -> dict[str, np.ndarray]:
            return {"observation.state": np.zeros((3, 2)), "action": np.zeros((3, 2))}

    with pytest.raises(ValueError, match=r"episode 0 has no 'next\.terminated' column"):
        chunk_transitions(WithoutOutcomes(), POLICY, GAMMA)  # type: ignore[arg-type]
