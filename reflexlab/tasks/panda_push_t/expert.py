"""A scripted Push-T expert whose demonstrations are genuinely multimodal.

Each 10 Hz step it picks where to push: for every point on the T's outline and three push
directions in the friction cone, a quasi-static model of the block (viscous sliding, the model the
simulator uses) predicts the block's twist for a pusher moving at that point; the push whose twist
best aligns with the twist towards the goal wins (hysteresis keeps a push going while it still
helps). To reach a new contact the pusher leaves the block's clearance circle, travels around it,
and comes in along the contact normal. Going around is where the modes come from: when the two
ways round differ by less than ``ambiguity_rad``, the side is drawn at random (the state is then
*two-sided*: the same state is demonstrated going either way), otherwise the shorter way is taken.

Every step reports the detour direction (+1 counter-clockwise, −1 clockwise, 0 none) and whether
the current detour began at a two-sided state, so an evaluation can ask a policy at those states
whether it covers both modes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from reflexlab.tasks.panda_push_t import constants as C
from reflexlab.tasks.panda_push_t import geometry as G
from reflexlab.tasks.panda_push_t.spec import block_pose_of

_BLOCK_DAMPING = np.array([6.0, 6.0, 0.015])  # slide, slide, yaw: as in panda_push_t.xml
_L = 0.06  # m per rad: how yaw error weighs against position error


@dataclass
class ExpertStep:
    target: np.ndarray  # pusher target (x, y)
    detour: int  # +1 counter-clockwise, −1 clockwise, 0 not going around
    two_sided: bool  # the current detour's side was drawn at random between two near-equal ways


class PushTExpert:
    """Closed-loop scripted pusher for one scene; ``rng`` draws the side at two-sided states."""

    def __init__(self, rng: np.random.Generator, ambiguity_rad: float = 1.2, friction: float = 0.6) -> None:
        self.rng = rng
        self.ambiguity = ambiguity_rad
        self.mu = friction
        points, normals = G.boundary(spacing=0.008)
        keep = np.array([self._reachable(p, n) for p, n in zip(points, normals, strict=True)])
        self.points, self.normals = points[keep], normals[keep]
        self.alphas = np.deg2rad([-20.0, 0.0, 20.0])
        self.circle = G.radius() + C.PUSHER_RADIUS + 0.012
        self.goal = np.asarray(C.GOAL_POSE, dtype=np.float64)
        self.max_move = C.MAX_PUSHER_SPEED * C.CONTROL_DT
        self._twists = self._unit_twists()
        self.reset()

    def reset(self) -> None:
        self.contact: tuple[int, int] | None = None
        self.phase = "reposition"
        self.direction = 0
        self.two_sided = False
        self.banned: dict[int, int] = {}  # contact index -> steps left; contacts we failed to reach
        self._last_pusher: np.ndarray | None = None
        self._still = 0

    @staticmethod
    def _reachable(p: np.ndarray, n: np.ndarray) -> bool:
        """Whether the pusher can come in along the normal and touch ``p`` without hitting the T elsewhere."""
        centres = p + n * (C.PUSHER_RADIUS + np.linspace(0.004, 0.25, 80))[:, None]
        return not G.inside(centres, eps=C.PUSHER_RADIUS + 0.002).any()

    # --- model ---------------------------------------------------------------------------------
    def _unit_twists(self) -> np.ndarray:
        """Block-frame twist (vx, vy, ω) per (contact, direction) for a unit pusher velocity; NaN outside the cone."""
        out = np.full((len(self.points), len(self.alphas), 3), np.nan)
        d_inv = np.diag(1.0 / _BLOCK_DAMPING)
        for i, (p, n) in enumerate(zip(self.points, self.normals, strict=True)):
            jac = np.array([[1.0, 0.0, -p[1]], [0.0, 1.0, p[0]]])
            for k, a in enumerate(self.alphas):
                u = G.rotation(a) @ -n
                f = np.linalg.solve(jac @ d_inv @ jac.T, u)
                fn = f @ -n
                ft = np.linalg.norm(f + fn * n)
                if fn > 0 and ft <= self.mu * fn:  # sticking contact: the pusher carries the point along
                    out[i, k] = d_inv @ jac.T @ f
        return out

    def _scores(self, block: np.ndarray) -> np.ndarray:
        err = np.array([*(self.goal[:2] - block[:2]), _L * _wrap(self.goal[2] - block[2])])
        rot = G.rotation(block[2])
        tw = self._twists.copy()
        tw[..., :2] = tw[..., :2] @ rot.T  # to world
        tw[..., 2] *= _L
        norms = np.linalg.norm(tw, axis=-1) * np.linalg.norm(err) + 1e-12
        return np.nan_to_num((tw @ err) / norms, nan=-2.0)

    # --- acting --------------------------------------------------------------------------------
    def act(self, pusher: np.ndarray, block: np.ndarray) -> ExpertStep:
        self._watch_progress(pusher)
        scores = self._scores(block)
        for i in list(self.banned):
            scores[i] = -2.0
            self.banned[i] -= 1
            if self.banned[i] <= 0:
                del self.banned[i]
        best = np.unravel_index(np.argmax(scores), scores.shape)
        stale = self.contact is None or not (scores[self.contact] > max(scores[best] - 0.15, 0.5))
        if stale and self.contact != tuple(best):
            self.contact, self.phase, self.direction = (int(best[0]), int(best[1])), "reposition", 0
        i, k = self.contact
        rot = G.rotation(block[2])
        n_w = rot @ self.normals[i]
        touch = block[:2] + rot @ self.points[i] + n_w * C.PUSHER_RADIUS  # pusher centre touching the point
        pre = touch + n_w * 0.006
        if self.phase == "push":
            if np.linalg.norm(pusher - touch) > 0.012:  # slipped off the contact: go round again
                self.phase, self.direction = "reposition", 0
            else:
                err = np.linalg.norm([*(self.goal[:2] - block[:2]), _L * _wrap(self.goal[2] - block[2])])
                step = float(np.clip(0.6 * err, 0.004, self.max_move * 0.6))
                u_w = rot @ (G.rotation(self.alphas[k]) @ -self.normals[i])
                return ExpertStep(touch + u_w * step, 0, False)
        return self._reposition(pusher, block, pre, n_w)

    def _watch_progress(self, pusher: np.ndarray) -> None:
        """A pusher that has not moved for 3 steps while repositioning cannot reach its contact: ban it."""
        moved = self._last_pusher is None or np.linalg.norm(pusher - self._last_pusher) > 0.001
        self._last_pusher = pusher.copy()
        self._still = 0 if moved or self.phase == "push" else self._still + 1
        if self._still >= 3 and self.contact is not None:
            self.banned[self.contact[0]] = 20
            self.contact, self.phase, self.direction, self._still = None, "reposition", 0, 0

    def _reposition(self, pusher: np.ndarray, block: np.ndarray, pre: np.ndarray, n_w: np.ndarray) -> ExpertStep:
        if np.linalg.norm(pusher - pre) < 0.004:
            self.phase, self.direction = "push", 0
            return ExpertStep(pre - n_w * 0.004, 0, False)
        c = block[:2]
        approach = self._approach(c, pre, n_w)
        if self.phase == "approach" or np.linalg.norm(pusher - approach) < 0.005:
            # On the contact's normal line (validated free by `_reachable`): straight in.
            self.phase, self.direction = "approach", 0
            return ExpertStep(_toward(pusher, pre, self.max_move), 0, False)
        if self._clear(block, pusher, pre):
            self.direction = 0
            return ExpertStep(_toward(pusher, pre, self.max_move), 0, False)
        r = pusher - c
        if np.linalg.norm(r) < self.circle - 0.004:  # inside the clearance circle: back straight out
            out = c + r / (np.linalg.norm(r) + 1e-9) * self.circle
            return ExpertStep(out, self.direction, self.two_sided and self.direction != 0)
        delta = _wrap(np.arctan2(*(approach - c)[::-1]) - np.arctan2(r[1], r[0]))
        if self.direction == 0:  # a new detour: choose the way round
            self.two_sided = abs(abs(delta) - np.pi) < self.ambiguity / 2
            self.direction = int(self.rng.choice([-1, 1])) if self.two_sided else (1 if delta > 0 else -1)
        travel = delta if np.sign(delta) == self.direction else delta - self.direction * 2 * np.pi
        arc_step = self.max_move / self.circle
        if abs(travel) <= arc_step:
            return ExpertStep(_toward(pusher, approach, self.max_move), self.direction, self.two_sided)
        ang = np.arctan2(r[1], r[0]) + self.direction * arc_step
        return ExpertStep(c + self.circle * np.array([np.cos(ang), np.sin(ang)]), self.direction, self.two_sided)

    def _approach(self, c: np.ndarray, pre: np.ndarray, n_w: np.ndarray) -> np.ndarray:
        """The point on the clearance circle from which the pusher comes in along the contact normal."""
        d = pre - c
        b = d @ n_w
        s = -b + np.sqrt(max(b * b - (d @ d - self.circle**2), 0.0))
        return pre + n_w * max(s, 0.0)

    def _clear(self, block: np.ndarray, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether the pusher can travel straight from ``a`` to ``b`` without touching the block."""
        pts = a + np.linspace(0.0, 1.0, 25)[:, None] * (b - a)
        return not G.inside(G.to_block(block, pts), eps=C.PUSHER_RADIUS + 0.003).any()


def _toward(a: np.ndarray, b: np.ndarray, max_move: float) -> np.ndarray:
    d = b - a
    n = np.linalg.norm(d)
    return b if n <= max_move else a + d * (max_move / n)


def _wrap(angle: float) -> float:
    return float((angle + np.pi) % (2 * np.pi) - np.pi)


def expert_policy(seed: int) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[], None]]:
    """The expert as a policy of the task's observation (pusher x, y, block x, y, cos, sin of yaw): (act, reset)."""
    expert = PushTExpert(np.random.default_rng(seed))

    def act(obs: np.ndarray) -> np.ndarray:
        return expert.act(obs[:2], block_pose_of(np.asarray(obs, dtype=np.float64))).target

    return act, expert.reset
