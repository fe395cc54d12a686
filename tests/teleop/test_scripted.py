"""teleop.scripted: the scripted person, through the real arbiter, on the simulated push-T robot.

A policy that never pushes stalls; the person takes over after ``stall_steps``, makes progress with the noisy expert,
hands back through the arbiter's blend and lets the policy drive again. Episodes with the person succeed where the
policy alone cannot; every takeover is bounded; an unsafe state triggers at once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from sim.single_env import SimSingleEnv
from teleop.scripted import ScriptedIntervention, ScriptedPerson, ScriptedPersonConfig, scripted_person


def run(env: SimSingleEnv, seed: int) -> list[dict]:
    """One episode of a policy that holds the pusher where it is; the steps' infos."""
    obs, _ = env.reset(seed=seed)
    infos, done = [], False
    while not done:
        obs, _, terminated, truncated, info = env.step(np.asarray(obs[:2], dtype=np.float64))
        infos.append(info)
        done = terminated or truncated
    return infos


def test_the_person_takes_over_a_stalled_policy_and_hands_back_through_the_arbiter() -> None:
    config = ScriptedPersonConfig(stall_steps=10, max_steps=30, handback_gain=0.1, grace_steps=5)
    intervention = ScriptedIntervention(scripted_person("panda-push-t", config))
    with_person = SimSingleEnv("panda-push-t", episode_steps=200, intervention=intervention)
    alone = SimSingleEnv("panda-push-t", episode_steps=200)
    successes = {"person": 0, "alone": 0}
    for seed in range(4):
        infos = run(with_person, seed)
        sources = [i["source"] for i in infos]
        assert sources[:10] == ["policy"] * 10, "the person judged the policy before it had stalled"
        assert sources[10] == "teleop" and infos[10]["is_intervention"] and infos[10]["reason"] == "stall"
        runs = _runs([s == "teleop" for s in sources])
        assert all(length <= config.max_steps for length in runs), "a takeover outlasted max_steps"
        if "handback" in sources:  # the arbiter blends back to the policy, and marks it as not the policy's
            first = sources.index("handback")
            assert all(infos[first + k]["is_intervention"] for k in range(min(3, len(infos) - first)))
        successes["person"] += int(infos[-1]["success"])
        successes["alone"] += int(run(alone, seed)[-1]["success"])
    assert successes["alone"] == 0 and successes["person"] >= 2, successes
    assert intervention.arbiter.counts.interventions >= 1


def test_an_unsafe_state_brings_the_person_in_at_once() -> None:
    person = ScriptedPerson(
        lambda seed: (lambda obs: np.asarray(obs[:2]), lambda: None), lambda obs: 0.0, lambda obs: False
    )
    assert person.wants_control(np.zeros(6)) and person.last_reason == "unsafe"
    c = ScriptedPersonConfig()
    decisions = [person.wants_control(np.zeros(6)) for _ in range(c.max_steps + c.grace_steps + 1)]
    assert all(decisions[: c.max_steps - 1]) and not decisions[c.max_steps - 1]  # never longer than max_steps
    assert person.last_reason == "unsafe" and not any(decisions[c.max_steps : c.max_steps + c.grace_steps])
    assert decisions[-1], "after the grace period an unsafe state brings the person back"


def test_a_robot_on_its_way_is_not_stalled_until_the_person_runs_out_of_patience() -> None:
    """Push-T's person: 1.5 s without coverage is a stall only while the pusher stands about; a pusher that keeps
    circling (3 cm round where it started, never touching the block) gets ``patience_steps``."""
    config = ScriptedPersonConfig(stall_steps=15, idle_radius=0.01, patience_steps=40)

    def first_takeover(policy: Callable[[np.ndarray, int], np.ndarray]) -> tuple[int, str]:
        env = SimSingleEnv("panda-push-t", 80, ScriptedIntervention(scripted_person("panda-push-t", config)))
        obs, _ = env.reset(seed=3)
        start = np.asarray(obs[:2], dtype=np.float64)
        for t in range(80):
            obs, _, _, _, info = env.step(policy(start, t))
            if info["source"] == "teleop":
                return t, info["reason"]
        raise AssertionError("the person never took over")

    assert first_takeover(lambda start, t: start) == (15, "stall")
    circle = lambda start, t: start + 0.03 * np.array([np.cos(t / 3) - 1, np.sin(t / 3)])  # noqa: E731
    assert first_takeover(circle) == (40, "stall")
    with pytest.raises(ValueError, match="idle_radius needs the effector"):
        ScriptedPerson(lambda seed: (lambda obs: obs[:2], lambda: None), lambda obs: 0.0, config=config)


def _runs(flags: list[bool]) -> list[int]:
    lengths, current = [], 0
    for flag in [*flags, False]:
        if flag:
            current += 1
        elif current:
            lengths.append(current)
            current = 0
    return lengths


def test_an_episode_replays_the_same_after_an_actor_restart() -> None:
    """The person is seeded from the episode's seed, not from how many episodes this process has seen."""
    config = ScriptedPersonConfig(stall_steps=10, max_steps=30, handback_gain=0.1, grace_steps=5)

    def episode(seeds_before: list[int], seed: int) -> list[tuple[str, list[float]]]:
        env = SimSingleEnv("panda-push-t", episode_steps=60, intervention=ScriptedIntervention(
            scripted_person("panda-push-t", config)))  # fmt: skip
        for earlier in seeds_before:
            env.reset(seed=earlier)
        return [(i["source"], np.round(i["action"], 9).tolist()) for i in run(env, seed)]

    fresh, after_others = episode([], 7), episode([3, 4], 7)
    assert any(source == "teleop" for source, _ in fresh)
    assert fresh == after_others
