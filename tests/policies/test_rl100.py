"""RL-100's learner rounds on the 1-D reach (`test_habc`): stages, OPE-gated offline PPO, the online step, the head.

A diffusion policy cloned from episodes that step forward (and succeed) or back (and time out) steps forward about
half the time; an offline round (IQL critics, dynamics ensemble, PPO over the denoising chain, AM-Q gate) must
deploy a policy that steps forward far more often, and only a candidate the OPE accepted. The distill round's head is
a one-step consistency student exported with one sampling step.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.generative.policy import GenerativePolicy, PolicyOptions
from policies.generative.train import TrainConfig, train_teacher
from policies.imitation import chunked
from policies.rl.chain import ChainConfig, ChainSampler
from policies.rl.chain_ppo import PpoConfig
from policies.rl.critics import CriticConfig
from policies.rl.head import ThenHead, distill_head, multistep_spec
from policies.rl.iql import IqlConfig
from policies.rl.online_chains import ChainReplayError, chunk_gae, recorded_chains, returns_and_values
from policies.rl.ope import DynamicsConfig
from policies.rl.rl100 import Rl100Config, Rl100Round
from policies.rl.selection import SelectionConfig
from policies.rl.self_distill import SelectConfig, SelectRound
from policies.rl.transitions import chunk_transitions
from real.record import NOISE_COLUMN
from reflexlab.dataset import DatasetWriter, load_dataset
from tests.policies.test_habc import GOAL, SPEC, STEPS, forward_fraction, write_reach

CONFIG = Rl100Config(
    demos=Path("unset"), offline_rounds=1, online_rounds=1, gamma=0.9,
    iql=IqlConfig(gamma=0.9, hidden=64, steps=600), dynamics=DynamicsConfig(hidden=64, steps=600),
    chain=ChainConfig(sampling_steps=5, sigma_min=0.1),
    offline_ppo=PpoConfig(lr=2e-4, minibatch_size=64), online_ppo=PpoConfig(clip=0.2, lr=2e-4, minibatch_size=64),
    ppo_iterations=60, ppo_batch=256, ope_every=20,
    ope_rollouts=128, ope_horizon=4, max_action_shift=None, sampling_steps=5,
    distill_train=TrainConfig(
        method="consistency", max_steps=40, batch_size=64, teacher_steps=5, teacher_samples_per_window=1,
        checkpoint_every=10**9, progress=False,
    ),
)  # fmt: skip


@pytest.fixture(scope="module")
def reach(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the reach dataset, a diffusion policy cloned from all of it)."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("rl100")
    write_reach(root / "ds")
    episodes = [{"obs": e["observation.state"], "action": e["action"]} for e in load_dataset(root / "ds").episodes()]
    train = TrainConfig(
        method="diffusion", max_steps=300, batch_size=64, warmup_steps=10, checkpoint_every=10**9, progress=False,
        policy=PolicyOptions(down_dims=(16, 32)),
    )  # fmt: skip
    return root / "ds", train_teacher(episodes, train, root / "sft", chunked(SPEC, 1, 4, 2).to_json())


def test_stages_follow_the_round_number() -> None:
    config = dataclasses.replace(CONFIG, offline_rounds=2, online_rounds=1)
    assert config.rounds == 4
    assert [config.stage(r) for r in range(1, 5)] == ["offline", "offline", "online", "distill"]
    with pytest.raises(ValueError, match="RL-100 has 4 rounds, not round 5"):
        config.stage(5)


def test_an_offline_round_deploys_only_what_ope_accepted_and_steps_forward_more(
    reach: tuple[Path, Path], tmp_path: Path
) -> None:
    dataset, sft = reach
    update = Rl100Round(dataclasses.replace(CONFIG, demos=dataset))
    outcome = update(dataset, sft, tmp_path / "round", 1)
    checks = outcome.numbers["ope"]
    assert outcome.stage == "offline" and len(checks) == 3
    assert outcome.numbers["ope_accepted"] + outcome.numbers["ope_rejected"] == 3
    assert all(c["accepted"] == (c["candidate"] >= c["reference"] + 0.05 * abs(c["reference"])) for c in checks)
    assert outcome.checkpoint is not None, f"OPE accepted nothing: {[c['reason'] for c in checks]}"
    before, after = forward_fraction(sft), forward_fraction(outcome.checkpoint)
    assert after > before + 0.2, (before, after)
    policy, extra = GenerativePolicy.load(outcome.checkpoint)
    assert policy.method == "diffusion" and extra["rl100"]["stage"] == "offline" and "spec" in extra


def test_ppo_stops_at_the_trust_regions_edge_and_only_what_stayed_inside_is_judged_or_deployed(
    reach: tuple[Path, Path], tmp_path: Path
) -> None:
    """The reach's critics are right, yet a bound caps how far a round moves the policy: the iteration that crosses
    it is undone and PPO ends; a bound the first iteration already crosses leaves nothing to judge or deploy."""
    dataset, sft = reach
    slow = dataclasses.replace(CONFIG.offline_ppo, lr=1e-5)  # at 2e-4 one iteration moves the actions 0.37 std
    config = dataclasses.replace(CONFIG, demos=dataset, ppo_iterations=20, ope_every=20, offline_ppo=slow)
    free = Rl100Round(config)(dataset, sft, tmp_path / "free", 1).numbers
    (unbounded,) = free["ope"]
    assert unbounded["iteration"] == 20 and not unbounded["at_trust_region_edge"]
    assert not free["stopped_at_trust_region"]
    bound = unbounded["action_shift"] / 2
    outcome = Rl100Round(dataclasses.replace(config, max_action_shift=bound))(dataset, sft, tmp_path / "half", 1)
    (check,) = outcome.numbers["ope"]
    assert check["at_trust_region_edge"] and outcome.numbers["stopped_at_trust_region"]
    assert 0 < check["iteration"] < 20 and check["ppo"]["iterations"] == check["iteration"]
    assert check["action_shift"] <= bound < check["ppo"]["shift_beyond"]
    tiny = dataclasses.replace(config, max_action_shift=1e-6)
    none = Rl100Round(tiny)(dataset, sft, tmp_path / "tiny", 1)
    assert none.checkpoint is None and none.numbers["stopped_at_trust_region"]
    assert "PPO's first iteration moved the actions" in none.reason
    assert "beyond the trust region (1e-06)" in none.reason
    assert none.numbers["ppo"]["iterations"] == 0 and none.numbers["ppo"]["shift_beyond"] > 1e-6
    idle = Rl100Round(dataclasses.replace(tiny, ppo_iterations=0))(dataset, sft, tmp_path / "idle", 1)
    assert idle.reason.endswith("OPE accepted none of 0 candidates")  # no PPO asked for: nothing left the region


def explore(policy_path: Path, root: Path, stochastic: bool = True, episodes: int = 48, version: int = 1) -> Path:
    """Roll ``policy_path`` out on the reach as an exploring actor does: each chunk from `ChainSampler` with fresh
    noise, the noise recorded in ``policy.noise`` at the step the chunk began, every step ``policy_version``."""
    policy, _ = GenerativePolicy.load(policy_path)
    sampler = ChainSampler(policy, CONFIG.chain, stochastic)
    h, k = 4, CONFIG.chain.sampling_steps
    features = {"observation.state": (2,), "action": (2,), "policy.action": (2,), NOISE_COLUMN: ((1 + k) * h * 2,)}
    rng = torch.Generator().manual_seed(version)
    with DatasetWriter(root, 10, "toy", features, SPEC) as writer:
        for e in range(episodes):
            x = -1.0 + 2.0 * e / (episodes - 1)
            for t in range(STEPS):
                row = np.zeros((1 + k) * h * 2, dtype=np.float32)
                if t % 2 == 0:  # Ta = 2: a chunk begins every other step, as StepActor re-plans
                    noise = torch.randn(1, 1 + k, h, 2, generator=rng)
                    with torch.no_grad():
                        plan = sampler(torch.tensor([[[x, 0.0]]]), noise[:, 0], noise[:, 1:])[0, :2].numpy()
                    row = noise.numpy().ravel()
                action = plan[t % 2].astype(np.float64)
                x_next = x + float(action[0])
                success = x_next >= GOAL
                last = success or t == STEPS - 1
                frame = {"observation.state": np.array([x, 0.0]), "action": action, "policy.action": action}
                writer.add_frame(
                    frame | {NOISE_COLUMN: row}, success=success, terminated=success,
                    truncated=last and not success, policy_version=version,
                )  # fmt: skip
                x = x_next
                if last:
                    break
            writer.save_episode("reach")
    return root


@pytest.fixture(scope="module")
def explored(reach: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SFT policy's own exploring episodes on the reach, its chains recorded."""
    return explore(reach[1], tmp_path_factory.mktemp("explored") / "ds")


