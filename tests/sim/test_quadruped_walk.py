"""The task definition: observation layout matches the Spec, gait clock, rewards."""

import torch

from reflexlab.tasks.quadruped import constants as C
from sim.backends.mujoco_cpu import MujocoVecEnv
from sim.registry import get_task

ENTRY = get_task("quadruped-walk")


def test_observation_layout_matches_the_spec() -> None:
    """A robot assembles observations from the Spec alone; the sim must agree with it term by term."""
    env = MujocoVecEnv(ENTRY, ENTRY.config("full"), num_envs=3, nthread=1, obs_noise=False)
    obs, *_ = env.step(torch.full((3, 12), 0.2))
    state = env._read_state()
    policy = env.spec.policy_obs
    sl = policy.slices()
    scale = {t.name: t.scale for t in policy.terms}
    p = obs["policy"]
    torch.testing.assert_close(p[:, sl["base_ang_vel"]], state.base_ang_vel * scale["base_ang_vel"])
    torch.testing.assert_close(p[:, sl["projected_gravity"]], state.projected_gravity)
    torch.testing.assert_close(p[:, sl["velocity_command"]], env.task.commands * scale["velocity_command"])
    torch.testing.assert_close(p[:, sl["joint_pos"]], state.joint_pos - torch.tensor(C.DEFAULT_JOINT_POS))
    torch.testing.assert_close(p[:, sl["joint_vel"]], state.joint_vel * scale["joint_vel"])
    torch.testing.assert_close(p[:, sl["last_action"]], torch.full((3, 12), 0.2))
    clock = p[:, sl["gait_phase"]]
    torch.testing.assert_close(clock.norm(dim=-1), torch.ones(3))
    priv = env.spec.group("privileged").slices()
    torch.testing.assert_close(obs["privileged"][:, priv["friction"]].squeeze(-1), env.physics.friction)


def test_trot_clock_pairs_diagonal_feet() -> None:
    env = MujocoVecEnv(ENTRY, ENTRY.config("fast"), num_envs=1, nthread=1)
    seen = set()
    for _ in range(int(1 / (env.task.cfg.gait_hz * env.task.dt))):  # one gait cycle
        env.step(torch.zeros(1, 12))
        swing, height = env.task.gait_targets()
        fr, fl, rr, rl = swing[0].tolist()
        assert fr == rl and fl == rr and fr != fl, "trot: FR+RL and FL+RR alternate"
        assert (height[0][~swing[0]] == 0).all() and (height <= env.task.cfg.swing_height_m).all()
        seen.add(fr)
    assert seen == {True, False}


def test_reward_terms_are_finite_and_weighted() -> None:
    env = MujocoVecEnv(ENTRY, ENTRY.config("full"), num_envs=4, nthread=1)
    env.step(torch.zeros(4, 12))
    state = env._read_state()
    terms = env.task.reward_terms(state, torch.zeros(4, 12), torch.zeros(4, dtype=torch.bool))
    weights = env.task.cfg.rewards
    assert set(terms) == set(vars(weights)), "every term has a weight and every weight a term"
    assert all(torch.isfinite(v).all() for v in terms.values())
    fell = env.task.reward({**terms, "termination": torch.ones(4)})
    ok = env.task.reward({**terms, "termination": torch.zeros(4)})
    assert (fell < ok).all()
