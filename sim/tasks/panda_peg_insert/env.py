"""`panda-peg-insert` in MuJoCo: the Panda inserts a square peg into a 1 mm-clearance hole, 10 Hz task-space control.

The policy commands where the peg tip should be (x, y, z in the robot's base frame). As in push-T, a
damped-least-squares IK (`ArmIK`, push-T's) turns the tip target into joint targets for the arm's position
servos: per 10 Hz step the target moves along a straight line (rate-limited to ``MAX_TIP_SPEED``), solved at
``IK_WAYPOINTS`` points and interpolated in joint space between them; the peg is kept vertical at a fixed
yaw (the hole's walls are axis-aligned with it).

Unlike pushing, insertion presses the peg against things. Stiff position servos driven by a reference far
below a rim push with hundreds of newtons (measured: ~390 N for a reference 36 mm down), tilt the wrist and
drag the peg sideways across the rim, so each IK waypoint's reference is kept within ``MAX_LEAD`` of the
measured tip, as a force-limited impedance controller saturates its error: ~45–65 N into a rim with this arm.
Free motion never lags that far (2.4 mm at full speed), so only contact feels the limit.

The hole's pose is per scene (a mocap body); the policy sees it through `config.PegInsertConfig`'s tracker
error, drawn from the episode's seed; success and the reward come from the true pose.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import mujoco
import numpy as np

from reflexlab.tasks.panda_peg_insert import constants as C
from reflexlab.tasks.panda_peg_insert.config import PegInsertConfig
from reflexlab.tasks.panda_peg_insert.spec import inserted_depth, make_spec, observation, progress, seated
from sim.tasks.panda_push_t.env import ArmIK

SCENE_XML = Path(__file__).with_name("panda_peg_insert.xml")
MAX_LEAD = 0.005  # m: how far an IK reference may lead the measured tip (the controller's force limit)


@dataclass
class _Scene:
    data: mujoco.MjData
    q_target: np.ndarray  # current joint targets (the arm's position servos)
    tip_target: np.ndarray  # current commanded tip position (x, y, z)
    bias: np.ndarray  # this episode's tracker bias on the hole's x, y
    rng: np.random.Generator  # the tracker's jitter


class PegInsertEnv:
    """A batch of `panda-peg-insert` scenes stepped together at 10 Hz.

    Args:
        num_envs: independent scenes.
        episode_steps: control steps before an episode is truncated (default: the config's).
        config: tracker noise (and the expert's, which this env does not use).
    """

    spec = make_spec()
    spec_factory = staticmethod(lambda cfg=None: make_spec())
    # What `sim.demos` records beside observation and action: the true hole pose, and the expert's phase.
    demo_features: ClassVar[dict[str, tuple[int, ...]]] = {"observation.environment_state": (2,), "expert.phase": (1,)}

    def __init__(
        self, num_envs: int = 1, episode_steps: int | None = None, config: PegInsertConfig | None = None
    ) -> None:
        self.config = config or PegInsertConfig()
        self.model = mujoco.MjModel.from_xml_path(str(SCENE_XML))
        self.num_envs = num_envs
        self.episode_steps = self.config.episode_steps if episode_steps is None else episode_steps
        self.ik = ArmIK(self.model, site=C.PEG_SITE)
        self.low, self.high = np.array(C.WORKSPACE_LOW), np.array(C.WORKSPACE_HIGH)
        self.max_move = C.MAX_TIP_SPEED * C.CONTROL_DT
        self.scenes = [
            _Scene(mujoco.MjData(self.model), np.array(C.HOME_QPOS), np.zeros(3), np.zeros(2), np.random.default_rng())
            for _ in range(num_envs)
        ]
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.max_progress = np.zeros(num_envs)
        self.succeeded = np.zeros(num_envs, dtype=bool)
        self.done = np.zeros(num_envs, dtype=bool)
        self._obs = np.zeros((num_envs, self.spec.policy_obs.size), np.float32)
        self._renderer = None  # a sim.render.SceneRenderer once a camera is asked for

    # --- state ---------------------------------------------------------------------------------
    def hole_xy(self) -> np.ndarray:
        """(N, 2) true hole centres."""
        return np.array([s.data.mocap_pos[0, :2] for s in self.scenes])

    def tip_pos(self) -> np.ndarray:
        """(N, 3) measured peg tip positions."""
        return np.array([s.data.site_xpos[self.ik.site] for s in self.scenes])

    def observation(self) -> np.ndarray:
        """(N, 5) this step's observations (the tracker's draw is made once per step, when the step ends)."""
        return self._obs.copy()

    def depth(self) -> np.ndarray:
        """(N,) how deep each peg tip is in its hole (m), from the true state."""
        return inserted_depth(self.tip_pos(), self.hole_xy())

    def progress(self) -> np.ndarray:
        """(N,) the reward: dense progress in [0, 1] on the true hole pose."""
        return progress(self.tip_pos(), self.hole_xy())

    def hold_action(self) -> np.ndarray:
        """(N, 3) the action that keeps each peg where it is."""
        return self.tip_pos()

    def expert_inputs(self) -> list[tuple[np.ndarray]]:
        """What the scripted expert acts on, per scene: the observation alone (it sees the hole as the policy does)."""
        return [(o,) for o in self.observation()]

    def environment_state(self) -> np.ndarray:
        """(N, 2) the true hole centres: recorded beside the demonstrations for analysis, never a policy input."""
        return self.hole_xy()

    def render(self, camera: str, height: int, width: int, scenes: np.ndarray | None = None) -> np.ndarray:
        """(N, height, width, 3) uint8 RGB frames of MJCF camera ``camera`` (``side``, ``top``), of every scene
        or of the scene indices ``scenes``."""
        if self._renderer is None:
            from sim.render import SceneRenderer

            self._renderer = SceneRenderer(self.model)
        chosen = self.scenes if scenes is None else [self.scenes[i] for i in scenes]
        return self._renderer.render([s.data for s in chosen], camera, height, width)

    def episode_metrics(self) -> dict[str, np.ndarray]:
        """Per-scene scores of the current episodes, under the keys every demonstration task reports.

        ``max_coverage``: the episode's best progress (this task's dense score; push-T's is coverage);
        ``success``: the peg was seated ``SUCCESS_DEPTH`` deep at some step.
        """
        return {"max_coverage": self.max_progress.copy(), "success": self.succeeded.copy()}

    # --- episodes ------------------------------------------------------------------------------
    def reset(self, seeds: list[int] | np.ndarray) -> np.ndarray:
        """Start one episode per scene from its seed (same seed, same hole, tracker error and start)."""
        if len(seeds) != self.num_envs:
            raise ValueError(f"reset needs {self.num_envs} seeds, got {len(seeds)}")
        for i, (s, seed) in enumerate(zip(self.scenes, seeds, strict=True)):
            self._reset_scene(s, np.random.default_rng(int(seed)))
            self._obs[i] = self._observe(i)
        self.steps[:] = 0
        self.done[:] = False
        self.succeeded[:] = False
        self.max_progress[:] = self.progress()
        return self.observation()

    def _reset_scene(self, s: _Scene, rng: np.random.Generator) -> None:
        hole = rng.uniform(C.INIT_HOLE_LOW, C.INIT_HOLE_HIGH)
        tip = np.array([*rng.uniform(self.low[:2] + 0.02, self.high[:2] - 0.02), rng.uniform(*C.INIT_TIP_Z)])
        s.bias = rng.normal(0.0, self.config.hole_bias_std, 2)
        s.rng = np.random.default_rng(rng.integers(2**63))
        mujoco.mj_resetData(self.model, s.data)
        s.data.mocap_pos[0] = (*hole, 0.0)
        q = self.ik.solve(np.array(C.HOME_QPOS), tip, iterations=50)
        s.data.qpos[self.ik.qadr] = q
        s.data.ctrl[:] = q
        s.q_target, s.tip_target = q, tip.copy()
        mujoco.mj_forward(self.model, s.data)

    def tracked_hole(self, i: int) -> np.ndarray:
        """Scene ``i``'s hole centre (x, y) as the tracker reports it now: true + the episode's bias + fresh jitter."""
        s = self.scenes[i]
        return s.data.mocap_pos[0, :2] + s.bias + s.rng.normal(0.0, self.config.hole_noise_std, 2)

    def _observe(self, i: int) -> np.ndarray:
        return observation(self.scenes[i].data.site_xpos[self.ik.site], self.tracked_hole(i))

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Apply peg tip targets (N, 3); returns obs, progress (the reward), done, info.

        Scenes that are done are frozen (their episode is scored once). A target outside the workspace is
        clipped and one further than the speed limit allows is shortened, as the deploy safety filter would.
        """
        actions = np.asarray(actions, dtype=np.float64).reshape(self.num_envs, 3)
        if not np.isfinite(actions).all():
            raise ValueError("panda-peg-insert: non-finite peg tip target")
        for i, s in enumerate(self.scenes):
            if self.done[i]:
                continue
            goal = np.clip(actions[i], self.low, self.high)
            delta = goal - s.tip_target
            dist = np.linalg.norm(delta)
            if dist > self.max_move:
                goal = s.tip_target + delta * (self.max_move / dist)
            s.q_target = self._follow(s, s.tip_target, goal)
            s.tip_target = goal
            self._obs[i] = self._observe(i)
        self.steps[~self.done] += 1
        prog = self.progress()
        success = seated(self.tip_pos(), self.hole_xy())
        self.max_progress = np.maximum(self.max_progress, np.where(self.done, 0.0, prog))
        self.succeeded |= success & ~self.done
        newly_done = ~self.done & (success | (self.steps >= self.episode_steps))
        self.done |= newly_done
        info = {"success": success, "max_coverage": self.max_progress.copy(), "depth": self.depth()}
        return self.observation(), prog, newly_done, info

    def _follow(self, s: _Scene, start: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """One control period: IK waypoints from ``start`` to ``goal``, each within ``MAX_LEAD`` of the tip."""
        n_sub = C.DECIMATION // C.IK_WAYPOINTS
        q_prev, tip = s.q_target, s.data.site_xpos[self.ik.site]  # a view: always the measured tip
        for k in range(1, C.IK_WAYPOINTS + 1):
            q_next = self.ik.solve(q_prev, lead_limited(start + (goal - start) * (k / C.IK_WAYPOINTS), tip))
            for j in range(1, n_sub + 1):
                s.data.ctrl[:] = q_prev + (q_next - q_prev) * (j / n_sub)
                mujoco.mj_step(self.model, s.data)
            q_prev = q_next
        return q_prev


def lead_limited(reference: np.ndarray, tip: np.ndarray) -> np.ndarray:
    """``reference`` moved to within ``MAX_LEAD`` (per axis) of the measured ``tip``: the controller's force limit."""
    return tip + np.clip(reference - tip, -MAX_LEAD, MAX_LEAD)