def test_the_online_round_replays_the_robots_chains_and_the_distill_round_makes_a_head(
    reach: tuple[Path, Path], explored: Path, tmp_path: Path
) -> None:
    demos, sft = reach
    update = Rl100Round(dataclasses.replace(CONFIG, demos=demos))
    online = update(explored, sft, tmp_path / "online", 2)
    assert online.stage == "online" and online.checkpoint is not None and "ope" not in online.numbers
    numbers = online.numbers
    assert numbers["chains"] == numbers["transitions"] and numbers["chain_episodes"] == 48  # all the policy's own
    assert numbers["replay_error"] < 1e-5  # torch replaying torch; an ONNX actor's is checked in test_rl_loop
    assert 1 <= numbers["epochs"] <= CONFIG.online_epochs and numbers["ppo"]["updates"] > 0
    tiny = Rl100Round(dataclasses.replace(CONFIG, demos=demos, max_action_shift=1e-6))
    none = tiny(explored, sft, tmp_path / "tiny", 2)
    assert none.checkpoint is None and none.numbers["stopped_at_trust_region"] and none.numbers["shift_beyond"] > 1e-6
    assert none.reason == "PPO's first pass over the recorded chains left the trust region: nothing to deploy"
    head = update(explored, online.checkpoint, tmp_path / "distill", 3)
    assert head.stage == "distill" and head.sampling_steps == 1
    student, _ = GenerativePolicy.load(head.checkpoint)
    assert student.method == "consistency"
    with pytest.raises(ValueError, match="student: RL-100 improves the multi-step policy"):
        update(demos, head.checkpoint, tmp_path / "again", 1)


