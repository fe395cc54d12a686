"""A camera policy served on the robot side, sim-as-real: `StepActor` fed each step's frame by `record_episodes`
(librealsense's playback pipeline, or the arm bridge's rendered camera over ROS 2), holding the arm while the
camera has no fresh frame. The policy is a tiny push-T diffusion teacher reading a "scene" camera (trained a few
steps: these tests are about what reaches it and what the arm does, not how well it pushes)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.step_actor import StepActor
from policies.imitation import train_bc_run
from real.env import RealEnv, RealEnvConfig
from real.record import features_of, record_episodes, videos_of
from real.ros_arm import RosArm
from real.session import RecordOptions, record_session, sim_bridge_process
from real.tasks import arm_task
from reflexlab.cli.export import export_generative_checkpoint
from reflexlab.dataset import DatasetWriter, load_dataset
from reflexlab.images import FrameResizer
from tests.policies.test_imitation_images import TINY, write_camera_episodes

TASK = "panda-push-t"
CAMERA, SIZE = "scene", (24, 32)


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("camera_policy")
    demos = write_camera_episodes(root / "demos", (CAMERA,))
    run = root / "diffusion"
    train_bc_run("diffusion", demos, run, 2, None, 0, progress=False, image_keys=(CAMERA,), image_size=SIZE, **TINY)
    export_generative_checkpoint(run, root / "policy.onnx", num_obs=4, dataset=demos)
    return root / "policy.onnx"


class WatchedActor(StepActor):
    """The real `StepActor`, keeping each step's frames as `act` got them (None: no fresh frame)."""

    def __init__(self, path: Path, spec: object = None, seed: int = 0) -> None:
        super().__init__(path, spec, seed)  # type: ignore[arg-type]
        self.seen: list[np.ndarray | None] = []

    def act(self, obs: np.ndarray, images: dict[str, np.ndarray | None] | None = None) -> np.ndarray:
        self.seen.append(None if images is None or images[CAMERA] is None else images[CAMERA].copy())
        return super().act(obs, images)


@pytest.fixture(scope="module")
def arm() -> Iterator[RosArm]:
    with sim_bridge_process(TASK), RosArm() as arm:
        arm.wait_for_state(timeout_s=30.0)
        yield arm


def test_a_session_refuses_a_camera_policy_without_its_camera(student: Path, tmp_path: Path) -> None:
    options = RecordOptions(out=tmp_path / "ds", policy=str(student), cameras=("wrist=ros:/wrist/image_raw",))
    with pytest.raises(ValueError, match=r"reads camera\(s\) \['scene'\] and --cameras opens wrist: add scene=SOURCE"):
        record_session(options, onnx_actor=StepActor)
    assert not (tmp_path / "ds").exists(), "refused before anything started or was written"


def test_a_camera_policy_acts_on_each_frame_and_holds_the_arm_when_the_camera_stops(
    arm: RosArm, student: Path, tmp_path: Path
) -> None:
    """A 1.5 s RealSense recording through librealsense's pipeline, a 3 s episode: the second half is blind."""
    from real.cameras.realsense import RealSenseCamera, RealSenseConfig
    from real.cameras.synthetic import SyntheticScene, write_recording

    recording = write_recording(tmp_path / "cam.db3", SyntheticScene(width=64, height=48, frames=45), paced=True)
    env = RealEnv(arm, arm_task(TASK), RealEnvConfig(episode_time_s=3.0, reset=("sim",)))
    actor = WatchedActor(student, env.spec)
    config = RealSenseConfig(playback_file=recording, width=0, height=0)  # played once: the camera then stops
    with RealSenseCamera(config) as cam:
        cam.start()
        cam.wait_for_frame()
        cameras = {CAMERA: cam}
        with DatasetWriter(
            tmp_path / "ds", fps=10, robot_type="franka-panda", features=features_of(env, cameras), spec=env.spec,
            videos=videos_of(cameras),
        ) as w:  # fmt: skip
            summary = record_episodes(
                env, w, actor.act, 1, reset_actor=actor.reset, cameras=cameras, actor_cameras=(CAMERA,)
            )
    ep, meta = load_dataset(tmp_path / "ds").episode(0), load_dataset(tmp_path / "ds").episode_meta(0)
    blind = ep[f"camera.{CAMERA}.is_dropped"]
    assert len(blind) == len(actor.seen) == 30
    assert [s is None for s in actor.seen] == blind.tolist(), "the actor got exactly the frames that were recorded"
    assert 5 <= blind.sum() <= 20 and not blind[:10].any(), blind  # the camera ran out about halfway
    assert summary.stale_frame_holds == meta["stale_frame_holds"] == int(blind.sum())
    # Blind steps: the policy asked for nothing (recorded as 0) and the arm was held where its tip was.
    assert (ep["policy.action"][blind] == 0).all() and (ep["policy.action"][~blind] != 0).any()
    np.testing.assert_allclose(ep["action"][blind], ep["observation.state"][blind, :2], atol=1e-6)
    assert np.abs(ep["action"][~blind] - ep["observation.state"][~blind, :2]).max() > 1e-3, "it moved while seeing"
    # Seeing steps: the frame the policy read is the recorded one (up to the video's loss).
    frames = list(load_dataset(tmp_path / "ds").video_frames(0, f"observation.images.{CAMERA}"))
    resize = FrameResizer(*SIZE)
    for k in np.flatnonzero(~blind):
        assert np.abs(resize(frames[k]).astype(int) - resize(actor.seen[k]).astype(int)).mean() < 4, k


@pytest.mark.realtime  # the bridge renders its camera at 10 Hz on the wall clock (see test_env's camera test)
def test_the_camera_policy_serves_from_the_sim_as_real_bridges_camera_topic(
    student: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reflexlab record --policy policy.onnx --cameras scene=ros:/camera/color/image_raw`, sim-as-real."""
    monkeypatch.setenv("ROS_DOMAIN_ID", str(int(os.environ["ROS_DOMAIN_ID"]) + 100))  # away from the module's bridge
    actors: list[WatchedActor] = []

    def watched(path: Path, spec: object, seed: int) -> WatchedActor:
        actors.append(WatchedActor(path, spec, seed))
        return actors[-1]

    options = RecordOptions(
        out=tmp_path / "ds", policy=str(student), episodes=1, episode_time_s=2.0, seed=3,
        cameras=(f"{CAMERA}=ros:/camera/color/image_raw",),
    )  # fmt: skip
    summary = record_session(options, on_episode=lambda *_: None, onnx_actor=watched)
    ds = load_dataset(tmp_path / "ds")
    ep, seen = ds.episode(0), actors[0].seen
    frames = list(ds.video_frames(0, f"observation.images.{CAMERA}"))
    assert summary.steps == len(seen) == len(frames) == 20 and frames[0].shape == (120, 160, 3)
    fresh = ~ep[f"camera.{CAMERA}.is_dropped"]
    assert fresh.sum() >= 17 and summary.stale_frame_holds == int((~fresh).sum())
    resize = FrameResizer(*SIZE)
    for k in np.flatnonzero(fresh):
        assert seen[k].shape == (120, 160, 3), "the camera's own frames reach the actor, resized inside it"
        assert np.abs(resize(frames[k]).astype(int) - resize(seen[k]).astype(int)).mean() < 4, k
