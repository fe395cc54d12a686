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

from policies.generative.policy import GenerativePolicy, PolicyOptions
from policies.generative.train import TrainConfig, finetune_weighted, train_teacher
from policies.imitation import chunked
from policies.rl.critics import CriticConfig
from policies.rl.habc import HabcConfig, habc_update
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
