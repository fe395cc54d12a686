"""panda-push-t: the model agrees with its constants, the arm tracks, coverage is right, the expert solves
the task and is genuinely two-sided, demonstrations land in the episode format."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import mujoco
import numpy as np
import pytest

from reflexlab.dataset import load_dataset
from reflexlab.tasks.panda_push_t import constants as C
from reflexlab.tasks.panda_push_t import geometry as G
from reflexlab.tasks.panda_push_t.expert import PushTExpert
from reflexlab.tasks.panda_push_t.modes import chunk_mode, two_sided_states
from sim.registry import TaskKindError, get_task
from sim.tasks.panda_push_t.env import SCENE_XML, PushTEnv


def test_model_matches_constants() -> None:
    m = mujoco.MjModel.from_xml_path(str(SCENE_XML))
    for name, lo, hi in zip(C.JOINT_NAMES, C.JOINT_LOWER, C.JOINT_UPPER, strict=True):
        assert tuple(m.joint(name).range) == pytest.approx((lo, hi))
    root = ET.parse(SCENE_XML).getroot()
    sizes = {g.get("name"): [float(x) for x in g.get("size").split()] for g in root.iter("geom") if g.get("name")}
    assert 2 * sizes["block_bar"][0] == pytest.approx(C.BAR_SIZE[0])
    assert 2 * sizes["block_stem"][1] == pytest.approx(C.STEM_SIZE[1])
    assert m.geom("pusher").size[0] == pytest.approx(C.PUSHER_RADIUS)
    assert m.opt.timestep == pytest.approx(C.PHYSICS_DT)


def test_coverage() -> None:
    goal = np.asarray(C.GOAL_POSE)
    assert G.coverage(goal) == pytest.approx(1.0)
    assert len(G.GOAL_GRID) * 1e-6 == pytest.approx(G.AREA, rel=1e-3)  # 1 mm grid: area exact to 0.1 %
    shifted = G.coverage(np.stack([goal + np.array([d, 0, 0]) for d in (0.0, 0.005, 0.02, 0.2)]))
    assert np.all(np.diff(shifted) < 0) and shifted[-1] == 0.0
    assert 0.7 < shifted[1] < 0.95  # 5 mm already costs most of the 0.95 success margin


def test_arm_tracks_targets_and_block_only_moves_when_pushed() -> None:
    env = PushTEnv(1)
    env.reset([3])
    block0 = env.block_pose()[0].copy()
    start = env.pusher_xy()[0]
    away = start + 0.03 * (start - block0[:2]) / np.linalg.norm(start - block0[:2])  # away from the block
    for _ in range(3):
        env.step(away[None])
    tip = env.scenes[0].data.site_xpos[env.ik.site]
    assert np.linalg.norm(tip[:2] - np.clip(away, env.low, env.high)) < 0.002
    assert tip[2] == pytest.approx(C.PUSHER_HEIGHT, abs=0.002)
    np.testing.assert_allclose(env.block_pose()[0], block0, atol=1e-6)
    # Targets beyond the speed limit are shortened, outside the workspace clipped.
    env.step(np.array([[10.0, 10.0]]))
    assert np.linalg.norm(env.scenes[0].tip_target - away) <= C.MAX_PUSHER_SPEED * C.CONTROL_DT + 1e-9
    with pytest.raises(ValueError, match="non-finite"):
        env.step(np.array([[np.nan, 0.0]]))


def test_reset_is_seeded() -> None:
    a, b = PushTEnv(2), PushTEnv(2)
    np.testing.assert_array_equal(a.reset([5, 6]), b.reset([5, 6]))
    assert not np.allclose(a.reset([7, 8]), b.reset([5, 6]))


def test_expert_solves_the_task() -> None:
    seeds = [0, 1, 2, 3]
    env = PushTEnv(len(seeds))
    env.reset(seeds)
    experts = [PushTExpert(np.random.default_rng(s)) for s in seeds]
    while not env.done.all():
        p, b = env.pusher_xy(), env.block_pose()
        env.step(np.array([x.act(p[i], b[i]).target for i, x in enumerate(experts)]))
    m = env.episode_metrics()
    assert m["success"].all(), m["max_coverage"]


def test_expert_goes_either_way_round_at_two_sided_states() -> None:
    """Same state, different random draws: both sides appear; a clear-cut state always gets the short way."""
    block = np.array([0.5, 0.0, 0.3])
    sides = set()
    for seed in range(12):
        x = PushTExpert(np.random.default_rng(seed))
        best = np.unravel_index(np.argmax(x._scores(block)), x._scores(block).shape)
        i = int(best[0])
        rot = G.rotation(block[2])
        n_w = rot @ x.normals[i]
        pre = block[:2] + rot @ x.points[i] + n_w * (C.PUSHER_RADIUS + 0.006)
        approach = x._approach(block[:2], pre, n_w)  # where the pusher would come in from
        opposite = 2 * block[:2] - approach  # diametrically opposite on the clearance circle
        step = x.act(opposite, block)
        assert step.two_sided
        sides.add(step.detour)
        assert np.linalg.norm(step.target - opposite) <= x.max_move + 1e-9
    assert sides == {-1, 1}


def test_demos_round_trip(tmp_path) -> None:
    from sim.demos import record_demos

    s = record_demos("panda-push-t", 3, tmp_path / "demos", seed=0, num_envs=3, progress=False)
    assert s.episodes == 3 and s.expert_success_rate > 0
    ds = load_dataset(tmp_path / "demos")
    assert ds.num_episodes == 3 and ds.spec == get_task("panda-push-t").spec()
    for i in range(3):
        ep = ds.episode(i)
        assert ep["next.success"][-1] and not ep["next.success"][:-1].any()
        assert ep["observation.state"].shape[1] == 6 and ep["action"].shape[1] == 2
        assert ds.episode_meta(i)["max_coverage"] >= C.SUCCESS_COVERAGE


def test_chunk_mode_and_two_sided_states(tmp_path) -> None:
    hist = np.zeros((2, 6), np.float32)
    hist[-1, :4] = (0.6, 0.0, 0.5, 0.0)  # pusher 10 cm east of the block centre
    ang = np.linspace(0.1, 1.0, 8)
    ccw = np.stack([0.5 + 0.1 * np.cos(ang), 0.1 * np.sin(ang)], -1)
    cw = ccw * [1, -1]
    still = np.repeat(hist[-1:, :2], 8, 0)
    modes = chunk_mode(np.stack([ccw, cw, still]), hist, start=0, horizon=8)
    assert modes.tolist() == [1, -1, 0]
    from sim.demos import record_demos

    record_demos("panda-push-t", 6, tmp_path / "d", seed=0, num_envs=6, progress=False)
    try:
        states, sides = two_sided_states(load_dataset(tmp_path / "d"), obs_horizon=2)
    except ValueError as e:  # six episodes may hold no two-sided detour; the message says so
        assert "no two-sided" in str(e)
    else:
        assert states.shape[1:] == (2, 6) and set(sides.tolist()) <= {-1, 1}


def test_ppo_refuses_a_demonstration_task() -> None:
    from sim.backends.mujoco_cpu import MujocoVecEnv

    with pytest.raises(TaskKindError, match="panda-push-t"):
        MujocoVecEnv(get_task("panda-push-t"), None, num_envs=2)
