"""One `panda-push-t` scene stepped one physics step at a time: the plant behind sim-as-real.

`PushTEnv` advances 0.1 s per call because a learner wants whole control steps. A robot does not
wait for the policy: its controller runs at the physics rate and follows whatever target arrived
last, at whatever rate targets come. `RealtimeArm` is that robot (shared with `panda-peg-insert`).
The tip reference moves towards the newest target at most the task's tip speed (the same limit as
training); the IK is solved every ``substeps`` physics steps (the env's) — 50 Hz, as training's five
waypoints per 10 Hz step — and the joint servo targets are interpolated between solutions, so the arm
moves exactly as it did in training when targets arrive at 10 Hz, and smoothly when they arrive at any
other rate. Unlike training, a push-T target may also lift the tip (up to ``MAX_LIFT`` above the
pushing height): a scripted reset must be able to go over the block rather than through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import mujoco
import numpy as np

from reflexlab.tasks.panda_push_t import constants as C
from reflexlab.tasks.panda_push_t import geometry as G
from sim.tasks.panda_push_t.env import ArmEnv, PushTEnv

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


class RealtimeArm:
    """The arm's controller on the physics clock, for one scene of ``env``; `step` advances one physics step.

    An arm task's real-time scene subclasses it: it builds its one-scene env, calls `_restart` from ``reset``,
    reports ``tracked_objects`` (`tracked_poses`) and `diagnostics`, and may limit the IK's reference in
    `_ik_reference` (the one place the tasks' controllers differ, as in `ArmEnv._ik_target`).

    Args:
        env: the task's env, one scene; its ``substeps`` is the IK period, as in training.
        low, high: the workspace (x, y, z) tip targets are clipped into.
        max_tip_speed: m/s the tip reference may move.
    """

    tracked_objects: ClassVar[tuple[str, ...]]  # what the scene's tracker reports (`tracked_poses`)
    target_name: ClassVar[str]  # the commanded point, as an error names it

    def __init__(self, env: ArmEnv, low: np.ndarray, high: np.ndarray, max_tip_speed: float) -> None:
        self.model = env.model
        self.data = env.scenes[0].data
        self.ik = env.ik
        self.dt = float(self.model.opt.timestep)
        self.joint_names = C.JOINT_NAMES
        self._low, self._high = low, high
        self._ik_every = env.substeps
        self._max_move = max_tip_speed * self.dt * self._ik_every  # m per IK period

    def _restart(self, reference: np.ndarray, q: np.ndarray) -> None:
        """Follow on from the env's reset: the tip driven to ``reference`` (x, y, z), joint targets ``q``."""
        self._reference = reference.copy()  # where the tip is being driven now
        self._target = reference.copy()  # the newest commanded tip position
        self._q_from = self._q_to = q.copy()
        self.steps = 0
        self.time = 0.0
        self.clipped_targets = 0

    def set_tip_target(self, xyz: np.ndarray) -> None:
        """Newest tip target (x, y, z); clipped into the workspace (``low`` … ``high``)."""
        xyz = np.asarray(xyz, dtype=np.float64).reshape(3)
        if not np.isfinite(xyz).all():
            raise ValueError(f"non-finite {self.target_name} target {xyz.tolist()}")
        clipped = np.clip(xyz, self._low, self._high)
        self.clipped_targets += int(not np.array_equal(clipped, xyz))
        self._target = clipped

    def hold(self) -> None:
        """Stop where the tip is being driven now (what a driver does when its command stream stops)."""
        self._target = self._reference.copy()

    def step(self) -> None:
        """One physics step: a new IK waypoint every ``substeps`` steps, joint targets interpolated between."""
        k = self.steps % self._ik_every
        if k == 0:  # next IK waypoint: the reference one IK period ahead, rate-limited
            delta = self._target - self._reference
            dist = float(np.linalg.norm(delta))
            if dist > self._max_move:
                delta *= self._max_move / dist
            self._reference = self._reference + delta
            self._q_from = self._q_to
            self._q_to = self.ik.solve(self._q_from, self._ik_reference(self._reference))
        self.data.ctrl[:] = self._q_from + (self._q_to - self._q_from) * ((k + 1) / self._ik_every)
        mujoco.mj_step(self.model, self.data)
        self.steps += 1
        self.time += self.dt

    def _ik_reference(self, reference: np.ndarray) -> np.ndarray:
        """What the IK solves for at a waypoint whose tip reference is ``reference``: the reference itself."""
        return reference

    def state(self) -> ArmSceneState:
        """What the arm's drivers would report now (the bridge publishes it as the robot's state)."""
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


class RealtimePushT(RealtimeArm):
    """A single push-T scene; `step` advances one physics step (``C.PHYSICS_DT``)."""

    tracked_objects = ("block",)
    target_name = "pusher"

    def __init__(self, seed: int = 0) -> None:
        self._env = PushTEnv(num_envs=1)
        low = np.array([*C.WORKSPACE_LOW, C.PUSHER_HEIGHT])  # z: the pushing height …
        high = np.array([*C.WORKSPACE_HIGH, C.PUSHER_HEIGHT + MAX_LIFT])  # … up to MAX_LIFT above it
        super().__init__(self._env, low, high, C.MAX_PUSHER_SPEED)
        self.reset(seed)

    def reset(self, seed: int) -> None:
        """Place block and pusher as `PushTEnv.reset` does for ``seed`` (same seed, same scene)."""
        self._env.reset([seed])
        scene = self._env.scenes[0]
        self._restart(np.array([*scene.tip_target, C.PUSHER_HEIGHT]), scene.q_target)

    def tracked_poses(self) -> dict[str, np.ndarray]:
        """Object name → (7,) x, y, z, qw, qx, qy, qz, as a tracker reports it: the block at mid-height, its yaw."""
        x, y, yaw = self._env.block_pose()[0]
        return {"block": np.array([x, y, C.BLOCK_HEIGHT / 2, np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])}

    def diagnostics(self) -> dict[str, float]:
        """The task's own numbers for the bridge's diagnostics."""
        return {"coverage": float(G.coverage(self._env.block_pose())[0])}
