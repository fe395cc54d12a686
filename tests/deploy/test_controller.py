"""PolicyController (the policy node's core, no ROS): the robot-side observation equals training's,
bad state never reaches the policy, and stale state holds the robot; a camera's frames reach a
camera model as training saw them, and stale or bad frames hold the robot."""

import math

import numpy as np
import pytest
import torch

from deploy.controller import PolicyController, StateRejected
from deploy.runner import OnnxGenerator, OnnxPolicy
from reflexlab.chunking import ChunkConfig
from reflexlab.images import FrameResizer
from reflexlab.robot import RobotConfig
from reflexlab.rotations import projected_gravity
from reflexlab.spec import SpecMismatchError
from reflexlab.tasks.legged import quat_rotate_inverse
from sim.backends.mujoco_cpu import MujocoVecEnv
from sim.registry import get_task
from sim.ros.sim_robot import SimRobot
from tests.deploy.conftest import CAMERA_SIZE

ENTRY = get_task("quadruped-walk")
ROBOT = RobotConfig.load("quadruped")
NAMES = list(ROBOT.joint_names)
RATE = 500.0


@pytest.fixture
def ctl(exported) -> PolicyController:
    return PolicyController(OnnxPolicy(exported[0]), ROBOT, RATE)


def feed(ctl: PolicyController, t: float, stamp: int, q=None, qd=None, quat=(0, 0, 0, 1.0)) -> None:
    q = np.asarray(ENTRY.spec().action.offset) if q is None else q
    ctl.set_imu(np.asarray(quat, dtype=float), np.zeros(3), stamp, t)
    ctl.set_joint_state(NAMES, q, np.zeros(12) if qd is None else qd, stamp, t)


def test_projected_gravity_matches_the_simulator() -> None:
    q = torch.nn.functional.normalize(torch.randn(64, 4, generator=torch.Generator().manual_seed(0)), dim=-1)
    want = quat_rotate_inverse(q, torch.tensor([0.0, 0.0, -1.0]).expand(64, 3)).numpy()
    for qi, wi in zip(q.numpy(), want, strict=True):
        np.testing.assert_allclose(projected_gravity(np.r_[qi[1:], qi[0]]), wi, atol=1e-6)


def test_observation_from_robot_messages_equals_the_training_observation(ctl: PolicyController) -> None:
    """The same MuJoCo state, read as a robot's JointState/IMU, gives the training env's observation."""
    env = MujocoVecEnv(ENTRY, ENTRY.config("fast"), num_envs=1, nthread=1, seed=3, obs_noise=False)
    env.task.set_commands(torch.tensor([[0.5, 0.1, -0.2]]))
    gen = torch.Generator().manual_seed(1)
    for _ in range(15):  # moving, tilted, with joint velocities
        obs, *_ = env.step(torch.randn(1, 12, generator=gen))
    robot = SimRobot("quadruped-walk")
    robot.data.qpos[:], robot.data.qvel[:] = env.qpos[0], env.qvel[0]
    s = robot.state()
    ctl.set_velocity_command(np.array([0.5, 0.1, -0.2]), 0.0)
    ctl.set_imu(s.quat_xyzw, s.gyro, 1, 0.0)
    ctl.set_joint_state(NAMES, s.joint_pos, s.joint_vel, 1, 0.0)
    ctl.step(0.0)
    phase = float(env.task.phase[0])
    ctl._last_action = env.task.last_action[0].numpy()
    terms = ctl.observation_terms(phase / ctl.gait_hz)  # the robot's clock at the env's phase
    got = ctl.policy.assemble(terms) * np.asarray(ENTRY.spec().policy_obs.scales())
    np.testing.assert_allclose(got, obs["policy"][0].numpy(), atol=1e-5)


