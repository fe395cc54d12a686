"""`panda-push-t` in MuJoCo: a Panda arm pushes a T block to a goal pose, 10 Hz task-space control.

The policy commands where the pusher tip should be on the table (x, y in the robot's base frame,
as Push-T commands its agent). Underneath, as on a real Franka in joint impedance, a
damped-least-squares IK turns the tip target into joint targets for the arm's position servos:
per 10 Hz step the target moves along a straight line (rate-limited to ``MAX_PUSHER_SPEED``),
solved at ``IK_WAYPOINTS`` points and interpolated in joint space between them. The tip is kept
vertical at the block's mid-height with a fixed wrist yaw; the seventh joint's redundancy is
pulled towards ``HOME_QPOS``.

`PushTEnv` steps a batch of independent scenes (one `MjData` each, one shared model) so that
evaluating a policy over 50 seeds runs the network once per step for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import mujoco
import numpy as np

from reflexlab.tasks.panda_push_t import constants as C
from reflexlab.tasks.panda_push_t import geometry as G
from reflexlab.tasks.panda_push_t import modes
from reflexlab.tasks.panda_push_t.spec import make_spec, observation

SCENE_XML = Path(__file__).with_name("panda_push_t.xml")


class ArmIK:
    """Damped-least-squares IK for a tool tip (``site``: push-T's pusher, the peg-insert task's peg): position + a
    fixed downward orientation."""

    def __init__(
        self, model: mujoco.MjModel, damping: float = 0.02, posture_gain: float = 0.2, site: str = C.PUSHER_SITE
    ) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.site = model.site(site).id
        self.qadr = np.array([model.jnt_qposadr[model.joint(n).id] for n in C.JOINT_NAMES])
        self.dadr = np.array([model.jnt_dofadr[model.joint(n).id] for n in C.JOINT_NAMES])
        self.lower, self.upper = np.array(C.JOINT_LOWER), np.array(C.JOINT_UPPER)
        self.home = np.array(C.HOME_QPOS)
        self.damping, self.posture_gain = damping, posture_gain
        self.data.qpos[self.qadr] = self.home
        mujoco.mj_kinematics(model, self.data)
        self.target_quat = np.empty(4)
        mujoco.mju_mat2Quat(self.target_quat, self.data.site_xmat[self.site])
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self._quat = np.empty(4)
        self._err_rot = np.empty(3)

    def solve(self, q: np.ndarray, target_xyz: np.ndarray, iterations: int = 2) -> np.ndarray:
        """Joint positions reaching ``target_xyz`` from the guess ``q`` (a few Newton steps)."""
        q = q.copy()
        for _ in range(iterations):
            self.data.qpos[self.qadr] = q
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_comPos(self.model, self.data)
            err_pos = target_xyz - self.data.site_xpos[self.site]
            mujoco.mju_mat2Quat(self._quat, self.data.site_xmat[self.site])
            mujoco.mju_subQuat(self._err_rot, self.target_quat, self._quat)  # in the site's frame
            err_rot = self.data.site_xmat[self.site].reshape(3, 3) @ self._err_rot  # Jacobians are in world
            mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.site)
            jac = np.vstack([self._jacp[:, self.dadr], self._jacr[:, self.dadr]])
            err = np.concatenate([err_pos, err_rot])
            jjt = jac @ jac.T + self.damping**2 * np.eye(6)
            dq = jac.T @ np.linalg.solve(jjt, err)
            # Null-space pull towards the home posture keeps the elbow where a person expects it.
            null = np.eye(7) - jac.T @ np.linalg.solve(jjt, jac)
            dq += null @ (self.posture_gain * (self.home - q))
            q = np.clip(q + dq, self.lower, self.upper)
        return q


@dataclass
class _Scene:
    data: mujoco.MjData
    q_target: np.ndarray  # current joint targets (the arm's position servos)
    tip_target: np.ndarray  # current commanded tip position (x, y)


class PushTEnv:
    """A batch of `panda-push-t` scenes stepped together at 10 Hz.

    Args:
        num_envs: independent scenes.
        episode_steps: control steps before an episode is truncated.
    """

    spec = make_spec()
    spec_factory = staticmethod(lambda cfg=None: make_spec())
    # The expert's modes, for evaluations that check a policy kept them (see `modes`).
    two_sided_states = staticmethod(modes.two_sided_states)
    chunk_mode = staticmethod(modes.chunk_mode)
    # What `sim.demos` records beside observation and action: the block pose (x, y, yaw; for analysis, not a
    # policy input), the detour's side (+1 counter-clockwise, −1 clockwise, 0 none) and whether it was drawn
    # at random between two near-equal ways (1).
    demo_features: ClassVar[dict[str, tuple[int, ...]]] = {
        "observation.environment_state": (3,),
        "expert.detour": (1,),
        "expert.two_sided": (1,),
    }

    def __init__(self, num_envs: int = 1, episode_steps: int = C.EPISODE_STEPS) -> None:
        self.model = mujoco.MjModel.from_xml_path(str(SCENE_XML))
        self.num_envs = num_envs
        self.episode_steps = episode_steps
        self.ik = ArmIK(self.model)
        self.block_qadr = np.array(
            [self.model.jnt_qposadr[self.model.joint(n).id] for n in ("block_x", "block_y", "block_yaw")]
        )
        self.block_origin = self.model.body("block").pos[:2].copy()
        self.tip_z = C.PUSHER_HEIGHT
        self.low, self.high = np.array(C.WORKSPACE_LOW), np.array(C.WORKSPACE_HIGH)
        self.max_move = C.MAX_PUSHER_SPEED * C.CONTROL_DT
        self.scenes = [_Scene(mujoco.MjData(self.model), np.array(C.HOME_QPOS), np.zeros(2)) for _ in range(num_envs)]
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.max_coverage = np.zeros(num_envs)
        self.done = np.zeros(num_envs, dtype=bool)
        self._renderer = None  # a sim.render.SceneRenderer once a camera is asked for

    # --- state ---------------------------------------------------------------------------------
    def block_pose(self) -> np.ndarray:
        """(N, 3) x, y, yaw of each block's centre of mass (yaw wrapped to (−π, π])."""
        out = np.empty((self.num_envs, 3))
        for i, s in enumerate(self.scenes):
            q = s.data.qpos[self.block_qadr]
            out[i] = (q[0] + self.block_origin[0], q[1] + self.block_origin[1], _wrap(q[2]))
        return out

    def pusher_xy(self) -> np.ndarray:
        """(N, 2) measured pusher tip positions."""
        return np.array([s.data.site_xpos[self.ik.site][:2] for s in self.scenes])

    def observation(self) -> np.ndarray:
        return observation(self.pusher_xy(), self.block_pose())

    def hold_action(self) -> np.ndarray:
        """(N, 2) the action that keeps each pusher where it is."""
        return self.pusher_xy()

    def expert_inputs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """What the scripted expert acts on, per scene: the pusher and the block's pose."""
        return list(zip(self.pusher_xy(), self.block_pose(), strict=True))

    def environment_state(self) -> np.ndarray:
        """(N, 3) the block poses, recorded beside the demonstrations."""
        return self.block_pose()

    def coverage(self) -> np.ndarray:
        return G.coverage(self.block_pose())

    def render(self, camera: str, height: int, width: int, scenes: np.ndarray | None = None) -> np.ndarray:
        """(N, height, width, 3) uint8 RGB frames of MJCF camera ``camera`` (e.g. "side"), now, of every scene
        or of the scene indices ``scenes``."""
        if self._renderer is None:
            from sim.render import SceneRenderer

            self._renderer = SceneRenderer(self.model)
        chosen = self.scenes if scenes is None else [self.scenes[i] for i in scenes]
        return self._renderer.render([s.data for s in chosen], camera, height, width)

    def episode_metrics(self) -> dict[str, np.ndarray]:
        """Per-scene scores of the current episodes, in both published Push-T conventions.

        ``max_coverage``: the episode's best coverage (tables report its mean over seeds);
        ``success``: coverage reached ``SUCCESS_COVERAGE`` (0.95) at some step.
        """
        return {"max_coverage": self.max_coverage.copy(), "success": self.max_coverage >= C.SUCCESS_COVERAGE}

    # --- episodes ------------------------------------------------------------------------------
    def reset(self, seeds: list[int] | np.ndarray) -> np.ndarray:
        """Start one episode per scene from its seed (same seed, same initial state)."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset needs {self.num_envs} seeds, got {len(seeds)}")
        for s, seed in zip(self.scenes, seeds, strict=True):
            self._reset_scene(s, np.random.default_rng(int(seed)))
        self.steps[:] = 0
        self.done[:] = False
        self.max_coverage[:] = self.coverage()
        return self.observation()

    def _reset_scene(self, s: _Scene, rng: np.random.Generator) -> None:
        block = np.array([*rng.uniform(C.INIT_BLOCK_LOW, C.INIT_BLOCK_HIGH), rng.uniform(-np.pi, np.pi)])
        clearance = G.radius() + C.PUSHER_RADIUS + 0.02
        while True:  # pusher anywhere in the workspace, clear of the block
            tip = rng.uniform(self.low + 0.02, self.high - 0.02)
            if np.linalg.norm(tip - block[:2]) > clearance:
                break
        mujoco.mj_resetData(self.model, s.data)
        s.data.qpos[self.block_qadr] = (block[0] - self.block_origin[0], block[1] - self.block_origin[1], block[2])
        q = self.ik.solve(np.array(C.HOME_QPOS), np.array([*tip, self.tip_z]), iterations=50)
        s.data.qpos[self.ik.qadr] = q
        s.data.ctrl[:] = q
        s.q_target, s.tip_target = q, tip.copy()
        mujoco.mj_forward(self.model, s.data)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Apply pusher targets (N, 2); returns obs, coverage (the reward), done, info.

        Scenes that are done are frozen (their episode is scored once). A target outside the
        workspace is clipped and one further than the speed limit allows is shortened, as the
        deploy safety filter would.
        """
        actions = np.asarray(actions, dtype=np.float64).reshape(self.num_envs, 2)
        if not np.isfinite(actions).all():
            raise ValueError("panda-push-t: non-finite pusher target")
        n_sub = C.DECIMATION // C.IK_WAYPOINTS
        for i, s in enumerate(self.scenes):
            if self.done[i]:
                continue
            goal = np.clip(actions[i], self.low, self.high)
            delta = goal - s.tip_target
            dist = np.linalg.norm(delta)
            if dist > self.max_move:
                goal = s.tip_target + delta * (self.max_move / dist)
            start_xy, q_prev = s.tip_target, s.q_target
            for k in range(1, C.IK_WAYPOINTS + 1):
                xy = start_xy + (goal - start_xy) * (k / C.IK_WAYPOINTS)
                q_next = self.ik.solve(q_prev, np.array([*xy, self.tip_z]))
                for j in range(1, n_sub + 1):
                    s.data.ctrl[:] = q_prev + (q_next - q_prev) * (j / n_sub)
                    mujoco.mj_step(self.model, s.data)
                q_prev = q_next
            s.q_target, s.tip_target = q_prev, goal
        self.steps[~self.done] += 1
        cov = self.coverage()
        self.max_coverage = np.maximum(self.max_coverage, np.where(self.done, 0.0, cov))
        success = cov >= C.SUCCESS_COVERAGE
        newly_done = ~self.done & (success | (self.steps >= self.episode_steps))
        self.done |= newly_done
        return self.observation(), cov, newly_done, {"success": success, "max_coverage": self.max_coverage.copy()}


def _wrap(angle: float) -> float:
    return float((angle + np.pi) % (2 * np.pi) - np.pi)
