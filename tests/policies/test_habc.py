"""HABC's learner update end to end on a dataset written as the actor writes it: critics, weights, weighted BC.

A 1-D reach: the state is a position x, the action a step; episodes that step forward reach x ≥ 1.5 and succeed,
episodes that step back time out, and in some a person takes over a backward-stepping policy and finishes. A flow
policy trained on all of it without weights steps forward about half the time; after one HABC update it must step
forward far more often, and every weight must follow the credit rules.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from policies.generative.data import ChunkWindows
from policies.generative.policy import GenerativePolicy, PolicyOptions
from policies.generative.sampler import TorchSampler
from policies.generative.train import (
    ConcatBatches,
    TrainConfig,
    WeightedChunks,
    WeightedWindows,
    finetune_weighted,
    train_teacher,
)
from policies.imitation import chunked
from policies.rl.critics import CriticConfig
from policies.rl.habc import HabcConfig, HabcWeighting, habc_update
from policies.rl.iql import IqlConfig
from policies.rl.selection import CriticGuidedSampler, SelectionConfig, executed_part, fit_selection_critics
from policies.rl.self_distill import SelectConfig, SelectRound
from policies.rl.transitions import chunk_transitions
from reflexlab.dataset import DatasetWriter, load_dataset
from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec

SPEC = Spec(
    "toy", "reach", (ObsGroup("policy", (ObsTerm("x", 2, "m"),)),), "policy",
    ActionSpec("ee_position", ("dx", "dy"), 1.0, (0.0, 0.0), (-1.0, -1.0), (1.0, 1.0)), 10.0, 10.0,
)  # fmt: skip
GOAL, STEPS = 1.5, 6  # succeed at x >= GOAL; time out after STEPS steps
TRAIN = TrainConfig(
    method="flow", max_steps=150, batch_size=64, warmup_steps=10, checkpoint_every=10**9, progress=False,
    policy=PolicyOptions(down_dims=(16, 32)),
)  # fmt: skip


def write_reach(root: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with DatasetWriter(root, 10, "toy", {"observation.state": (2,), "action": (2,)}, SPEC) as writer:
        for episode in range(24):
            kind = ("forward", "back", "taken over")[episode % 3]
            x = rng.uniform(-1, 1)
            for t in range(STEPS):
                person = kind == "taken over" and t >= 2
                step = 0.5 if kind == "forward" or person else -0.5
                action = np.array([step + rng.normal(0, 0.02), 0.0])
                x_next = x + action[0]
                success = x_next >= GOAL
                last = success or t == STEPS - 1
                writer.add_frame(
                    {"observation.state": np.array([x, 0.0]), "action": action},
                    success=success, terminated=success, truncated=last and not success, is_intervention=person,
                )  # fmt: skip
                x = x_next
                if last:
                    break
            writer.save_episode("reach")


def forward_fraction(checkpoint: Path) -> float:
    policy, _ = GenerativePolicy.load(checkpoint)
    obs = torch.linspace(-1, 1, 256).view(-1, 1, 1) * torch.tensor([1.0, 0.0])  # where both were done
    noise = torch.randn(256, 4, 2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return float((policy.sample(obs, noise)[:, 0, 0] > 0).float().mean())


@pytest.fixture(scope="module")
def reach(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("habc")
    write_reach(root / "ds")
    ds = load_dataset(root / "ds")
    episodes = [{"obs": e["observation.state"], "action": e["action"]} for e in ds.episodes()]
    base = train_teacher(episodes, TRAIN, root / "sft", chunked(SPEC, 1, 4, 2).to_json())
    return root / "ds", base


def test_one_habc_update_moves_the_policy_toward_what_succeeded(reach: tuple[Path, Path], tmp_path: Path) -> None:
    dataset, base = reach
    before = forward_fraction(base)
    finetune = dataclasses.replace(TRAIN, max_steps=250, lr=1e-3)
    config = HabcConfig(critic=CriticConfig(hidden=32, steps=300), train=finetune)
    update = habc_update(dataset, base, tmp_path / "round1", config)
    after = forward_fraction(update.checkpoint)
    assert 0.25 < before < 0.75, f"the SFT policy should be torn between the two ({before:.2f})"
    assert after > before + 0.3 and after > 0.8, (before, after)
    assert update.episodes == 24 and update.successful_segments == 8  # the person's successes are not the policy's
    assert update.person_steps > 0 and update.viability_mse < 0.2 and 0 < update.weight_effective_fraction < 1
    _, extra = GenerativePolicy.load(update.checkpoint)
    assert extra["habc"]["aware"] and extra["finetuned_from"] == str(base)


def test_weights_must_be_one_finite_non_negative_value_per_step(reach: tuple[Path, Path], tmp_path: Path) -> None:
    dataset, base = reach
    episodes = [{"obs": e["observation.state"], "action": e["action"]} for e in load_dataset(dataset).episodes()]
    steps = sum(len(e["obs"]) for e in episodes)
    for bad in (np.ones(steps - 1), np.full(steps, np.nan), -np.ones(steps)):
        with pytest.raises(ValueError, match="one finite weight >= 0 per step"):
            finetune_weighted(base, episodes, bad, TRAIN, tmp_path, {})


def test_the_single_critic_baseline_fits_viability_only(reach: tuple[Path, Path], tmp_path: Path) -> None:
    """AWBC with one critic (the issue's baseline): no efficiency head, no gate; still a valid update."""
    dataset, base = reach
    train = dataclasses.replace(TRAIN, max_steps=20)
    config = HabcConfig(critic=CriticConfig(hidden=32, steps=100), train=train, critics="one", demos=dataset)
    update = habc_update(dataset, base, tmp_path, config)
    assert update.efficiency_mse is None and update.viability_mse < 0.25 and update.checkpoint.exists()
    _, extra = GenerativePolicy.load(update.checkpoint)
    assert extra["habc"]["demo_episodes"] == 24  # the demonstrations trained on beside the episodes


def test_episodes_of_another_task_are_refused_naming_the_dataset(reach: tuple[Path, Path], tmp_path: Path) -> None:
    from reflexlab.spec import SpecMismatchError

    other = dataclasses.replace(SPEC, task="push")
    with DatasetWriter(tmp_path / "other", 10, "toy", {"observation.state": (2,), "action": (2,)}, other) as writer:
        writer.add_frame({"observation.state": np.zeros(2), "action": np.zeros(2)}, success=True, terminated=True)
        writer.save_episode("push")
    with pytest.raises(SpecMismatchError, match=r"dataset .*other vs policy.*task"):
        habc_update(tmp_path / "other", reach[1], tmp_path / "run")


def test_critic_guided_picks_rank_the_policys_own_proposals(reach: tuple[Path, Path]) -> None:
    """Of k chunks the policy proposes, the pick has the highest min-Q; k = 1 is the policy itself; and on the reach,
    where only forward steps succeed, IQL's picks step forward far more often than the torn SFT policy does."""
    dataset, base = reach
    policy, stored = GenerativePolicy.load(base)
    spec = Spec.from_dict(stored["spec"])
    config = SelectionConfig(k=8, iql=IqlConfig(hidden=64, steps=1500))
    critics, losses = fit_selection_critics(chunk_transitions(load_dataset(dataset), spec, 0.99), config)
    assert np.isfinite(list(losses.values())).all()
    obs = (np.linspace(-1, 1, 128)[:, None, None] * np.array([1.0, 0.0])).astype(np.float32)
    noise = np.random.default_rng(0).standard_normal((128, 4, 2)).astype(np.float32)
    sampler, executed = TorchSampler(policy, 10), executed_part(spec)
    plain = sampler(obs, noise)
    picked = CriticGuidedSampler(sampler, critics, 8, executed)(obs, noise)
    assert np.array_equal(CriticGuidedSampler(sampler, critics, 1, executed)(obs, noise), plain)
    q_picked, q_plain = critics.q(obs[:, -1], picked[:, executed]), critics.q(obs[:, -1], plain[:, executed])
    assert (q_picked >= q_plain - 1e-6).all()  # the plain chunk is among the k (float noise of batch size)
    forward_plain, forward_picked = (plain[:, 0, 0] > 0).mean(), (picked[:, 0, 0] > 0).mean()
    assert forward_picked > 0.75 and forward_picked > forward_plain + 0.3, (forward_plain, forward_picked)


def test_habc_with_selection_trains_on_the_picks_and_logs_them(reach: tuple[Path, Path], tmp_path: Path) -> None:
    """With HABC's weights made uniform (β → ∞) the fine-tune clones the torn data as it is; the critics' picks at
    every state of the episodes and the demonstrations (here the same episodes) pull the policy forward."""
    dataset, base = reach
    finetune = dataclasses.replace(TRAIN, max_steps=250, lr=1e-3)
    uniform = HabcWeighting(beta=1e6)
    config = HabcConfig(uniform, CriticConfig(hidden=32, steps=300), train=finetune, demos=dataset)
    plain = forward_fraction(habc_update(dataset, base, tmp_path / "plain", config).checkpoint)
    selection = SelectionConfig(k=8, iql=IqlConfig(hidden=64, steps=1500))
    update = habc_update(dataset, base, tmp_path / "picks", dataclasses.replace(config, selection=selection))
    assert update.selection is not None and update.selection["k"] == 8
    steps = sum(len(e["action"]) for e in load_dataset(dataset).episodes())
    assert update.selection["windows"] == 2 * steps  # every step of the episodes and of the demonstrations
    picked = forward_fraction(update.checkpoint)
    assert picked > plain + 0.15, (plain, picked)  # 0.40 -> 0.65 here
    _, extra = GenerativePolicy.load(update.checkpoint)
    assert extra["habc"]["selection"] == update.selection


def test_chunk_targets_are_drawn_beside_the_windows() -> None:
    episode = {"obs": np.zeros((5, 2)), "action": np.zeros((5, 2))}
    windows = WeightedWindows(ChunkWindows([episode], 1, 4), torch.ones(5))
    targets = WeightedChunks(np.ones((3, 1, 2)), np.ones((3, 4, 2)), np.full(3, 2.0))
    both = ConcatBatches(windows, targets)
    obs, action, weight = both.gather(torch.tensor([0, 6, 4, 5, 7]))
    assert len(both) == 8 and obs.shape == (5, 1, 2) and action.shape == (5, 4, 2)
    assert sorted(weight.tolist()) == [1.0, 1.0, 2.0, 2.0, 2.0] and (obs[weight == 2] == 1).all()
    for bad in (np.full(3, -1.0), np.full(3, np.nan), np.ones(2)):
        with pytest.raises(ValueError, match="weights"):
            WeightedChunks(np.ones((3, 1, 2)), np.ones((3, 4, 2)), bad)


def test_a_select_round_distils_the_picks_beside_the_demonstrations(reach: tuple[Path, Path], tmp_path: Path) -> None:
    """`reflexlab rl select`'s round: the torn policy, fine-tuned on its demonstrations (here the reach's episodes,
    half stepping back) and the critics' picks, steps forward far more often; the round log names the picks."""
    dataset, base = reach
    selection = SelectionConfig(k=8, iql=IqlConfig(hidden=64, steps=1500))
    config = SelectConfig(dataset, selection, train=dataclasses.replace(TRAIN, max_steps=250, lr=1e-3))
    outcome = SelectRound(config)(dataset, base, tmp_path / "round1", 1)
    assert outcome.checkpoint is not None and outcome.stage == "select"
    before, after = forward_fraction(base), forward_fraction(outcome.checkpoint)
    assert after > before + 0.15, (before, after)
    assert outcome.numbers["k"] == 8 and outcome.numbers["episodes"] == 24
    _, extra = GenerativePolicy.load(outcome.checkpoint)
    assert extra["select"]["windows"] == outcome.numbers["windows"] and extra["finetuned_from"] == str(base)