@pytest.mark.parametrize(
    ("names", "pos", "reason"),
    [
        (NAMES[:-1], np.zeros(11), "missing_joint"),
        (NAMES, np.zeros(11), "wrong_length"),
        (NAMES, np.r_[np.zeros(11), np.nan], "non_finite"),
        (NAMES, np.r_[np.zeros(11), np.inf], "non_finite"),
        (NAMES, np.full(12, 1e6), "implausible_position"),
    ],
)
def test_bad_joint_states_are_rejected_by_reason(ctl: PolicyController, names, pos, reason: str) -> None:
    with pytest.raises(StateRejected) as e:
        ctl.set_joint_state(names, pos, np.zeros(len(pos)), 1, 0.0)
    assert e.value.reason == reason
    assert ctl.rejected[f"joint_states.{reason}"] == 1
    assert ctl.state_age(0.0) == math.inf  # nothing was taken


def test_stamps_must_move_forward(ctl: PolicyController) -> None:
    feed(ctl, 0.0, 100)
    with pytest.raises(StateRejected, match="repeats"):
        ctl.set_joint_state(NAMES, np.asarray(ENTRY.spec().action.offset), np.zeros(12), 100, 0.001)
    with pytest.raises(StateRejected, match="older"):
        ctl.set_joint_state(NAMES, np.asarray(ENTRY.spec().action.offset), np.zeros(12), 99, 0.001)
    assert ctl.rejected == {"joint_states.duplicate_stamp": 1, "joint_states.out_of_order": 1}


def test_runs_the_policy_at_the_model_rate_and_holds_when_state_goes_stale(ctl: PolicyController) -> None:
    assert ctl.step(0.0) is None  # no state yet: nothing is safe to command
    ctl.set_velocity_command(np.array([0.5, 0.0, 0.0]), 0.0)
    out = []
    for k in range(100):  # 0.2 s at 500 Hz
        t = k / RATE
        feed(ctl, t, k + 1)
        out.append(ctl.step(t))
    assert ctl.inferences == 10  # 50 Hz policy in a 500 Hz loop
    steps = np.abs(np.diff(np.array(out), axis=0))
    # targets move once per policy period, by at most the rate limit's budget for that period
    assert steps.max() <= ROBOT.safety_limits(ctl.spec).max_rate / ctl.policy_rate_hz + 1e-9
    assert np.count_nonzero(steps.max(axis=1)) <= ctl.inferences
    held = [ctl.step(0.2 + k / RATE) for k in range(1, 20)]  # state stops arriving
    assert ctl.filter.interventions["stale_state"] > 0
    np.testing.assert_array_equal(held[-1], held[-2])
    assert ctl.inferences == 10 + 1  # the first step after the last state was still fresh


def test_commands_are_clipped_and_time_out(ctl: PolicyController) -> None:
    ctl.set_velocity_command(np.array([5.0, -3.0, 0.2]), 0.0)
    feed(ctl, 0.0, 1)
    ctl.step(0.0)
    np.testing.assert_allclose(ctl.observation_terms(0.5)["velocity_command"], [1.0, -0.5, 0.2])
    np.testing.assert_allclose(ctl.observation_terms(1.5)["velocity_command"], [0.0, 0.0, 0.0])
    with pytest.raises(StateRejected):
        ctl.set_velocity_command(np.array([np.nan, 0, 0]), 0.1)


def serve_generator(model, seconds: float, rate: float = 1000.0, seed: int = 0, **chunking) -> tuple:
    """Drive a generator's controller with a fresh, slowly moving state every control step.

    Returns the controller, the commands, and per step the executor's (unfiltered) target and
    whether the filter's rate limit acted.
    """
    ctl = PolicyController(OnnxGenerator(model.path), ROBOT, rate, chunking=ChunkConfig(**chunking), seed=seed)
    home = np.asarray(ENTRY.spec().action.offset)
    commands, targets, limited = [], [], []
    for k in range(round(seconds * rate)):
        t = k / rate
        feed(ctl, t, k + 1, q=home + 0.05 * math.sin(6 * t))
        before = ctl.filter.interventions["rate_limit"]
        commands.append(ctl.step(t))
        targets.append(ctl.policy.joint_targets(ctl.chunks(t)))
        limited.append(ctl.filter.interventions["rate_limit"] > before)
    return ctl, np.array(commands), np.array(targets), np.array(limited)


