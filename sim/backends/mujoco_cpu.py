"""MuJoCo on the CPU as an rsl-rl `VecEnv`: N robots stepped in C by `mujoco.batch.Batch`.

The backend owns the physics only: it turns actions into PD targets, steps, reads a
`LeggedState` and applies domain randomisation samples. Everything that defines the task
(observations, rewards, terminations, commands) is the task object's, so MuJoCo Warp and Isaac Lab
backends reuse it unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import mujoco
import mujoco.batch
import numpy as np
import torch
from rsl_rl.env import VecEnv
from tensordict import TensorDict

from reflexlab.tasks.legged import LeggedState, quat_rotate_inverse
from sim.task_entry import TaskEntry


class NonFiniteError(RuntimeError):
    """The simulation produced NaN/inf; names the environments, the step and the quantity."""

    def __init__(self, what: str, env_ids: list[int], step: int) -> None:
        self.what, self.env_ids, self.step = what, env_ids, step
        shown = ", ".join(map(str, env_ids[:8])) + (" …" if len(env_ids) > 8 else "")
        super().__init__(f"non-finite {what} in env(s) {shown} at env step {step}")


class MujocoVecEnv(VecEnv):
    """Batched MuJoCo environments for a registered legged task.

    Args:
        task: the registered task's entry (`sim.registry.get_task`).
        cfg: the task's config; the task's default profile when None.
        num_envs: number of parallel robots.
        nthread: threads stepping the physics (``mujoco.batch`` runs simulations in parallel).
        seed: seeds commands, resets, randomisation and noise.
        obs_noise: add the task's observation noise (training); evaluation turns it off.
    """

    def __init__(
        self,
        task: TaskEntry,
        cfg: Any = None,
        num_envs: int = 256,
        nthread: int = 2,
        seed: int = 0,
        device: str = "cpu",
        obs_noise: bool = True,
        record_metrics: bool = False,
    ) -> None:
        entry = task
        entry.require("vec", "the batched MuJoCo VecEnv (PPO)")
        self.task_entry = entry
        self.cfg = cfg if cfg is not None else entry.config()
        self.num_envs = num_envs
        self.device = device
        self.obs_noise = obs_noise
        self.record_metrics = record_metrics
        self.last_metrics: dict[str, torch.Tensor] = {}
        self.gen = torch.Generator().manual_seed(seed)
        self.task = entry.task_class(self.cfg, num_envs, self.gen)
        self.spec = self.task.spec
        c = self.task.constants
        self.c = c
        self.num_actions = self.spec.action.size
        self.max_episode_length = self.task.max_episode_length
        self.episode_length_buf = torch.zeros(num_envs, dtype=torch.long)
        self.common_step_counter = 0

        self.model = mujoco.MjModel.from_xml_path(str(entry.scene_xml))
        self._check_model()
        self.batch = mujoco.batch.Batch(self.model, nsim=num_envs, nthread=nthread)
        m = self.model
        self._jq = np.array([m.jnt_qposadr[m.joint(n).id] for n in c.JOINT_NAMES])
        self._jv = np.array([m.jnt_dofadr[m.joint(n).id] for n in c.JOINT_NAMES])
        self._touch = np.array([m.sensor_adr[m.sensor(n).id] for n in c.FOOT_TOUCH_SENSORS])
        self._fall = np.array([m.sensor_adr[m.sensor(n).id] for n in c.FALL_TOUCH_SENSORS])
        self._footvel = np.array([m.sensor_adr[m.sensor(n).id] + np.arange(3) for n in c.FOOT_VEL_SENSORS])
        self._footz = np.array([m.sensor_adr[m.sensor(n).id] + 2 for n in c.FOOT_POS_SENSORS])
        self._base = m.body(c.BASE_BODY).id
        self.qpos = self.batch.bind("qpos")
        self.qvel = self.batch.bind("qvel")
        self.ctrl = self.batch.bind("ctrl")
        self.sensordata = self.batch.bind("sensordata")
        self.actuator_force = self.batch.bind("actuator_force")
        self._default = np.asarray(c.DEFAULT_JOINT_POS)
        self._default_t = torch.tensor(c.DEFAULT_JOINT_POS)

        rcfg = self.cfg.randomization
        self.physics = self.task.sample_physics(nominal_friction=float(m.geom_friction[0, 0]))
        self._apply_physics_sample()
        self._push_interval = max(1, round(rcfg.push_interval_s / c.CONTROL_DT))
        self._episode_sums: dict[str, torch.Tensor] = {}
        self._obs: TensorDict | None = None
        self.reset_envs(torch.arange(num_envs))
        self._obs = self._observe(self._read_state())

    # --- model checks and randomisation ---------------------------------------------------------
    def _check_model(self) -> None:
        m, c = self.model, self.c
        scene = self.task_entry.scene_xml.name
        acts = [m.joint(m.actuator_trnid[i, 0]).name for i in range(m.nu)]
        if tuple(acts) != tuple(c.JOINT_NAMES):
            raise ValueError(f"{scene}: actuator order {acts} differs from constants.JOINT_NAMES")
        if not math.isclose(m.opt.timestep, c.PHYSICS_DT):
            raise ValueError(f"{scene}: timestep {m.opt.timestep} != constants.PHYSICS_DT {c.PHYSICS_DT}")

    def _apply_physics_sample(self) -> None:
        p = self.physics
        friction = self.batch.expand("geom_friction")
        friction[:, :, 0] = p.friction.numpy()[:, None]
        mass = self.batch.expand("body_mass")
        mass[:, self._base] = self.model.body_mass[self._base] + p.added_mass.numpy()
        gain = self.batch.expand("actuator_gainprm")
        bias = self.batch.expand("actuator_biasprm")
        s = p.motor_strength.numpy()[:, None]
        gain[:, :, 0] = self.model.actuator_gainprm[:, 0] * s
        bias[:, :, 1] = self.model.actuator_biasprm[:, 1] * s
        bias[:, :, 2] = self.model.actuator_biasprm[:, 2] * s
        self.batch.set_const()

    # --- state ----------------------------------------------------------------------------------
    def _read_state(self) -> LeggedState:
        qpos = torch.from_numpy(self.qpos.copy()).float()
        qvel = torch.from_numpy(self.qvel.copy()).float()
        sens = self.sensordata
        quat = qpos[:, 3:7]
        gravity = torch.tensor([0.0, 0.0, -1.0]).expand(self.num_envs, 3)
        return LeggedState(
            base_pos=qpos[:, :3],
            base_quat=quat,
            base_lin_vel=quat_rotate_inverse(quat, qvel[:, :3]),
            base_ang_vel=qvel[:, 3:6],
            projected_gravity=quat_rotate_inverse(quat, gravity),
            joint_pos=qpos[:, self._jq],
            joint_vel=qvel[:, self._jv],
            joint_torque=torch.from_numpy(self.actuator_force.copy()).float(),
            foot_force=torch.from_numpy(sens[:, self._touch]).float(),
            foot_vel=torch.from_numpy(sens[:, self._footvel]).float(),
            foot_height=torch.from_numpy(sens[:, self._footz]).float() - self.c.FOOT_RADIUS,
            fall_contact=torch.from_numpy(sens[:, self._fall].sum(-1) > 0.0),
            friction=self.physics.friction,
            added_mass=self.physics.added_mass,
        )

    def _observe(self, state: LeggedState) -> TensorDict:
        obs = self.task.observe(state, noise=self.obs_noise)
        for name, value in obs.items():
            bad = ~torch.isfinite(value).all(dim=-1)
            if bad.any():
                raise NonFiniteError(
                    f"observation group '{name}'", bad.nonzero().flatten().tolist(), self.common_step_counter
                )
        return TensorDict(obs, batch_size=[self.num_envs], device=self.device)

    # --- VecEnv ---------------------------------------------------------------------------------
    def get_observations(self) -> TensorDict:
        assert self._obs is not None
        return self._obs.clone()

    def reset_envs(self, ids: torch.Tensor) -> None:
        """Reset robots ``ids`` to the standing pose with a random heading and small joint noise."""
        if ids.numel() == 0:
            return
        n = ids.numel()
        ids_np = ids.numpy().astype(np.int64)
        self.batch.reset(ids=ids_np, keyframe=0, stage=mujoco.mjtStage.mjSTAGE_NONE)
        yaw = (torch.rand(n, generator=self.gen) * 2 - 1) * math.pi
        qpos = self.qpos[ids_np]
        qpos[:, 2] = self.c.INITIAL_BASE_HEIGHT
        qpos[:, 3] = torch.cos(yaw / 2).numpy()
        qpos[:, 4:6] = 0.0
        qpos[:, 6] = torch.sin(yaw / 2).numpy()
        qpos[:, self._jq] = self._default + (torch.rand(n, len(self._jq), generator=self.gen).numpy() - 0.5) * 0.1
        self.qpos[ids_np] = qpos
        self.qvel[ids_np] = 0.0
        self.ctrl[ids_np] = self._default
        self.batch.forward(ids=ids_np)
        self.episode_length_buf[ids] = 0
        self.task.reset(ids)

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        actions = actions.detach().to("cpu", torch.float32)
        bad = ~torch.isfinite(actions).all(dim=-1)
        if bad.any():
            raise NonFiniteError("action", bad.nonzero().flatten().tolist(), self.common_step_counter)
        clip = self.cfg.action_clip
        actions = torch.clamp(actions, -clip, clip)
        self.ctrl[:] = (self._default_t + self.spec.action.scale * actions).numpy()
        self.batch.step(nstep=self.c.DECIMATION)
        self.common_step_counter += 1
        self.episode_length_buf += 1

        state = self._read_state()
        self.task.advance(state, actions)
        terminated = self.task.terminated(state)
        time_outs = self.episode_length_buf >= self.max_episode_length
        terms = self.task.reward_terms(state, actions, terminated)
        reward = self.task.reward(terms)
        if self.record_metrics:  # read before resets overwrite the finished episodes' state
            self.last_metrics = self.task.metrics(state)
        bad = ~torch.isfinite(reward)
        if bad.any():
            raise NonFiniteError("reward", bad.nonzero().flatten().tolist(), self.common_step_counter)
        self.task.end_step(state, actions)
        for k, v in terms.items():
            self._episode_sums.setdefault(k, torch.zeros(self.num_envs))
            self._episode_sums[k] += v * self.task.dt

        dones = terminated | time_outs
        extras: dict[str, Any] = {"time_outs": time_outs.clone()}
        done_ids = dones.nonzero().flatten()
        if done_ids.numel():
            ep_s = self.episode_length_buf[done_ids].float() * self.task.dt
            extras["episode"] = {f"term/{k}": (v[done_ids] / ep_s).mean() for k, v in self._episode_sums.items()}
            extras["episode"]["fall_rate"] = terminated[done_ids].float().mean()
            for v in self._episode_sums.values():
                v[done_ids] = 0.0
            self.reset_envs(done_ids)
        pushed = self._maybe_push()
        if done_ids.numel() or pushed:
            state = self._read_state()
        self._obs = self._observe(state)
        return self._obs.clone(), reward, dones.to(torch.long), extras

    def _maybe_push(self) -> bool:
        """Kick every robot's base at the push interval; True when it did (the state changed)."""
        rcfg = self.cfg.randomization
        if not rcfg.pushes or self.common_step_counter % self._push_interval != 0:
            return False
        self.qvel[:, :2] += self.task.push_velocities().numpy()
        return True

    # --- evaluation helpers ---------------------------------------------------------------------
    def render(self, renderer: mujoco.Renderer, env_id: int = 0, camera: str = "track") -> np.ndarray:
        """Render one robot with an offscreen renderer (MUJOCO_GL=egl or osmesa)."""
        data = self.batch.get_data(env_id)
        model = self.batch.get_model(env_id)
        mujoco.mj_forward(model, data)
        renderer.update_scene(data, camera=camera)
        return renderer.render()