def test_the_online_rounds_advantages_credit_the_chunks_that_stepped_toward_the_goal(
    reach: tuple[Path, Path], explored: Path, tmp_path: Path
) -> None:
    """GAE from the value critic on the recorded episodes' credited returns scores the chains that stepped forward
    (toward the goal) above those that stepped back; the control's round runs the same PPO on N(0, 1) draws. (Whether
    a round's PPO then makes the policy better is the bench's question: on these 142 chains it moves the policy a
    long way either way, ±7 nats of log-probability per chain after 10 passes, so no learning is asserted here.)"""
    demos, sft = reach
    policy, extra = GenerativePolicy.load(sft)
    spec = multistep_spec(policy, extra, sft, "test")
    ds = load_dataset(explored)
    chains = recorded_chains(policy, spec, ds, chunk_transitions(ds, spec, CONFIG.gamma), CONFIG.chain)
    torch.manual_seed(0)
    values, _ = returns_and_values(ds, CONFIG.gamma, CONFIG.critic)
    advantage = chunk_gae(values, chains.episode, chains.step, CONFIG.gamma, CONFIG.gae_lambda)
    forward = (chains.chain.actions[:, 0, 0] > 0).numpy()
    assert advantage[forward].mean() > advantage[~forward].mean() + 0.05, advantage
    rounds = {a: Rl100Round(dataclasses.replace(CONFIG, demos=demos, advantage=a)) for a in ("critics", "random")}
    learned, control = (rounds[a](explored, sft, tmp_path / a, 2) for a in ("critics", "random"))
    assert control.numbers["ppo"]["clip_fraction"] > 0.05  # the control's updates moved the policy
    assert 0.8 < control.numbers["advantage_std"] < 1.2 and learned.numbers["advantage_std"] < 0.5  # draws vs GAE
    with pytest.raises(ValueError, match="'critics' or 'random' \\(the control\\), not 'randm'"):
        Rl100Config(demos=demos, advantage="randm")  # type: ignore[arg-type]


