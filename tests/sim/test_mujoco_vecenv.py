import pytest
import torch
from rsl_rl.env import VecEnv

from reflexlab.tasks.quadruped.randomize import RandomizationConfig
from sim.backends.mujoco_cpu import MujocoVecEnv, NonFiniteError
from sim.registry import get_task

ENTRY = get_task("quadruped-walk")


def make(profile: str = "fast", n: int = 8, seed: int = 0, **kw) -> MujocoVecEnv:
    return MujocoVecEnv(ENTRY, ENTRY.config(profile), num_envs=n, nthread=1, seed=seed, **kw)


def test_vecenv_interface_and_shapes() -> None:
    env = make()
    assert isinstance(env, VecEnv)
    obs = env.get_observations()
    spec = env.spec
    assert obs["policy"].shape == (8, spec.policy_obs.size)
    assert obs["privileged"].shape == (8, spec.group("privileged").size)
    _nxt, rew, dones, extras = env.step(torch.zeros(8, env.num_actions))
    assert rew.shape == (8,) and dones.shape == (8,) and extras["time_outs"].shape == (8,)
    assert torch.isfinite(rew).all()


def test_step_returns_fresh_tensors() -> None:
    """rsl-rl keeps the observations it acted on; an in-place buffer would corrupt its rollouts."""
    env = make()
    first = env.get_observations()
    keep = first["policy"].clone()
    second, *_ = env.step(torch.ones(8, env.num_actions) * 0.3)
    assert torch.equal(first["policy"], keep)
    assert second["policy"].data_ptr() != first["policy"].data_ptr()


def test_seeded_runs_are_identical() -> None:
    a, b = make("full", seed=3), make("full", seed=3)
    act = torch.randn(8, 12, generator=torch.Generator().manual_seed(0)) * 0.5
    for _ in range(5):
        oa, ra, *_ = a.step(act)
        ob, rb, *_ = b.step(act)
    assert torch.equal(oa["policy"], ob["policy"]) and torch.equal(ra, rb)


def test_time_out_resets_the_episode() -> None:
    env = make(n=4)
    env.episode_length_buf[:] = env.max_episode_length - 1
    _, _, dones, extras = env.step(torch.zeros(4, 12))
    assert dones.all() and extras["time_outs"].all()
    assert (env.episode_length_buf == 0).all()
    assert "fall_rate" in extras["episode"]


def test_falling_robot_terminates() -> None:
    env = make(n=2)
    env.qpos[0, 3:7] = [0.0, 1.0, 0.0, 0.0]  # upside down
    env.qpos[0, 2] = 0.1
    env.batch.forward()
    _, _, dones, extras = env.step(torch.zeros(2, 12))
    assert dones[0] == 1 and not extras["time_outs"][0]


def test_randomisation_switches() -> None:
    on = make("full", n=16)
    fr = on.batch.expanded("geom_friction")[:, 0, 0]
    assert fr.std() > 0.05
    assert fr.min() >= 0.4 and fr.max() <= 1.25
    masses = on.batch.expanded("body_mass")[:, on._base]
    assert masses.std() > 0.1
    cfg = ENTRY.config("full")
    cfg.randomization = RandomizationConfig.off()
    off = MujocoVecEnv(ENTRY, cfg, num_envs=16, nthread=1)
    assert off.batch.expanded("geom_friction")[:, 0, 0].std() == 0.0


def test_pushes_kick_the_base() -> None:
    cfg = ENTRY.config("fast")
    cfg.randomization.pushes = True
    cfg.randomization.push_interval_s = 0.02  # every step
    env = MujocoVecEnv(ENTRY, cfg, num_envs=4, nthread=1)
    env.step(torch.zeros(4, 12))
    assert (env.qvel[:, :2] ** 2).sum(-1).min() > 1e-4


def test_non_finite_action_names_env_and_step() -> None:
    env = make(n=6)
    env.step(torch.zeros(6, 12))
    a = torch.zeros(6, 12)
    a[4, 2] = float("nan")
    with pytest.raises(NonFiniteError, match=r"env\(s\) 4 at env step 1"):
        env.step(a)
