"""One `panda-push-t` scene stepped one physics step at a time: the plant behind sim-as-real.

`PushTEnv` advances 0.1 s per call because a learner wants whole control steps. A robot does not
wait for the policy: its controller runs at the physics rate and follows whatever target arrived
last, at whatever rate targets come. This class is that robot. The tip reference moves towards
the newest target at most ``MAX_PUSHER_SPEED`` (the same limit as training); the IK is solved
every ``IK_EVERY`` physics steps — 50 Hz, as training's five waypoints per 10 Hz step — and the
joint servo targets are interpolated between solutions, so the arm moves exactly as it did in
training when targets arrive at 10 Hz, and smoothly when they arrive at any other rate. Unlike
training, a target may also lift the tip (up to ``MAX_LIFT`` above the pushing height): a scripted
reset must be able to go over the block rather than through it.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from reflexlab.tasks.panda_push_t import constants as C
from reflexlab.tasks.panda_push_t import geometry as G
from sim.tasks.panda_push_t.env import PushTEnv

IK_EVERY = C.DECIMATION // C.IK_WAYPOINTS
MAX_LIFT = 0.15  # m above the pushing height


@dataclass(frozen=True)
class ArmSceneState:
    """What the arm's drivers would report, plus the sim time (tracked objects: the scene's ``tracked_poses``)."""

    time: float
    joint_pos: np.ndarray
    joint_vel: np.ndarray
    joint_effort: np.ndarray
    tip_pos: np.ndarray  # (3,) tool tip (push-T: the pusher's) in the base frame, m
    tip_quat: np.ndarray  # (4,) w, x, y, z


class RealtimePushT:
    """A single scene; `step` advances one physics step (``C.PHYSICS_DT``)."""

    tracked_objects = ("block",)  # what the scene's tracker reports (`tracked_poses`)

    def __init__(self, seed: int = 0) -> None:
        self._env = PushTEnv(num_envs=1)
        self.model = self._env.model
        self.data = self._env.scenes[0].data
        self.ik = self._env.ik
        self.dt = float(self.model.opt.timestep)
        self.joint_names = C.JOINT_NAMES
        self._low = np.array([*C.WORKSPACE_LOW, C.PUSHER_HEIGHT])
        self._high = np.array([*C.WORKSPACE_HIGH, C.PUSHER_HEIGHT + MAX_LIFT])
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """Place block and pusher as `PushTEnv.reset` does for ``seed`` (same seed, same scene)."""
        self._env.reset([seed])
        scene = self._env.scenes[0]
        self._reference = np.array([*scene.tip_target, C.PUSHER_HEIGHT])  # where the tip is being driven now
        self._target = self._reference.copy()  # the newest commanded tip position
        self._q_from = self._q_to = scene.q_target.copy()
        self.steps = 0
        self.time = 0.0
        self.clipped_targets = 0

    def set_tip_target(self, xyz: np.ndarray) -> None:
        """Newest pusher tip target (x, y, z); clipped into the workspace (z: pushing height … + ``MAX_LIFT``)."""
        xyz = np.asarray(xyz, dtype=np.float64).reshape(3)
        if not np.isfinite(xyz).all():
            raise ValueError(f"non-finite pusher target {xyz.tolist()}")
        clipped = np.clip(xyz, self._low, self._high)
        self.clipped_targets += int(not np.array_equal(clipped, xyz))
        self._target = clipped

    def hold(self) -> None:
        """Stop where the tip is now (what a driver does when its command stream stops)."""
        self._target = self._reference.copy()

    def step(self) -> None:
        k = self.steps % IK_EVERY
        if k == 0:  # next IK waypoint: the reference one IK period ahead, rate-limited
            delta = self._target - self._reference
            dist = float(np.linalg.norm(delta))
            max_move = C.MAX_PUSHER_SPEED * self.dt * IK_EVERY
            if dist > max_move:
                delta *= max_move / dist
            self._reference = self._reference + delta
            self._q_from = self._q_to
            self._q_to = self.ik.solve(self._q_from, self._reference)
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
        """Object name → (7,) x, y, z, qw, qx, qy, qz, as a tracker reports it: the block at mid-height, its yaw."""
        x, y, yaw = self._env.block_pose()[0]
        return {"block": np.array([x, y, C.BLOCK_HEIGHT / 2, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])}

    def diagnostics(self) -> dict[str, float]:
        """The task's own numbers for the bridge's diagnostics."""
        return {"coverage": float(G.coverage(self._env.block_pose())[0])}