def test_progress_shaping_ends_each_segment_by_how_near_the_goal_it_got(tmp_path: Path) -> None:
    """With a progress weight w a policy segment ends at (outcome + w · progress) / (1 + w): a takeover or a time-out
    near the goal above one far from it, a success near 1; the person's steps stay unlabelled; w 0 is the outcome
    alone; a reward that is not a progress in [0, 1] is refused by episode."""

    def record(root: Path, episodes: list[list[tuple[float, bool]]], last_success: list[bool]) -> Path:
        with DatasetWriter(root, 10, "toy", {"observation.state": (2,), "action": (2,)}, SPEC) as writer:
            for steps, success in zip(episodes, last_success, strict=True):
                for t, (progress, person) in enumerate(steps):
                    last = t == len(steps) - 1
                    frame = {"observation.state": np.array([progress, 0.0]), "action": np.zeros(2)}
                    writer.add_frame(
                        frame, reward=progress, is_intervention=person, success=last and success,
                        terminated=last and success, truncated=last and not success,
                    )  # fmt: skip
                writer.save_episode("toy")
        return root

    took_over = [(0.2, False), (0.4, False), (0.6, False), (0.3, True), (0.7, True), (0.9, False), (1.0, False)]
    timed_out = [(0.1, False), (0.3, False), (0.5, False)]
    ds = load_dataset(record(tmp_path / "ds", [took_over, timed_out], [True, False]))
    gamma, w = 0.9, 1.0
    shaped, _ = returns_and_values(ds, gamma, CriticConfig(steps=20), progress_weight=w)
    plain, _ = returns_and_values(ds, gamma, CriticConfig(steps=20))
    ends = {e: {int(t): float(v[1, t]) for t in np.flatnonzero(np.isfinite(v[1]))} for e, v in shaped.items()}
    assert ends == {0: {2: pytest.approx(0.6 / 2), 6: pytest.approx(2.0 / 2)}, 1: {2: pytest.approx(0.5 / 2)}}
    assert {e: np.nan_to_num(v[1], nan=-1).tolist() for e, v in plain.items()} == {
        0: [-1, -1, 0.0, -1, -1, -1, 1.0],
        1: [-1, -1, 0.0],
    }
    assert all(np.isfinite(v[0]).all() for v in shaped.values())
    bad = load_dataset(record(tmp_path / "bad", [timed_out, [(0.2, False), (-0.4, False)]], [False, False]))
    with pytest.raises(ValueError, match=r"episode 1: next.reward spans \[-0.4, 0.2\]; shaping by progress needs"):
        returns_and_values(bad, gamma, CriticConfig(steps=20), progress_weight=w)
    with pytest.raises(ValueError, match="progress_weight ≥ 0"):
        Rl100Config(demos=tmp_path, progress_weight=-1.0)