def assert_within_the_filter_budget(ctl: PolicyController, commands: np.ndarray, budget: float) -> None:
    limits = ROBOT.safety_limits(ctl.spec)
    assert np.isfinite(commands).all()
    assert (commands >= np.asarray(limits.lower)).all() and (commands <= np.asarray(limits.upper)).all()
    assert np.abs(np.diff(commands, axis=0)).max() <= budget + 1e-12


def test_generator_replans_at_the_policy_rate_and_streams_interpolated_targets(generator) -> None:
    ctl, commands, targets, limited = serve_generator(generator, 0.2)
    assert ctl.policy_rate_hz == 100.0  # the model's control rate
    assert ctl.inferences == ctl.chunks.replans == 20  # one chunk per 10 control steps
    assert ctl.chunks.exhaustions == 0
    # every control step moves the command (interpolation), by at most max_rate / control rate
    moved = np.abs(np.diff(commands, axis=0)).max(axis=1) > 0
    assert moved.mean() > 0.95
    assert_within_the_filter_budget(ctl, commands, ROBOT.safety_limits(ctl.spec).max_rate / 1000.0)
    # the command is the executor's interpolated target wherever the rate limit did not act (it
    # acts only while catching up with a re-plan's jump)
    assert (~limited).mean() > 0.5
    np.testing.assert_allclose(commands[~limited], targets[~limited], atol=1e-9)
    # the observation's last action is the action the latest policy step (at 0.19 s) committed to
    np.testing.assert_allclose(ctl.observation_terms(0.199)["last_action"], ctl.chunks(0.19), atol=1e-6)


def test_generator_noise_is_seeded_and_modes_are_served(generator) -> None:
    a = serve_generator(generator, 0.05, seed=1)[1]
    b = serve_generator(generator, 0.05, seed=1)[1]
    c = serve_generator(generator, 0.05, seed=2)[1]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    ctl, ensemble, *_ = serve_generator(generator, 0.1, execution="ensemble", ensemble_decay=0.5)
    assert ctl.chunks.replans == 10
    assert_within_the_filter_budget(ctl, ensemble, ROBOT.safety_limits(ctl.spec).max_rate / 1000.0)
    # "hold": the command changes only at re-plans, by at most the budget of one policy period
    ctl, held, *_ = serve_generator(generator, 0.1, interpolation="hold")
    assert np.count_nonzero(np.abs(np.diff(held, axis=0)).max(axis=1)) <= ctl.chunks.replans
    assert_within_the_filter_budget(ctl, held, ROBOT.safety_limits(ctl.spec).max_rate / 100.0)


