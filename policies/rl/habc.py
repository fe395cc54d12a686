"""HABC's per-transition weights: two one-step advantages merged by a state-adaptive gate, then exponentiated.

The paper (arXiv 2606.17043) publishes no formulas; these are ours (issue 22 asks us to say what we chose):

* one-step advantages from the two critics of `policies.rl.critics`, bootstrapping from the segment's outcome at
  its last step (`policies.rl.credit.Credit.outcome_next`)::

      A_via = V_via(s') − V_via(s)          (γ_v = 1: did this step make success more likely?)
      A_eff = γ_e · V_eff(s') − V_eff(s)     (did it bring success sooner?)

* the gate ``g = σ(κ (V_via(s) − θ))``: while success from s is uncertain (V_via below θ) the viability advantage
  decides; once it is likely, the efficiency one. ``A = (1 − g) A_via + g A_eff``.
* weights ``w = min(exp(A / β), w_max)`` (advantage-weighted regression, clipped so that one lucky transition cannot
  dominate), normalised to mean 1 over all the policy's transitions of the dataset at once (per episode, a run
  of good steps would be normalised back to 1 and lose its credit) so that the BC loss keeps its scale. A person's
  transitions get ``human_weight`` (default 1: plain BC on what the person did).

`habc_update` is one learner round: critics fit on the dataset so far, weights, a weighted fine-tune of the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from policies.generative.policy import GenerativePolicy
from policies.generative.train import TrainConfig, finetune_weighted
from policies.rl.credit import episode_credit
from policies.rl.critics import CriticConfig, ValueCritic
from policies.rl.rounds import RoundOutcome
from reflexlab.dataset import load_dataset
from reflexlab.spec import Spec


@dataclass(frozen=True)
class HabcWeighting:
    """The gate and weight transform (defaults: θ 0.5, κ 10, β 0.05, w_max 20, γ_e 0.95, person weight 1)."""

    theta: float = 0.5
    kappa: float = 10.0
    beta: float = 0.05
    max_weight: float = 20.0
    gamma_efficiency: float = 0.95
    human_weight: float = 1.0

    def __post_init__(self) -> None:
        if not (self.beta > 0 and self.max_weight >= 1 and self.kappa >= 0 and 0 < self.gamma_efficiency <= 1):
            raise ValueError(f"HABC weighting out of range: {self}")


def gate(viability: np.ndarray, weighting: HabcWeighting) -> np.ndarray:
    """g in (0, 1): how much the efficiency advantage counts at a state of this viability."""
    return 1.0 / (1.0 + np.exp(-weighting.kappa * (np.asarray(viability, dtype=np.float64) - weighting.theta)))


def _next_values(values: np.ndarray, outcome_next: np.ndarray) -> np.ndarray:
    """V(s') per step: the next step's value inside a segment, the segment's outcome at its last step."""
    following = np.append(values[1:], np.nan)
    return np.where(np.isnan(outcome_next), following, outcome_next)


def merged_advantage(
    v_via: np.ndarray,
    v_eff: np.ndarray,
    outcome_next: np.ndarray,
    weighting: HabcWeighting,
) -> np.ndarray:
    """A per step of one episode (its steps in order), from the critics' values at every step."""
    a_via = _next_values(v_via, outcome_next) - v_via
    a_eff = weighting.gamma_efficiency * _next_values(v_eff, outcome_next) - v_eff
    g = gate(v_via, weighting)
    return (1.0 - g) * a_via + g * a_eff


def transition_weights(advantage: np.ndarray, by_policy: np.ndarray, weighting: HabcWeighting) -> np.ndarray:
    """BC loss weights: exp(A / β) clipped to w_max, mean 1 over the policy's steps; a person's: human_weight."""
    advantage = np.asarray(advantage, dtype=np.float64)
    by_policy = np.asarray(by_policy, dtype=bool)
    if not np.isfinite(advantage[by_policy]).all():
        raise FloatingPointError("non-finite advantage on a policy step: the critics diverged")
    weights = np.full(len(advantage), weighting.human_weight)
    raw = np.minimum(np.exp(np.minimum(advantage[by_policy] / weighting.beta, 50.0)), weighting.max_weight)
    if len(raw):
        weights[by_policy] = raw / raw.mean()
    return weights


@dataclass(frozen=True)
class HabcConfig:
    """One HABC update: credit rules, the critics, the weighting and the weighted-BC fine-tune."""

    weighting: HabcWeighting = field(default_factory=HabcWeighting)
    critic: CriticConfig = field(default_factory=CriticConfig)
    aware: bool = True  # False: the ablation, credit across intervention boundaries
    demos: Path | None = None  # demonstrations trained on beside the episodes, at the person's weight (see below)
    critics: Literal["two", "one"] = "two"  # "one": the single-critic AWBC baseline (viability only, no gate)
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(max_steps=2000, warmup_steps=100, checkpoint_every=10**9)
    )


@dataclass(frozen=True)
class HabcUpdate:
    """What an update did: the new checkpoint, and numbers for the round log."""

    checkpoint: Path
    episodes: int
    policy_steps: int
    person_steps: int
    successful_segments: int
    viability_mse: float
    efficiency_mse: float | None
    weight_max: float
    weight_effective_fraction: float  # (Σw)² / (n Σw²) over the policy's steps: 1 = uniform, → 0 = a few dominate


