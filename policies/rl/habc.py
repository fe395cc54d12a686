"""HABC's per-transition weights: two λ-advantages merged by a state-adaptive gate, then exponentiated.

The paper (arXiv 2606.17043) publishes no formulas; these are ours (issue 22 asks us to say what we chose):

* one-step advantages (TD errors) from the two critics of `policies.rl.critics`, bootstrapping from the segment's
  outcome at its last step (`policies.rl.credit.Credit.outcome_next`)::

      δ_via = V_via(s') − V_via(s)          (γ_v = 1: did this step make success more likely?)
      δ_eff = γ_e · V_eff(s') − V_eff(s)     (did it bring success sooner?)

  summed along the rest of the segment as λ-returns, ``A_t = δ_t + γ λ A_{t+1}`` (generalised advantage estimation,
  reset at every segment end). λ = 0 is the pure one-step advantage; λ = 1 is the segment's Monte-Carlo outcome
  minus V(s). With sparse outcomes the one-step advantage of every step but a segment's last is a difference of two
  nearly equal predictions, so on panda-peg-insert (weights' effective fraction 0.95) the fine-tune cloned the
  policy's failures as much as its successes; λ near 1 carries the outcome back to the steps that earned it.
* the critics' values are cross-fitted (`policies.rl.critics.cross_fitted_values`): each episode's come from critics
  that never saw its ending, else the advantage of a memorised step is ~0 whatever happened.
* the gate ``g = σ(κ (V_via(s) − θ))``: while success from s is uncertain (V_via below θ) the viability advantage
  decides; once it is likely, the efficiency one. ``A = (1 − g) A_via + g A_eff``.
* weights ``w = min(exp(A / β), w_max)`` (advantage-weighted regression, clipped so that one lucky transition cannot
  dominate), normalised to mean 1 over all the policy's transitions of the dataset at once (per episode, a run
  of good steps would be normalised back to 1 and lose its credit) so that the BC loss keeps its scale. A person's
  transitions get ``human_weight``, the demonstrations ``demo_weight`` (see `HabcWeighting`).

`habc_update` is one learner round: critics fit on the dataset so far, weights, a weighted fine-tune of the policy.
With ``HabcConfig.selection`` the fine-tune also trains on the best of K of the policy's own chunks at every state of
the episodes and demonstrations, as IQL's Q ranks them (`policies.rl.selection` says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from policies.generative.policy import GenerativePolicy
from policies.generative.train import TrainConfig, finetune_weighted
from policies.rl.credit import episode_credit
from policies.rl.critics import CriticConfig, cross_fitted_values
from policies.rl.rounds import RoundOutcome
from policies.rl.selection import SelectionConfig, critic_picks
from reflexlab.dataset import load_dataset
from reflexlab.spec import Spec


@dataclass(frozen=True)
class HabcWeighting:
    """The gate, the advantages' λ and the weight transform.

    ``human_weight``: a person's steps in the episodes. The scripted person is a noisier hand than the
    demonstrator (1 mm against 0.3 mm on panda-peg-insert); cloning its steps at the demonstrations' weight cost
    the SFT policy success there (fine-tuned offline on the demonstrations, the policy's successful segments of 40
    episodes and the person's steps at weight 0 / 0.3 / 1: 0.73 / 0.69 / 0.59 over 100 episodes; the
    demonstrations alone 0.78, SFT 0.74), so it counts for less than a demonstration by default.
    ``demo_weight``: the SFT demonstrations trained beside the episodes (`HabcConfig.demos`).
    ``policy_weight``: the mean weight of the policy's own steps (the advantage weights are normalised to it).
    """

    theta: float = 0.5
    kappa: float = 10.0
    beta: float = 0.1
    max_weight: float = 20.0
    gamma_efficiency: float = 0.95
    lam: float = 0.95
    human_weight: float = 0.3
    demo_weight: float = 1.0
    policy_weight: float = 1.0
    folds: int = 5  # cross-fitting of the critics' values (1: fit and evaluate on the same episodes)

    def __post_init__(self) -> None:
        ok = self.beta > 0 and self.max_weight >= 1 and self.kappa >= 0 and 0 < self.gamma_efficiency <= 1
        ok = ok and min(self.human_weight, self.demo_weight, self.policy_weight) >= 0
        if not (ok and 0 <= self.lam <= 1 and self.folds >= 1):
            raise ValueError(f"HABC weighting out of range: {self}")


def gate(viability: np.ndarray, weighting: HabcWeighting) -> np.ndarray:
    """g in (0, 1): how much the efficiency advantage counts at a state of this viability."""
    return 1.0 / (1.0 + np.exp(-weighting.kappa * (np.asarray(viability, dtype=np.float64) - weighting.theta)))


def _next_values(values: np.ndarray, outcome_next: np.ndarray) -> np.ndarray:
    """V(s') per step: the next step's value inside a segment, the segment's outcome at its last step."""
    following = np.append(values[1:], np.nan)
    return np.where(np.isnan(outcome_next), following, outcome_next)


def lambda_advantage(values: np.ndarray, outcome_next: np.ndarray, gamma: float, lam: float) -> np.ndarray:
    """GAE(λ) per step of one episode: TD errors summed along the rest of each segment (NaN on unlabelled runs)."""
    delta = gamma * _next_values(values, outcome_next) - values
    advantage = np.empty(len(values))
    carry = 0.0
    for t in range(len(values) - 1, -1, -1):
        carry = delta[t] + (0.0 if np.isfinite(outcome_next[t]) else gamma * lam * carry)
        advantage[t] = carry
    return advantage


def merged_advantage(
    v_via: np.ndarray,
    v_eff: np.ndarray,
    outcome_next: np.ndarray,
    weighting: HabcWeighting,
) -> np.ndarray:
    """A per step of one episode (its steps in order), from the critics' values at every step."""
    a_via = lambda_advantage(v_via, outcome_next, 1.0, weighting.lam)
    a_eff = lambda_advantage(v_eff, outcome_next, weighting.gamma_efficiency, weighting.lam)
    g = gate(v_via, weighting)
    return (1.0 - g) * a_via + g * a_eff


def transition_weights(advantage: np.ndarray, by_policy: np.ndarray, weighting: HabcWeighting) -> np.ndarray:
    """BC loss weights: exp(A / β) clipped to w_max, mean ``policy_weight`` over the policy's steps; a person's:
    ``human_weight``."""
    advantage = np.asarray(advantage, dtype=np.float64)
    by_policy = np.asarray(by_policy, dtype=bool)
    if not np.isfinite(advantage[by_policy]).all():
        raise FloatingPointError("non-finite advantage on a policy step: the critics diverged")
    weights = np.full(len(advantage), weighting.human_weight)
    raw = np.minimum(np.exp(np.minimum(advantage[by_policy] / weighting.beta, 50.0)), weighting.max_weight)
    if len(raw):
        weights[by_policy] = weighting.policy_weight * raw / raw.mean()
    return weights


@dataclass(frozen=True)
class HabcConfig:
    """One HABC update: credit rules, the critics, the weighting and the weighted-BC fine-tune."""

    weighting: HabcWeighting = field(default_factory=HabcWeighting)
    critic: CriticConfig = field(default_factory=CriticConfig)
    aware: bool = True  # False: the ablation, credit across intervention boundaries
    demos: Path | None = None  # demonstrations trained on beside the episodes, at ``demo_weight`` (see below)
    critics: Literal["two", "one"] = "two"  # "one": the single-critic AWBC baseline (viability only, no gate)
    selection: SelectionConfig | None = None  # critic-guided picks as more BC targets (`policies.rl.selection`)
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
    selection: dict[str, Any] | None = None  # the selection critics' losses and how many windows got a pick


def habc_update(dataset: Path, checkpoint: Path, run_dir: Path, config: HabcConfig = HabcConfig()) -> HabcUpdate:
    """Fit the two critics on ``dataset``'s episodes, weigh every step, fine-tune ``checkpoint`` with those weights.

    The critics read the policy observation (``observation.state``); the policy trains on the episodes' windows as
    in imitation. Raises `SpecMismatchError` for a dataset of another robot or task, `CreditError` for an episode
    without outcome columns and `FloatingPointError` when a critic or the fine-tune diverges (the round is then
    rejected, nothing deployed).
    """
    ds = load_dataset(dataset)
    check_same_task(ds.spec, checkpoint, dataset)
    w = config.weighting
    episodes, credits = [], []
    for i in range(ds.num_episodes):
        steps = ds.episode(i)
        credits.append(episode_credit(steps, episode=i, gamma_efficiency=w.gamma_efficiency, aware=config.aware))
        episodes.append({"obs": steps["observation.state"], "action": steps["action"]})
    obs = np.concatenate([e["obs"] for e in episodes])
    lengths = [len(e["obs"]) for e in episodes]
    episode_of = np.repeat(np.arange(len(episodes)), lengths)
    starts = np.cumsum(lengths)[:-1]
    viability_targets = np.concatenate([c.viability for c in credits])
    efficiency_targets = np.concatenate([c.efficiency for c in credits])
    v_via, viability_mse = cross_fitted_values(obs, viability_targets, episode_of, w.folds, config.critic)
    v_eff, efficiency_mse = None, None
    if config.critics == "two" and np.isfinite(efficiency_targets).any():
        v_eff, efficiency_mse = cross_fitted_values(obs, efficiency_targets, episode_of, w.folds, config.critic)
    advantages = []
    per_episode_eff = [None] * len(credits) if v_eff is None else np.split(v_eff, starts)
    for credit, via, eff in zip(credits, np.split(v_via, starts), per_episode_eff, strict=True):
        if eff is None:  # one critic, or no success yet (how soon means nothing): viability alone decides
            advantages.append(lambda_advantage(via, credit.outcome_next, 1.0, w.lam))
        else:
            advantages.append(merged_advantage(via, eff, credit.outcome_next, w))
    by_policy = np.concatenate([c.by_policy for c in credits])
    weighted = by_policy if config.aware else np.ones_like(by_policy)  # the ablation weighs the person's steps too
    all_weights = transition_weights(np.concatenate(advantages), weighted, w)  # normalised over the whole dataset
    policy_weights = all_weights[weighted]
    squares = float((policy_weights**2).sum())  # 0 when policy_weight is 0: no step counts
    effective = float(policy_weights.sum() ** 2 / (len(policy_weights) * squares)) if squares > 0 else 0.0
    extra = {"habc": {"aware": config.aware, "dataset": str(dataset), "episodes": ds.num_episodes}}
    demo_episodes = demonstration_episodes(config.demos, checkpoint)
    extra["habc"] |= {"demos": None if config.demos is None else str(config.demos), "demo_episodes": len(demo_episodes)}
    train_weights = np.concatenate([all_weights, *(np.full(len(e["action"]), w.demo_weight) for e in demo_episodes)])
    targets, selection = None, None
    if config.selection is not None:
        targets, selection = critic_picks(ds, config.demos, checkpoint, episodes + demo_episodes, config.selection)
        extra["habc"] |= {"selection": selection}
    new = finetune_weighted(checkpoint, episodes + demo_episodes, train_weights, config.train, run_dir, extra, targets)
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
        selection=selection,
    )