def test_the_online_round_refuses_chains_it_cannot_replay(
    reach: tuple[Path, Path], explored: Path, tmp_path: Path
) -> None:
    """Chains are credited only to the policy that ran them: episodes without the noise column, noise from a
    deterministic version (its steps ignored the step noise) or from another checkpoint are refused by name."""
    demos, sft = reach
    update = Rl100Round(dataclasses.replace(CONFIG, demos=demos))
    with pytest.raises(ChainReplayError, match=r"episode 0 records no 'policy.noise'"):
        update(demos, sft, tmp_path / "none", 2)
    deterministic = explore(sft, tmp_path / "deterministic", stochastic=False, episodes=6)
    with pytest.raises(ChainReplayError, match=r"episode \d+, step \d+: the recorded noise replays actions"):
        update(deterministic, sft, tmp_path / "det", 2)
    moved = update(explored, sft, tmp_path / "moved", 2).checkpoint
    with pytest.raises(ChainReplayError, match="was not this checkpoint's exploring chain sampler"):
        update(explored, moved, tmp_path / "other", 2)
    with pytest.raises(ValueError, match=r"the online stage's actor runs the chain \(5 steps\) that the deployed"):
        dataclasses.replace(CONFIG, sampling_steps=10)


def test_the_ppo_anchor_reads_the_demonstrations_and_the_round_counts_the_kl_stops(
    reach: tuple[Path, Path], tmp_path: Path
) -> None:
    """A target KL no update can stay under: every iteration stops after its first step, and the round says so."""
    dataset, sft = reach
    ppo = dataclasses.replace(CONFIG.offline_ppo, bc_weight=1.0, target_kl=1e-9)
    config = dataclasses.replace(CONFIG, demos=dataset, offline_ppo=ppo, ppo_iterations=5)
    (check,) = Rl100Round(config)(dataset, sft, tmp_path / "offline", 1).numbers["ope"]
    stats = check["ppo"]
    assert math.isfinite(stats["bc_loss"]) and stats["bc_loss"] > 0, stats
    assert stats["updates"] == 5 and stats["iterations_stopped_by_kl"] == 5, stats


def test_then_head_gives_another_method_the_distill_round_and_refuses_a_student(
    reach: tuple[Path, Path], tmp_path: Path
) -> None:
    dataset, sft = reach
    selection = SelectionConfig(k=2, iql=IqlConfig(gamma=0.9, hidden=64, steps=50), sampling_steps=5)
    train = dataclasses.replace(CONFIG.distill_train, method="diffusion", max_steps=10, lr=1e-4, warmup_steps=2)
    update = ThenHead(SelectRound(SelectConfig(dataset, selection, train=train)), 1, dataset, CONFIG.distill_train)
    first = update(dataset, sft, tmp_path / "round1", 1)
    assert first.stage == "select" and first.sampling_steps is None
    head = update(dataset, first.checkpoint, tmp_path / "round2", 2)
    assert head.stage == "distill" and head.sampling_steps == 1 and head.numbers["teacher"] == str(first.checkpoint)
    assert GenerativePolicy.load(head.checkpoint)[0].method == "consistency"
    with pytest.raises(ValueError, match="1 rounds and a head: there is no round 3"):
        update(dataset, head.checkpoint, tmp_path / "round3", 3)
    with pytest.raises(ValueError, match="consistency student: the head distils the multi-step policy"):
        distill_head(dataset, head.checkpoint, tmp_path / "again", dataset, CONFIG.distill_train, 0)


def test_the_il_stage_trains_the_imitation_policy_once_and_a_rerun_reuses_it(tmp_path: Path) -> None:
    from reflexlab.cli.rl import Rl100
    from sim.demos import record_demos

    record_demos("panda-push-t", 2, tmp_path / "demos", seed=0, num_envs=2, progress=False)
    command = Rl100(demos=tmp_path / "demos", work_dir=tmp_path / "work", il_steps=4, stages=("il", "distill"))
    first = command._initial()
    policy, extra = GenerativePolicy.load(first)
    assert policy.method == "diffusion" and extra["spec"]["task"] == "panda-push-t"
    assert command._initial() == first  # the learner restarted: no second imitation run
    update, rounds = command._update()
    assert rounds == 1 and update.config.stage(1) == "distill"
    with pytest.raises(ValueError, match="no learner round to run"):
        Rl100(demos=tmp_path / "demos", work_dir=tmp_path / "w2", stages=("il",))._update()