# --- cameras: a generator reading the "front" camera of the robot config (conftest) ------------------------------
def frame(value: int, size: tuple[int, int] = CAMERA_SIZE) -> np.ndarray:
    pixels = np.full((*size, 3), value, np.uint8)
    pixels[: size[0] // 2, :, 0] = 255 - value  # not uniform: the resize has something to do
    return pixels


def camera_ctl(camera_generator, camera_robot: RobotConfig) -> PolicyController:
    return PolicyController(OnnxGenerator(camera_generator.path), camera_robot, 100.0, chunking=ChunkConfig())


def test_camera_frames_reach_the_policy_resized_as_training_resizes_them(camera_generator, camera_robot) -> None:
    ctl = camera_ctl(camera_generator, camera_robot)
    fed: list[dict[str, np.ndarray]] = []
    sample = ctl.policy.sample
    ctl.policy.sample = lambda *a, **kw: fed.append(kw["images"]) or sample(*a, **kw)  # the real model, watched
    feed(ctl, 0.0, 1)
    assert ctl.step(0.0) is None, "not armed before the camera's first frame"
    shown = [frame(40), frame(200)]
    for k, pixels in enumerate(shown):
        ctl.set_image("front", pixels, k + 1, k * 0.01)
        feed(ctl, k * 0.01, k + 2)
        assert ctl.step(k * 0.01) is not None
    resize = FrameResizer(12, 16)
    assert len(fed) == 2 and fed[0]["front"].shape == (2, 3, 12, 16)
    np.testing.assert_array_equal(fed[0]["front"], np.stack([resize(shown[0])] * 2))  # padded like training
    np.testing.assert_array_equal(fed[1]["front"], np.stack([resize(shown[0]), resize(shown[1])]))  # oldest first
    # The frame moved the chunk as the model says: + 0.2 (mean / 255 - 0.5) on every action.
    dark, bright = (camera_ctl(camera_generator, camera_robot) for _ in range(2))
    for c, value in ((dark, 0), (bright, 255)):
        c.set_image("front", np.full((*CAMERA_SIZE, 3), value, np.uint8), 1, 0.0)
        feed(c, 0.0, 1)
        c.step(0.0)
    np.testing.assert_allclose(bright.chunks(0.0) - dark.chunks(0.0), 0.2, atol=1e-5)


def test_stale_or_missing_frames_hold_the_robot_and_fresh_ones_resume(camera_generator, camera_robot) -> None:
    ctl = camera_ctl(camera_generator, camera_robot)
    limit = camera_robot.safety.max_frame_age_s
    ctl.set_image("front", frame(100), 1, 0.0)
    for k in range(5):  # 50 ms of fresh state and frames: the policy runs
        feed(ctl, k * 0.01, k + 1)
        ctl.step(k * 0.01)
    runs = ctl.inferences
    held = []
    for k in range(5, 40):  # the state keeps coming, the camera has stopped
        t = k * 0.01
        feed(ctl, t, k + 1)
        held.append(ctl.step(t))
    assert ctl.stale_cameras(0.39) == ["front"] and ctl.frame_ages(0.39)["front"] == pytest.approx(0.39)
    stale_steps = sum(k * 0.01 > limit for k in range(5, 40))
    assert ctl.filter.interventions["stale_frames"] == stale_steps > 0
    np.testing.assert_array_equal(held[-1], held[-stale_steps])  # held still while blind
    assert ctl.inferences == runs + sum(k * 0.01 <= limit for k in range(5, 40))  # no inference on an old picture
    ctl.set_image("front", frame(100), 2, 0.4)
    feed(ctl, 0.4, 100)
    ctl.step(0.4)
    assert ctl.inferences > runs and ctl.filter.interventions["stale_frames"] == stale_steps


@pytest.mark.parametrize(
    ("pixels", "reason", "words"),
    [
        (frame(0, (12, 16)), "wrong_size", r"\(12, 16, 3\), expected uint8 RGB \(24, 32, 3\) as the robot config"),
        (frame(0).astype(np.float32), "wrong_size", "float32"),
        (frame(0)[..., :1], "wrong_size", r"\(24, 32, 1\)"),
    ],
    ids=["size", "dtype", "mono"],
)
def test_bad_frames_are_rejected_by_reason(camera_generator, camera_robot, pixels, reason: str, words: str) -> None:
    ctl = camera_ctl(camera_generator, camera_robot)
    with pytest.raises(StateRejected, match=words) as e:
        ctl.set_image("front", pixels, 1, 0.0)
    assert e.value.reason == reason and ctl.rejected == {f"images.front.{reason}": 1}
    assert ctl.frame_ages(0.0) == {"front": math.inf}  # nothing was taken
    ctl.set_image("front", frame(0), 5, 0.0)
    with pytest.raises(StateRejected, match="repeats"):
        ctl.set_image("front", frame(0), 5, 0.01)
    with pytest.raises(StateRejected, match="not one the model reads"):
        ctl.set_image("rear", frame(0), 6, 0.01)


def test_a_model_reading_a_camera_the_robot_lacks_is_refused(camera_generator) -> None:
    with pytest.raises(SpecMismatchError, match=r"no such camera.*images\[0\]\.name' is 'front', expected 'none'"):
        PolicyController(OnnxGenerator(camera_generator.path), ROBOT, 100.0)