@dataclass(frozen=True)
class HabcRound:
    """HABC as the learner's round update (`policies.rl.rounds.RoundUpdate`): every round is one `habc_update`."""

    config: HabcConfig = field(default_factory=HabcConfig)

    def __call__(self, dataset: Path, checkpoint: Path, out: Path, round_: int) -> RoundOutcome:
        update = habc_update(dataset, checkpoint, out, self.config)
        numbers = {k: v for k, v in update.__dict__.items() if k != "checkpoint"}
        return RoundOutcome(update.checkpoint, numbers, stage="habc" if self.config.critics == "two" else "awbc")


def demonstration_episodes(demos: Path | None, checkpoint: Path) -> list[dict[str, np.ndarray]]:
    """The SFT demonstrations as more BC data (at ``demo_weight``), so that the fine-tune does
    not forget what the first rounds' few episodes never visit: on panda-peg-insert, fine-tuning on the episodes alone
    (lr 1e-3) made the scripted person take over more often each round (0.7 → 1.2 interventions per episode over 3
    rounds)."""
    if demos is None:
        return []
    ds = load_dataset(demos)
    check_same_task(ds.spec, checkpoint, demos)
    return [{"obs": e["observation.state"], "action": e["action"]} for e in ds.episodes()]


def check_same_task(recorded: Spec | None, checkpoint: Path, dataset: Path) -> None:
    """Episodes of another robot or task would train the policy on observations it does not read: refuse."""
    if recorded is None:
        raise ValueError(f"{dataset} records no reflexlab Spec: cannot tell which task its episodes are")
    _, stored = GenerativePolicy.load(checkpoint)
    policy = Spec.from_dict(stored["spec"])
    policy.task_interface().check_compatible(recorded.task_interface(), context=f"dataset {dataset} vs policy")
