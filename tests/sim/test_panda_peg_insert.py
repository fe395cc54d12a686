"""panda-peg-insert: the model agrees with its constants, the peg goes in only when lined up (no tunnelling at 1 mm
clearance), success needs 2 cm depth on the true hole while the policy sees a noisy one, the expert inserts,
demonstrations, the single-robot env, the scripted person, the sim-as-real scene and the robot adapter work."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from reflexlab.dataset import load_dataset
from reflexlab.tasks.panda_peg_insert import constants as C
from reflexlab.tasks.panda_peg_insert.config import PegInsertConfig
from reflexlab.tasks.panda_peg_insert.expert import PHASES, PegInsertExpert, expert_policy
from reflexlab.tasks.panda_peg_insert.spec import in_safety_region, inserted_depth, progress, seated
from sim.registry import get_task
from sim.tasks.panda_peg_insert.env import SCENE_XML, PegInsertEnv

EXACT = PegInsertConfig(hole_bias_std=0.0, hole_noise_std=0.0, expert_noise_std=0.0)


def test_model_matches_constants() -> None:
    m = mujoco.MjModel.from_xml_path(str(SCENE_XML))
    for name, lo, hi in zip(C.JOINT_NAMES, C.JOINT_LOWER, C.JOINT_UPPER, strict=True):
        assert tuple(m.joint(name).range) == pytest.approx((lo, hi))
    assert 2 * m.geom("peg").size[:2] == pytest.approx([C.PEG_SIZE, C.PEG_SIZE])
    walls = {n: (m.geom(n).pos, m.geom(n).size) for n in ("wall_px", "wall_nx", "wall_py", "wall_ny")}
    opening_x = (walls["wall_px"][0][0] - walls["wall_px"][1][0]) - (walls["wall_nx"][0][0] + walls["wall_nx"][1][0])
    opening_y = (walls["wall_py"][0][1] - walls["wall_py"][1][1]) - (walls["wall_ny"][0][1] + walls["wall_ny"][1][1])
    assert opening_x == pytest.approx(C.HOLE_SIZE) and opening_y == pytest.approx(C.HOLE_SIZE)
    assert C.HOLE_SIZE - C.PEG_SIZE <= 0.001 + 1e-12  # the clearance
    assert all(2 * size[2] == pytest.approx(C.HOLE_DEPTH) for _, size in walls.values())
    assert walls["wall_px"][0][0] + walls["wall_px"][1][0] == pytest.approx(C.BASE_HALF)
    assert m.opt.timestep == pytest.approx(C.PHYSICS_DT)


def _lower_onto_hole(
    env: PegInsertEnv, offsets: np.ndarray, step_down: float, steps: int = 40
) -> tuple[np.ndarray, np.ndarray]:
    """Line each peg up over its true hole plus an offset, then command the tip ``step_down`` below itself each step
    (above 5 mm the controller's force limit binds: as hard as it pushes).

    Returns the lowest tip height reached (N,) and whether each scene ever reported success.
    """
    hover = np.column_stack([env.hole_xy() + offsets, np.full(env.num_envs, C.HOLE_TOP + C.HOVER)])
    for _ in range(30):  # fly over and settle
        env.step(hover)
    lowest, success = np.full(env.num_envs, np.inf), np.zeros(env.num_envs, bool)
    for _ in range(steps):
        target = hover.copy()
        target[:, 2] = np.maximum(env.tip_pos()[:, 2] - step_down, C.WORKSPACE_LOW[2])
        _, _, _, info = env.step(target)
        lowest = np.minimum(lowest, env.tip_pos()[:, 2])
        success |= info["success"]
    return lowest, success


def test_a_lined_up_peg_goes_in_and_an_offset_one_jams_on_the_rim() -> None:
    """1 mm clearance in MuJoCo: centred, the peg slides in; 3 mm off (in x, in y, diagonally) it stays on the rim
    under the controller's full force, pressing into it by well under a millimetre (no tunnelling)."""
    lined_up = PegInsertEnv(3, episode_steps=200, config=EXACT)
    lined_up.reset([1, 2, 3])
    lowest, success = _lower_onto_hole(lined_up, np.zeros((3, 2)), step_down=0.003)  # the expert's pace
    assert success.all() and (lowest < C.HOLE_TOP - C.SUCCESS_DEPTH).all()
    offsets = np.array([[0.003, 0.0], [0.0, -0.003], [-0.0021, 0.0021]])
    env = PegInsertEnv(len(offsets), episode_steps=200, config=EXACT)
    env.reset([1, 2, 3])
    lowest, success = _lower_onto_hole(env, offsets, step_down=0.01)  # as hard as the controller pushes
    assert not success.any()
    assert (lowest > C.HOLE_TOP - 0.0005).all(), (lowest - C.HOLE_TOP) * 1e3  # measured: ≤ 0.07 mm below the rim
    assert (np.abs(env.tip_pos()[:, :2] - env.hole_xy()).max(axis=1) > (C.HOLE_SIZE - C.PEG_SIZE) / 2).all()


def test_the_controller_limits_how_far_the_reference_leads_the_tip() -> None:
    env = PegInsertEnv(1, config=EXACT)
    env.reset([0])
    s = env.scenes[0]
    far_below = np.array([*env.hole_xy()[0] + 0.01, C.WORKSPACE_LOW[2]])  # beside the hole: the peg lands on the base
    for _ in range(40):
        env.step(far_below[None])
    forces = np.zeros(6)
    total = 0.0
    for i in range(s.data.ncon):
        mujoco.mj_contactForce(env.model, s.data, i, forces)
        total += forces[0]
    assert env.tip_pos()[0, 2] > C.HOLE_TOP - 0.0005  # on the rim, not through it
    assert 10.0 < total < 120.0, total  # pressing, but with a bounded force (MAX_LEAD)


def test_success_needs_two_centimetres_depth() -> None:
    hole = np.array([0.5, 0.0])
    depth = C.HOLE_TOP - np.array([0.0195, 0.0200, 0.0300])
    tips = np.column_stack([np.full(3, 0.5003), np.zeros(3), depth])
    assert seated(tips, hole).tolist() == [False, True, True]
    assert progress(tips, hole)[1:] == pytest.approx([1.0, 1.0]) and progress(tips[:1], hole)[0] < 1.0
    beside = np.array([0.5 + C.BASE_HALF + 0.01, 0.0, 0.005])  # down on the table beside the base: not in the hole
    assert inserted_depth(beside, hole) == 0.0 and not seated(beside, hole)
    # In the sim, success is reported exactly when the true depth reaches 2 cm, and ends the episode.
    env = PegInsertEnv(1, config=EXACT)
    env.reset([5])
    hover = np.array([*env.hole_xy()[0], C.HOLE_TOP + C.HOVER])
    for _ in range(25):
        env.step(hover[None])
    done = False
    while not done:
        _, _, end, info = env.step(np.array([[*hover[:2], env.tip_pos()[0, 2] - 0.003]]))
        assert info["success"][0] == (info["depth"][0] >= C.SUCCESS_DEPTH)
        done = bool(end[0])
    assert info["success"][0] and env.episode_metrics()["success"][0]


def test_hole_observation_is_noisy_but_success_uses_the_true_pose() -> None:
    """A tracker 5 cm off (bias) with jitter: the policy sees the wrong hole, success is judged on the right one."""
    config = PegInsertConfig(hole_bias_std=0.05, hole_noise_std=0.001)
    env = PegInsertEnv(1, config=config)
    seed = next(s for s in range(50) if np.abs(env.reset([s])[0, 3:5] - env.hole_xy()[0]).min() > C.BASE_HALF + 0.01)
    obs = [env.reset([seed])[0]]
    hover = np.array([*env.hole_xy()[0], C.HOLE_TOP + C.HOVER])
    for _ in range(25):
        obs.append(env.step(hover[None])[0][0])
    seen = np.array(obs)[:, 3:5] - env.hole_xy()[0]
    assert np.abs(seen.mean(axis=0)).min() > C.BASE_HALF  # the bias stays
    assert 0.0005 < seen.std(axis=0).mean() < 0.002  # the jitter is fresh each step
    np.testing.assert_allclose(obs[-1][:3], env.tip_pos()[0], atol=1e-6)  # the tip is measured exactly
    np.testing.assert_array_equal(PegInsertEnv(1, config=config).reset([seed]), obs[0][None])  # seeded
    done = False
    while not done:
        o, _, end, info = env.step(np.array([[*hover[:2], env.tip_pos()[0, 2] - 0.003]]))
        done = bool(end[0])
    assert info["success"][0]
    assert not seated(o[0, :3], o[0, 3:5])  # judged on the tracked hole, the peg would not count as in


def test_expert_inserts_on_most_seeds() -> None:
    """The expert sees only the noisy observation and searches the hole by feel (default noise)."""
    seeds = list(range(8))
    env = PegInsertEnv(len(seeds))
    obs = env.reset(seeds)
    experts = [PegInsertExpert(np.random.default_rng(s)) for s in seeds]
    phases: set[str] = set()
    while not env.done.all():
        steps = [x.act(o) for x, o in zip(experts, obs, strict=True)]
        phases |= {PHASES[s.phase] for s in steps}
        obs, *_ = env.step(np.array([s.target for s in steps]))
    m = env.episode_metrics()
    assert m["success"].sum() >= 7, m
    assert env.steps.mean() < 80  # ~4.7 s on average over 400 seeds
    assert phases == set(PHASES)  # the bias made it search on some seed


def test_an_expert_taking_over_on_the_rim_searches_there_and_one_taking_over_above_approaches() -> None:
    """The scripted person's hand: a peg stalled on the rim beside the hole is felt for in place, not lifted."""
    hole = np.array([0.55, 0.02])
    on_rim = np.array([0.5515, 0.0205, C.HOLE_TOP + 0.0002, *hole])
    expert = PegInsertExpert(np.random.default_rng(0), PegInsertConfig(expert_noise_std=0.0))
    step = expert.act(on_rim)
    assert PHASES[step.phase] == "search" and step.target[2] == pytest.approx(C.HOLE_TOP - 0.002)
    expert.reset()
    high = np.array([0.5515, 0.0205, C.HOLE_TOP + 0.05, *hole])
    assert PHASES[expert.act(high).phase] == "approach"
    expert.reset()
    far_on_rim = np.array([0.58, 0.05, C.HOLE_TOP + 0.0002, *hole])  # on the base's top, far from the hole
    step = expert.act(far_on_rim)
    assert PHASES[step.phase] == "approach" and step.target[2] > far_on_rim[2]


def test_demos_round_trip(tmp_path) -> None:
    from sim.demos import record_demos

    s = record_demos("panda-peg-insert", 2, tmp_path / "demos", seed=0, num_envs=2, progress=False)
    assert s.episodes == 2 and s.expert_success_rate > 0
    ds = load_dataset(tmp_path / "demos")
    assert ds.spec == get_task("panda-peg-insert").spec()
    for i in range(2):
        ep = ds.episode(i)
        assert ep["next.success"][-1] and not ep["next.success"][:-1].any()
        assert ep["observation.state"].shape[1] == 5 and ep["action"].shape[1] == 3
        assert ep["observation.environment_state"].shape[1] == 2 and ep["expert.phase"].max() == PHASES.index("insert")
        assert ds.episode_meta(i)["max_coverage"] == pytest.approx(1.0)


def test_sim_single_env_runs_an_episode_and_holds_a_bad_action() -> None:
    from sim.single_env import SimSingleEnv

    env = SimSingleEnv("panda-peg-insert")
    obs, info = env.reset(seed=3)
    act, _ = expert_policy(3)
    _, _, _, _, bad = env.step(np.array([np.nan, 0.0, 0.0]))
    assert bad["source"] == "hold" and "not finite" in bad["reason"]
    done, steps = False, 1
    while not done:
        obs, reward, terminated, truncated, info = env.step(act(obs))
        done, steps = terminated or truncated, steps + 1
    assert terminated and info["success"] and reward == pytest.approx(1.0)
    assert info["timestamp"] == pytest.approx(steps * 0.1)


def test_scripted_person_takes_over_a_stalled_policy() -> None:
    from sim.single_env import SimSingleEnv
    from teleop.scripted import ScriptedIntervention, scripted_person

    intervention = ScriptedIntervention(scripted_person("panda-peg-insert"))
    # 45 s: the person waits 5 s of no progress before each takeover and hands back once the peg is on its way in,
    # so a policy that only holds needs several takeovers to finish (seeds 0-5: 5 of 6 finish, in 14-41 s)
    env = SimSingleEnv("panda-peg-insert", episode_steps=450, intervention=intervention)
    successes = 0
    for seed in range(4):
        obs, _ = env.reset(seed=seed)
        infos, done = [], False
        while not done:  # a policy that only holds the peg where it is
            obs, _, terminated, truncated, info = env.step(np.asarray(obs[:3], dtype=np.float64))
            infos.append(info)
            done = terminated or truncated
        first = next(i for i, info in enumerate(infos) if info["source"] == "teleop")
        assert infos[first]["reason"] == "stall" and infos[first]["is_intervention"]
        successes += int(infos[-1]["success"])
    assert successes >= 3  # the policy alone never moves
    below_beside = np.array([0.45, 0.0, C.HOLE_TOP - 0.01, 0.5, 0.0])
    assert not in_safety_region(below_beside) and in_safety_region(np.array([0.5, 0.0, C.HOLE_TOP - 0.01, 0.5, 0.0]))


def test_realtime_scene_tracks_the_hole_with_noise_and_the_expert_inserts() -> None:
    """The sim-as-real plant (what the arm bridge steps at 500 Hz), driven in-process at 10 Hz."""
    from sim.tasks.panda_peg_insert.realtime import RealtimePegInsert

    scene = RealtimePegInsert(seed=2)
    true = scene._env.hole_xy()[0]
    reports = np.array([scene.tracked_poses()["hole"] for _ in range(20)])
    assert reports[:, 2] == pytest.approx(C.HOLE_TOP) and reports[:, 3] == pytest.approx(1.0)
    assert np.ptp(reports[:, :2], axis=0).min() > 0  # fresh jitter per report
    np.testing.assert_allclose(reports[:, :2].mean(axis=0), true + scene._env.scenes[0].bias, atol=0.0006)
    act, _ = expert_policy(2)
    for _ in range(150):
        s = scene.state()
        scene.set_tip_target(act(np.concatenate([s.tip_pos, scene.tracked_poses()["hole"][:2]])))
        for _ in range(50):
            scene.step()
        if scene.diagnostics()["progress"] >= 1.0:
            break
    assert scene.diagnostics()["depth_mm"] >= 20.0
    assert scene.time == pytest.approx(scene.steps * C.PHYSICS_DT)


def test_robot_adapter_maps_arm_state_to_the_spec() -> None:
    from real.ros_arm import ArmState
    from real.tasks import arm_task

    task = arm_task("panda-peg-insert")
    assert task.tracked_objects == ("hole",) and task.spec == get_task("panda-peg-insert").spec()
    hole = np.array([0.5, 0.05, C.HOLE_TOP, 1.0, 0.0, 0.0, 0.0])
    seated_state = ArmState(np.zeros(7), np.zeros(7), np.array([0.5, 0.05, 0.015]), np.zeros(4), {"hole": hole}, {})
    np.testing.assert_allclose(task.observation(seated_state), [0.5, 0.05, 0.015, 0.5, 0.05], atol=1e-7)
    assert task.reward(seated_state) == (pytest.approx(1.0), True)
    path = task.reset_path(seated_state)
    assert path[0][:2] == pytest.approx([0.5, 0.05]) and path[0][2] > C.HOLE_TOP  # straight up out of the hole first
    np.testing.assert_allclose(task.ee_target(task.hold_action(seated_state))[0], seated_state.ee_pos)
