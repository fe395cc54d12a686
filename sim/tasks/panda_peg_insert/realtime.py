"""One `panda-peg-insert` scene stepped one physics step at a time: the plant behind sim-as-real.

The arm's controller is push-T's `RealtimeArm` (see there for why): it runs at the physics rate and follows
the newest target at any rate, the tip reference moving towards it at most ``MAX_TIP_SPEED``, the IK solved
every ``substeps`` physics steps (50 Hz, training's five waypoints per 10 Hz step) with each reference kept
within the env's ``MAX_LEAD`` of the measured tip (the force limit, `_ik_reference`), joint targets
interpolated between solutions. So the arm moves exactly as in training when targets come at 10 Hz.

The hole is reported as a tracker would: its true centre plus the episode's bias (drawn from the seed, the
same as `PegInsertEnv`'s for that seed) plus fresh jitter at every report, at the rim's height, yaw 0.
"""

from __future__ import annotations

import numpy as np

from reflexlab.tasks.panda_peg_insert import constants as C
from reflexlab.tasks.panda_peg_insert.config import PegInsertConfig
from sim.tasks.panda_peg_insert.env import PegInsertEnv, lead_limited
from sim.tasks.panda_push_t.realtime import RealtimeArm


class RealtimePegInsert(RealtimeArm):
    """A single peg-insert scene; `step` advances one physics step (``C.PHYSICS_DT``)."""

    tracked_objects = ("hole",)
    target_name = "peg tip"

    def __init__(self, seed: int = 0, config: PegInsertConfig | None = None) -> None:
        self._env = PegInsertEnv(num_envs=1, config=config)
        self._scene = self._env.scenes[0]
        super().__init__(self._env, np.array(C.WORKSPACE_LOW), np.array(C.WORKSPACE_HIGH), C.MAX_TIP_SPEED)
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """Place hole and peg, and draw the tracker's bias, as `PegInsertEnv.reset` does for ``seed``."""
        self._env.reset([seed])
        self._restart(self._scene.tip_target, self._scene.q_target)

    def _ik_reference(self, reference: np.ndarray) -> np.ndarray:
        """The reference kept within ``MAX_LEAD`` of the measured tip: the force limit, as in `PegInsertEnv`."""
        return lead_limited(reference, self.data.site_xpos[self.ik.site])

    def tracked_poses(self) -> dict[str, np.ndarray]:
        """Object name → (7,) x, y, z, qw, qx, qy, qz: the hole's centre at the rim, with a fresh tracker error."""
        hole = self._env.tracked_hole(0)
        return {"hole": np.array([*hole, C.HOLE_TOP, 1.0, 0.0, 0.0, 0.0])}

    def diagnostics(self) -> dict[str, float]:
        """The task's own numbers for the bridge's diagnostics (from the true state)."""
        return {"progress": float(self._env.progress()[0]), "depth_mm": float(self._env.depth()[0] * 1e3)}
