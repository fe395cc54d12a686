"""`quadruped-walk`: track commanded planar velocities with a clean trot.

The task's whole definition — Spec, commands, observations, rewards, terminations — lives here
and reads only a `LeggedState`, so every backend shares it. Rewards follow legged_gym's
velocity-tracking recipe with gait shaping (air time, foot slip, action rate) because tracking
alone learns a fast shuffle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from reflexlab.spec import ActionSpec, ObsGroup, ObsTerm, Spec
from reflexlab.tasks.legged import LeggedState
from reflexlab.tasks.quadruped import constants as C
from reflexlab.tasks.quadruped.randomize import PhysicsSample, RandomizationConfig, push_velocities, sample_physics

TASK_NAME = "quadruped-walk"


@dataclass
class CommandRanges:
    """Uniform command ranges in the base frame, resampled every ``resample_s``."""

    vx: tuple[float, float] = (-1.0, 1.0)  # m/s
    vy: tuple[float, float] = (-0.5, 0.5)  # m/s
    yaw_rate: tuple[float, float] = (-1.0, 1.0)  # rad/s
    resample_s: float = 10.0
    standing_fraction: float = 0.05  # share of commands that are exactly zero

    @classmethod
    def forward(cls) -> CommandRanges:
        """Forward walking only: the fast profile."""
        return cls(vx=(0.0, 1.0), vy=(0.0, 0.0), yaw_rate=(0.0, 0.0))


@dataclass
class RewardWeights:
    """Per-term weights; each term is multiplied by weight * control dt, as in legged_gym."""

    tracking_lin_vel: float = 2.0
    tracking_ang_vel: float = 1.0
    lin_vel_z: float = -2.0
    ang_vel_xy: float = -0.05
    orientation: float = -1.0
    base_height: float = -5.0
    torques: float = -1e-4
    joint_acc: float = -2.5e-7
    action_rate: float = -0.01
    feet_air_time: float = 0.0
    gait_foot_height: float = 1.0
    gait_contact: float = 0.5
    foot_slip: float = -0.5
    stand_still: float = -0.5
    termination: float = -100.0


@dataclass
class WalkConfig:
    """Everything that defines the task; the CLI exposes it, checkpoints record it."""

    commands: CommandRanges = field(default_factory=CommandRanges)
    rewards: RewardWeights = field(default_factory=RewardWeights)
    randomization: RandomizationConfig = field(default_factory=RandomizationConfig)
    episode_s: float = 20.0
    tracking_sigma: float = 0.15
    air_time_target_s: float = 0.3
    # The gait clock: a trot at gait_hz with feet lifted to swing_height_m; the policy sees the
    # clock (sin, cos), and two reward terms ask the feet to follow it. On the CPU budget this
    # learns a clean trot far sooner than air-time shaping alone, and fixes the stepping rate.
    gait_hz: float = 2.0
    swing_height_m: float = 0.08
    contact_threshold_n: float = 1.0
    fall_tilt_cos: float = 0.5  # fall when the base is tilted beyond 60 degrees
    fall_height: float = 0.14
    action_clip: float = 10.0


def make_spec(cfg: WalkConfig | None = None) -> Spec:
    """The Spec every quadruped-walk policy and robot carries.

    Only the gait clock's rate enters from the config: a robot must run the same clock.
    """
    gait_hz = (cfg or WalkConfig()).gait_hz
    j = len(C.JOINT_NAMES)
    policy = ObsGroup(
        "policy",
        (
            ObsTerm("base_ang_vel", 3, "rad/s, base frame", 0.25),
            ObsTerm("projected_gravity", 3, "unit vector, base frame", 1.0),
            ObsTerm("velocity_command", 3, "vx m/s, vy m/s, yaw rate rad/s", 2.0),
            ObsTerm("gait_phase", 2, f"sin, cos of the trot clock ({gait_hz:g} Hz, FR/RL swing first)", 1.0),
            ObsTerm("joint_pos", j, "rad, relative to action.offset", 1.0),
            ObsTerm("joint_vel", j, "rad/s", 0.05),
            ObsTerm("last_action", j, "raw policy output", 1.0),
        ),
    )
    privileged = ObsGroup(
        "privileged",
        (
            ObsTerm("base_lin_vel", 3, "m/s, base frame", 2.0),
            ObsTerm("foot_contact_force", len(C.FOOT_SITES), "N", 0.01),
            ObsTerm("friction", 1, "coefficient", 1.0),
            ObsTerm("added_mass", 1, "kg", 0.5),
        ),
    )
    return Spec(
        robot=C.ROBOT_NAME,
        task=TASK_NAME,
        observation_groups=(policy, privileged),
        policy_group="policy",
        action=ActionSpec(
            kind="joint_position",
            names=C.JOINT_NAMES,
            scale=C.ACTION_SCALE,
            offset=C.DEFAULT_JOINT_POS,
            lower=C.JOINT_LOWER,
            upper=C.JOINT_UPPER,
            max_rate=C.MAX_TARGET_RATE,
        ),
        control_rate_hz=1.0 / C.CONTROL_DT,
        physics_rate_hz=1.0 / C.PHYSICS_DT,
    )


class QuadrupedWalk:
    """Per-environment task state (commands, gait timers, last actions) and the task's functions."""

    spec_factory = staticmethod(make_spec)
    constants = C

    def __init__(self, cfg: WalkConfig, num_envs: int, generator: torch.Generator) -> None:
        self.cfg = cfg
        self.num_envs = num_envs
        self.gen = generator
        self.spec = make_spec(cfg)
        self.dt = C.CONTROL_DT
        self.max_episode_length = round(cfg.episode_s / self.dt)
        self.default_joint_pos = torch.tensor(C.DEFAULT_JOINT_POS)
        nj, nf = len(C.JOINT_NAMES), len(C.FOOT_SITES)
        self.commands = torch.zeros(num_envs, 3)
        self.command_timer = torch.zeros(num_envs)
        self.phase = torch.zeros(num_envs)  # gait clock in cycles, [0, 1)
        self.trot_offsets = torch.tensor(C.TROT_OFFSETS)
        self.last_action = torch.zeros(num_envs, nj)
        self.last_joint_vel = torch.zeros(num_envs, nj)
        self.air_time = torch.zeros(num_envs, nf)
        self.last_contact = torch.zeros(num_envs, nf, dtype=torch.bool)
        self.first_contact = torch.zeros(num_envs, nf, dtype=torch.bool)
        self.contact = torch.zeros(num_envs, nf, dtype=torch.bool)
        self._air_time_at_touchdown = torch.zeros(num_envs, nf)
        self._policy_scales = torch.tensor(self.spec.group("policy").scales())
        self._priv_scales = torch.tensor(self.spec.group("privileged").scales())

    # --- episode bookkeeping --------------------------------------------------------------------
    def reset(self, ids: torch.Tensor) -> None:
        self.resample_commands(ids)
        self.phase[ids] = 0.0
        self.last_action[ids] = 0.0
        self.last_joint_vel[ids] = 0.0
        self.air_time[ids] = 0.0
        self.last_contact[ids] = False
        self.first_contact[ids] = False

    def resample_commands(self, ids: torch.Tensor) -> None:
        if ids.numel() == 0:
            return
        c = self.cfg.commands
        n = ids.numel()
        lo = torch.tensor([c.vx[0], c.vy[0], c.yaw_rate[0]])
        hi = torch.tensor([c.vx[1], c.vy[1], c.yaw_rate[1]])
        cmd = lo + (hi - lo) * torch.rand(n, 3, generator=self.gen)
        standing = torch.rand(n, generator=self.gen) < c.standing_fraction
        cmd[standing] = 0.0
        self.commands[ids] = cmd
        self.command_timer[ids] = 0.0

    def set_commands(self, commands: torch.Tensor) -> None:
        """Fix the commands of every env (evaluation); they are then never resampled."""
        self.commands[:] = commands
        self.command_timer[:] = -float("inf")

    def advance(self, state: LeggedState, action: torch.Tensor) -> None:
        """Update gait timers and resample commands that expired; call once per control step."""
        contact = state.foot_force > self.cfg.contact_threshold_n
        # Filter contact with the previous step (MuJoCo contacts flicker at touchdown).
        contact_filt = contact | self.last_contact
        self.first_contact = (self.air_time > 0.0) & contact_filt
        self.air_time += self.dt
        self._air_time_at_touchdown = self.air_time.clone()
        self.air_time = self.air_time * ~contact_filt
        self.last_contact = contact
        self.contact = contact
        self.command_timer += self.dt
        self.phase = (self.phase + self.dt * self.cfg.gait_hz) % 1.0
        expired = (self.command_timer >= self.cfg.commands.resample_s).nonzero().flatten()
        self.resample_commands(expired)

    def end_step(self, state: LeggedState, action: torch.Tensor) -> None:
        self.last_action = action.clone()
        self.last_joint_vel = state.joint_vel.clone()

    # --- randomisation (sampled here, applied by the backend) ----------------------------------
    def sample_physics(self, nominal_friction: float) -> PhysicsSample:
        return sample_physics(self.cfg.randomization, self.num_envs, self.gen, nominal_friction)

    def push_velocities(self) -> torch.Tensor:
        return push_velocities(self.cfg.randomization, self.num_envs, self.gen)

    # --- observations ---------------------------------------------------------------------------
    def observe(self, state: LeggedState, noise: bool) -> dict[str, torch.Tensor]:
        """Observation groups, scaled by the Spec's per-term scales (physical units × scale)."""
        rcfg = self.cfg.randomization
        ang_vel, grav = state.base_ang_vel, state.projected_gravity
        jpos, jvel = state.joint_pos - self.default_joint_pos, state.joint_vel
        if noise and rcfg.obs_noise:
            ang_vel = ang_vel + self._noise(ang_vel, rcfg.noise_ang_vel)
            grav = grav + self._noise(grav, rcfg.noise_gravity)
            jpos = jpos + self._noise(jpos, rcfg.noise_joint_pos)
            jvel = jvel + self._noise(jvel, rcfg.noise_joint_vel)
        clock = torch.stack([torch.sin(2 * torch.pi * self.phase), torch.cos(2 * torch.pi * self.phase)], dim=-1)
        policy = torch.cat([ang_vel, grav, self.commands, clock, jpos, jvel, self.last_action], dim=-1)
        priv = torch.cat(
            [state.base_lin_vel, state.foot_force, state.friction[:, None], state.added_mass[:, None]], dim=-1
        )
        return {"policy": policy * self._policy_scales, "privileged": priv * self._priv_scales}

    def _noise(self, like: torch.Tensor, scale: float) -> torch.Tensor:
        return (torch.rand(like.shape, generator=self.gen) * 2 - 1) * scale

    # --- rewards and terminations ---------------------------------------------------------------
    def terminated(self, state: LeggedState) -> torch.Tensor:
        tilted = state.projected_gravity[:, 2] > -self.cfg.fall_tilt_cos
        low = state.base_pos[:, 2] < self.cfg.fall_height
        return state.fall_contact | tilted | low

    def reward_terms(
        self, state: LeggedState, action: torch.Tensor, terminated: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Unweighted reward terms, (N,) each."""
        cfg = self.cfg
        cmd = self.commands
        moving = cmd.norm(dim=-1) > 0.1
        lin_err = ((cmd[:, :2] - state.base_lin_vel[:, :2]) ** 2).sum(-1)
        yaw_err = (cmd[:, 2] - state.base_ang_vel[:, 2]) ** 2
        foot_speed_xy = state.foot_vel[..., :2].norm(dim=-1)
        touchdown_air = (self._air_time_at_touchdown - cfg.air_time_target_s) * self.first_contact
        swing, target_height = self.gait_targets()
        height_err = ((state.foot_height - target_height) ** 2).sum(-1)
        return {
            "tracking_lin_vel": torch.exp(-lin_err / cfg.tracking_sigma),
            "tracking_ang_vel": torch.exp(-yaw_err / cfg.tracking_sigma),
            "lin_vel_z": state.base_lin_vel[:, 2] ** 2,
            "ang_vel_xy": (state.base_ang_vel[:, :2] ** 2).sum(-1),
            "orientation": (state.projected_gravity[:, :2] ** 2).sum(-1),
            "base_height": (state.base_pos[:, 2] - C.NOMINAL_BASE_HEIGHT) ** 2,
            "torques": (state.joint_torque**2).sum(-1),
            "joint_acc": (((state.joint_vel - self.last_joint_vel) / self.dt) ** 2).sum(-1),
            "action_rate": ((action - self.last_action) ** 2).sum(-1),
            "feet_air_time": touchdown_air.sum(-1) * moving,
            "gait_foot_height": torch.exp(-height_err / 0.005),
            "gait_contact": (self.contact == ~swing).float().mean(-1),
            "foot_slip": (foot_speed_xy**2 * self.contact).sum(-1),
            "stand_still": (state.joint_pos - self.default_joint_pos).abs().sum(-1) * ~moving,
            "termination": terminated.float(),
        }

    def gait_targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-foot swing flags and sole-height targets (N, F) from the trot clock.

        Each foot swings in the first half of its cycle along a sine arch of ``swing_height_m``.
        """
        foot_phase = (self.phase[:, None] + self.trot_offsets) % 1.0
        swing = foot_phase < 0.5
        height = self.cfg.swing_height_m * torch.sin(2 * torch.pi * foot_phase).clamp(min=0.0)
        return swing, height

    def reward(self, terms: dict[str, torch.Tensor]) -> torch.Tensor:
        """Weighted sum; clipped at zero before the termination penalty (legged_gym), which keeps
        early training from learning that ending the episode is the best way out of penalties."""
        w = self.cfg.rewards
        total = sum(getattr(w, k) * v * self.dt for k, v in terms.items() if k != "termination")
        total = torch.clamp(total, min=0.0)
        return total + w.termination * terms["termination"] * self.dt

    def metrics(self, state: LeggedState) -> dict[str, torch.Tensor]:
        """Per-env instantaneous quantities that evaluation aggregates (tracking, gait quality).

        A touchdown counts only after at least two control steps in the air, so that contact
        flicker while a foot drags is not mistaken for stepping.
        """
        return {
            "lin_vel_error": (self.commands[:, :2] - state.base_lin_vel[:, :2]).norm(dim=-1),
            "yaw_rate_error": (self.commands[:, 2] - state.base_ang_vel[:, 2]).abs(),
            "contact": self.contact,
            "touchdown": self.first_contact & (self._air_time_at_touchdown >= 2 * self.dt - 1e-9),
            "foot_speed_xy": state.foot_vel[..., :2].norm(dim=-1),
            "base_pos": state.base_pos,
        }
