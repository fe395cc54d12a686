"""One `panda-peg-insert` scene stepped one physics step at a time: the plant behind sim-as-real.

As push-T's `RealtimePushT` (see there for why): the robot's controller runs at the physics rate and
follows the newest target at any rate, the tip reference moving towards it at most ``MAX_TIP_SPEED``, the
IK solved every ``IK_EVERY`` physics steps (50 Hz, training's five waypoints per 10 Hz step) with each
reference kept within the env's ``MAX_LEAD`` of the measured tip (the force limit), joint targets
interpolated between solutions. So the arm moves exactly as in training when targets come at 10 Hz.

The hole is reported as a tracker would: its true centre plus the episode's bias (drawn from the seed, the
same as `PegInsertEnv`'s for that seed) plus fresh jitter at every report, at the rim's height, yaw 0.
"""

from __future__ import annotations

import mujoco
import numpy as np

from reflexlab.tasks.panda_peg_insert import constants as C
from reflexlab.tasks.panda_peg_insert.config import PegInsertConfig
from sim.tasks.panda_peg_insert.env import PegInsertEnv, lead_limited
from sim.tasks.panda_push_t.realtime import ArmSceneState

IK_EVERY = C.DECIMATION // C.IK_WAYPOINTS


class RealtimePegInsert:
    """A single scene; `step` advances one physics step (``C.PHYSICS_DT``)."""

    tracked_objects = ("hole",)  # what the scene's tracker reports (`tracked_poses`)

    def __init__(self, seed: int = 0, config: PegInsertConfig | None = None) -> None:
        self._env = PegInsertEnv(num_envs=1, config=config)
        self._scene = self._env.scenes[0]
        self.model = self._env.model
        self.data = self._scene.data
        self.ik = self._env.ik
        self.dt = float(self.model.opt.timestep)
        self.joint_names = C.JOINT_NAMES
        self._low, self._high = np.array(C.WORKSPACE_LOW), np.array(C.WORKSPACE_HIGH)
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """Place hole and peg, and draw the tracker's bias, as `PegInsertEnv.reset` does for ``seed``."""
        self._env.reset([seed])
        self._reference = self._scene.tip_target.copy()  # where the tip is being driven now
        self._target = self._reference.copy()  # the newest commanded tip position
        self._q_from = self._q_to = self._scene.q_target.copy()
        self.steps = 0
        self.time = 0.0
        self.clipped_targets = 0

    def set_tip_target(self, xyz: np.ndarray) -> None:
        """Newest peg tip target (x, y, z); clipped into the workspace."""
        xyz = np.asarray(xyz, dtype=np.float64).reshape(3)
        if not np.isfinite(xyz).all():
            raise ValueError(f"non-finite peg tip target {xyz.tolist()}")
        clipped = np.clip(xyz, self._low, self._high)
        self.clipped_targets += int(not np.array_equal(clipped, xyz))
        self._target = clipped

    def hold(self) -> None:
        """Stop where the tip is being driven now (what a driver does when its command stream stops)."""
        self._target = self._reference.copy()

    def step(self) -> None:
        k = self.steps % IK_EVERY
        if k == 0:  # next IK waypoint: the reference one IK period ahead, rate-limited, then force-limited
            delta = self._target - self._reference
            dist = float(np.linalg.norm(delta))
            max_move = C.MAX_TIP_SPEED * self.dt * IK_EVERY
            if dist > max_move:
                delta *= max_move / dist
            self._reference = self._reference + delta
            self._q_from = self._q_to
            tip = self.data.site_xpos[self.ik.site]
            self._q_to = self.ik.solve(self._q_from, lead_limited(self._reference, tip))
        self.data.ctrl[:] = self._q_from + (self._q_to - self._q_from) * ((k + 1) / IK_EVERY)
        mujoco.mj_step(self.model, self.data)
        self.steps += 1
        self.time += self.dt

    def state(self) -> ArmSceneState:
        d, ik = self.data, self.ik
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[ik.site])
        return ArmSceneState(
            time=self.time,
            joint_pos=d.qpos[ik.qadr].copy(),
            joint_vel=d.qvel[ik.dadr].copy(),
            joint_effort=d.actuator_force.copy(),
            tip_pos=d.site_xpos[ik.site].copy(),
            tip_quat=quat,
        )

    def tracked_poses(self) -> dict[str, np.ndarray]:
        """Object name → (7,) x, y, z, qw, qx, qy, qz: the hole's centre at the rim, with a fresh tracker error."""
        hole = self._env.tracked_hole(0)
        return {"hole": np.array([*hole, C.HOLE_TOP, 1.0, 0.0, 0.0, 0.0])}

    def diagnostics(self) -> dict[str, float]:
        """The task's own numbers for the bridge's diagnostics (from the true state)."""
        return {"progress": float(self._env.progress()[0]), "depth_mm": float(self._env.depth()[0] * 1e3)}
