"""HABC's per-transition weights: two one-step advantages merged by a state-adaptive gate, then exponentiated.

The paper (arXiv 2606.17043) publishes no formulas; these are ours (issue 22 asks us to say what we chose):

* one-step advantages from the two critics of `policies.rl.critics`, bootstrapping from the segment's outcome at
  its last step (`policies.rl.credit.Credit.outcome_next`)::

      A_via = V_via(s') − V_via(s)          (γ_v = 1: did this step make success more likely?)
      A_eff = γ_e · V_eff(s') − V_eff(s)     (did it bring success sooner?)

* the gate ``g = σ(κ (V_via(s) − θ))``: while success from s is uncertain (V_via below θ) the viability advantage
  decides; once it is likely, the efficiency one. ``A = (1 − g) A_via + g A_eff``.
* weights ``w = min(exp(A / β), w_max)`` (advantage-weighted regression, clipped so that one lucky transition cannot
  dominate), normalised to mean 1 over the policy's transitions so that the BC loss keeps its scale. A person's
  transitions get ``human_weight`` (default 1: plain BC on what the person did).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
        raise ValueError("non-finite advantage on a policy step: the critics diverged")
    weights = np.full(len(advantage), weighting.human_weight)
    raw = np.minimum(np.exp(np.minimum(advantage[by_policy] / weighting.beta, 50.0)), weighting.max_weight)
    if len(raw):
        weights[by_policy] = raw / raw.mean()
    return weights