def habc_update(dataset: Path, checkpoint: Path, run_dir: Path, config: HabcConfig = HabcConfig()) -> HabcUpdate:
    """Fit the two critics on ``dataset``'s episodes, weigh every step, fine-tune ``checkpoint`` with those weights.

    The critics read the policy observation (``observation.state``); the policy trains on the episodes' windows as
    in imitation. Raises `SpecMismatchError` for a dataset of another robot or task, `CreditError` for an episode
    without outcome columns and `FloatingPointError` when a critic or the fine-tune diverges (the round is then
    rejected, nothing deployed).
    """
    ds = load_dataset(dataset)
    _check_same_task(ds.spec, checkpoint, dataset)
    w = config.weighting
    episodes, credits = [], []
    for i in range(ds.num_episodes):
        steps = ds.episode(i)
        credits.append(episode_credit(steps, episode=i, gamma_efficiency=w.gamma_efficiency, aware=config.aware))
        episodes.append({"obs": steps["observation.state"], "action": steps["action"]})
    obs = np.concatenate([e["obs"] for e in episodes])
    viability_targets = np.concatenate([c.viability for c in credits])
    efficiency_targets = np.concatenate([c.efficiency for c in credits])
    viability = ValueCritic(obs.shape[1], config.critic)
    viability_mse = viability.fit(obs, viability_targets)
    efficiency, efficiency_mse = None, None
    if config.critics == "two" and np.isfinite(efficiency_targets).any():
        efficiency = ValueCritic(obs.shape[1], config.critic)
        efficiency_mse = efficiency.fit(obs, efficiency_targets)
    advantages = []
    for episode, credit in zip(episodes, credits, strict=True):
        v_via = viability.values(episode["obs"])
        if efficiency is None:  # one critic, or no success yet (how soon means nothing): viability alone decides
            advantages.append(_next_values(v_via, credit.outcome_next) - v_via)
        else:
            advantages.append(merged_advantage(v_via, efficiency.values(episode["obs"]), credit.outcome_next, w))
    by_policy = np.concatenate([c.by_policy for c in credits])
    weighted = by_policy if config.aware else np.ones_like(by_policy)  # the ablation weighs the person's steps too
    all_weights = transition_weights(np.concatenate(advantages), weighted, w)  # normalised over the whole dataset
    policy_weights = all_weights[weighted]
    effective = float(policy_weights.sum() ** 2 / (len(policy_weights) * (policy_weights**2).sum()))
    extra = {"habc": {"aware": config.aware, "dataset": str(dataset), "episodes": ds.num_episodes}}
    demo_episodes = _demonstrations(config.demos, checkpoint)
    extra["habc"] |= {"demos": None if config.demos is None else str(config.demos), "demo_episodes": len(demo_episodes)}
    train_weights = np.concatenate([all_weights, *(np.full(len(e["action"]), w.human_weight) for e in demo_episodes)])
    new = finetune_weighted(checkpoint, episodes + demo_episodes, train_weights, config.train, run_dir, extra)
    return HabcUpdate(
        checkpoint=new,
        episodes=ds.num_episodes,
        policy_steps=int(by_policy.sum()),
        person_steps=int((~by_policy).sum()),
        successful_segments=sum(int(np.isfinite(c.efficiency).any()) for c in credits),
        viability_mse=viability_mse,
        efficiency_mse=efficiency_mse,
        weight_max=float(all_weights.max()),
        weight_effective_fraction=effective,
    )


@dataclass(frozen=True)
class HabcRound:
    """HABC as the learner's round update (`policies.rl.rounds.RoundUpdate`): every round is one `habc_update`."""

    config: HabcConfig = field(default_factory=HabcConfig)

    def __call__(self, dataset: Path, checkpoint: Path, out: Path, round_: int) -> RoundOutcome:
        update = habc_update(dataset, checkpoint, out, self.config)
        numbers = {k: v for k, v in update.__dict__.items() if k != "checkpoint"}
        return RoundOutcome(update.checkpoint, numbers, stage="habc" if self.config.critics == "two" else "awbc")


def _demonstrations(demos: Path | None, checkpoint: Path) -> list[dict[str, np.ndarray]]:
    """The SFT demonstrations as more BC data (a person's steps, at the person's weight), so that the fine-tune does
    not forget what the first rounds' few episodes never visit: on panda-peg-insert, fine-tuning on the episodes alone
    (lr 1e-3) made the scripted person take over more often each round (0.7 → 1.2 interventions per episode over 3
    rounds)."""
    if demos is None:
        return []
    ds = load_dataset(demos)
    _check_same_task(ds.spec, checkpoint, demos)
    return [{"obs": e["observation.state"], "action": e["action"]} for e in ds.episodes()]


def _check_same_task(recorded: Spec | None, checkpoint: Path, dataset: Path) -> None:
    """Episodes of another robot or task would train the policy on observations it does not read: refuse."""
    if recorded is None:
        raise ValueError(f"{dataset} records no reflexlab Spec: cannot tell which task its episodes are")
    _, stored = GenerativePolicy.load(checkpoint)
    policy = Spec.from_dict(stored["spec"])
    policy.task_interface().check_compatible(recorded.task_interface(), context=f"dataset {dataset} vs policy")
