"""Wiring for `reflexlab record`: arm (robot or sim-as-real bridge), task, actor, teleop, dataset.

Kept out of the CLI so tests and the real-world RL loops build the same env the command does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from real.env import Detector, Intervention, RealEnv, RealEnvConfig, ResetStep
from real.record import Actor, RecordSummary, features_of, print_progress, record_episodes, videos_of
from real.ros_arm import RosArm
from real.tasks import ArmTask, arm_task
from real.teleop_link import ArmIntervention
from reflexlab.dataset import DatasetWriter
from reflexlab.ros.topics import ArmTopics
from reflexlab.spec import Spec


@dataclass(frozen=True)
class RecordOptions:
    """What `reflexlab record` was asked to do (see its docstring for each field)."""

    out: Path
    task: str = "panda-push-t"
    episodes: int = 10
    policy: str = "expert"
    sim_as_real: bool = True
    start_bridge: bool = True  # sim-as-real: start the arm bridge here (off: a launch file started it)
    reset: tuple[ResetStep, ...] | None = None
    episode_time_s: float = 30.0
    seed: int = 0
    policy_version: int = 0
    cameras: tuple[str, ...] = ()  # NAME=SOURCE: ros:TOPIC, a RealSense recording (.db3), serial:NUMBER or live


@contextmanager
def sim_bridge_process(task: str, seed: int = 0, domain_id: int | None = None) -> Iterator[subprocess.Popen]:
    """The MuJoCo arm bridge in its own process (as on a robot, the driver is not the env's process).

    Its log goes to this process's stderr (a pipe nobody reads would fill and stall the simulated robot).
    Stopped with SIGINT (the node's clean path) and killed if it does not stop.
    """
    cmd = [sys.executable, "-m", "reflexlab.cli", "sim-bridge", "--task", task, "--seed", str(seed)]
    env = os.environ if domain_id is None else {**os.environ, "ROS_DOMAIN_ID": str(domain_id)}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
    try:
        time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError(f"the sim bridge ({' '.join(cmd)}) exited at start with code {proc.returncode}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _die_with_parent() -> None:
    """Linux: SIGTERM the bridge when the recorder dies, even by SIGKILL (no phantom robot keeps running)."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class OnnxActor(Protocol):
    """An exported policy acting once per control step (`deploy.step_actor.StepActor`)."""

    cameras: tuple[str, ...]  # read every step: act(obs, {camera: frame}); empty for a state-only policy

    def act(self, obs: np.ndarray, images: dict[str, np.ndarray | None] | None = None) -> np.ndarray: ...

    def reset(self) -> None: ...


OnnxActorFactory = Callable[[Path, Spec, int], OnnxActor]  # (model file, the task's Spec, seed) -> actor


@dataclass(frozen=True)
class SessionActor:
    """Who acts in a session: ``act`` (None: a person drives), its reset at each episode, the cameras it reads."""

    act: Actor | None
    reset: Callable[[], None]
    cameras: tuple[str, ...] = ()


def make_actor(policy: str, task: ArmTask, seed: int, onnx_actor: OnnxActorFactory | None = None) -> SessionActor:
    """``expert`` (the task's scripted expert), ``none`` (a person drives) or an exported .onnx file.

    An .onnx file runs through ``onnx_actor``, which the caller supplies (the CLI and the record node pass
    `deploy.step_actor.StepActor`): serving sits above this layer, so it is handed in, not imported.
    """
    if policy == "none":
        return SessionActor(None, lambda: None)
    if policy == "expert":
        return SessionActor(*task.expert(seed))
    path = Path(policy)
    if not path.exists():
        raise FileNotFoundError(f"--policy {policy}: no such file (use expert, none or an exported .onnx)")
    if onnx_actor is None:
        raise ValueError(f"--policy {policy}: an exported policy needs a runner (pass onnx_actor=StepActor)")
    actor = onnx_actor(path, task.spec, seed)
    return SessionActor(actor.act, actor.reset, tuple(actor.cameras))


def record_session(
    options: RecordOptions,
    teleop: str | Intervention | None = None,
    on_episode: Callable[[int, RecordSummary], None] = print_progress,
    onnx_actor: OnnxActorFactory | None = None,
) -> RecordSummary:
    """Run a recording session end to end; returns what was recorded.

    ``teleop``: a teleop config (name in config/teleop or YAML path) to open, or a ready `Intervention`.
    ``onnx_actor``: runs a ``--policy`` .onnx file (see `make_actor`).
    """
    o = options
    task = arm_task(o.task)
    reset = o.reset or (("sim",) if o.sim_as_real else ("scripted", "human"))
    if "sim" in reset and not o.sim_as_real:
        raise ValueError("reset step 'sim' needs --sim-as-real (a real scene is reset by a person: use human)")
    if o.policy == "none" and teleop is None:
        raise ValueError("--policy none needs a teleop device (--teleop): otherwise nobody commands the robot")
    actor = make_actor(o.policy, task, o.seed, onnx_actor)
    opened = [spec.partition("=")[0] for spec in o.cameras]
    unopened = [c for c in actor.cameras if c not in opened]
    if unopened:
        have = ", ".join(opened) or "none"
        raise ValueError(
            f"--policy {o.policy} reads camera(s) {unopened} and --cameras opens {have}: add "
            f"{unopened[0]}=SOURCE (e.g. {unopened[0]}=ros:/camera/color/image_raw, the sim-as-real bridge's camera)"
        )
    if not isinstance(teleop, str):
        return _record(o, task, reset, actor, teleop, on_episode)
    from real.teleop_link import make_intervention

    intervention = make_intervention(teleop, task, 1.0 / task.spec.control_rate_hz)
    try:
        return _record(o, task, reset, actor, intervention, on_episode)
    finally:
        intervention.close()  # the device this session opened


def default_detectors(task: ArmTask, intervention: Intervention | None) -> tuple[Detector, ...]:
    """Objects leaving their box fail the episode; with a teleop device, its success/failure buttons mark it."""
    from real.detectors import ButtonDetector, ObjectOutOfBounds

    detectors: list[Detector] = [ObjectOutOfBounds(n, lo, hi) for n, (lo, hi) in task.failure_boxes().items()]
    if isinstance(intervention, ArmIntervention):
        detectors.append(ButtonDetector(intervention))
    return tuple(detectors)


def parse_camera(spec: str) -> tuple[str, object]:
    """``scene=ros:/camera/color/image_raw`` (a ROS image topic), ``wrist=session.db3`` (RealSense playback,
    repeating), ``wrist=serial:123456`` or ``wrist=live`` (a RealSense opened here) → (name, source)."""
    from real.cameras.realsense import RealSenseConfig

    name, sep, source = spec.partition("=")
    if not sep or not name or not source:
        raise ValueError(
            f"--cameras {spec!r}: expected NAME=SOURCE (ros:TOPIC, a recording file, serial:NUMBER or live)"
        )
    if source.startswith("ros:"):
        return name, source.removeprefix("ros:")
    if source == "live":
        return name, RealSenseConfig()
    if source.startswith("serial:"):
        return name, RealSenseConfig(serial=source.removeprefix("serial:"))
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"--cameras {spec!r}: no recording at {path}")
    return name, RealSenseConfig(playback_file=path, playback_repeat=True, width=0, height=0)


@contextmanager
def _cameras(specs: tuple[str, ...]) -> Iterator[dict[str, object]]:
    from contextlib import ExitStack

    from real.cameras.realsense import RealSenseCamera

    with ExitStack() as stack:
        cams = {}
        for spec in specs:
            name, source = parse_camera(spec)
            if isinstance(source, str):
                from real.ros_camera import RosImageCamera

                cam = RosImageCamera(source)
            else:
                cam = RealSenseCamera(source).start()  # type: ignore[arg-type]
            stack.callback(cam.close)
            cam.wait_for_frame()
            cams[name] = cam
        yield cams


def _record(
    o: RecordOptions,
    task: ArmTask,
    reset: tuple[ResetStep, ...],
    actor: SessionActor,
    intervention: Intervention | None,
    on_episode: Callable[[int, RecordSummary], None],
) -> RecordSummary:
    with arm_env(o, task, reset, intervention) as env, _cameras(o.cameras) as cameras:
        spec = task.spec
        writer = DatasetWriter(
            o.out,
            fps=spec.control_rate_hz,
            robot_type=spec.robot,
            features=features_of(env, cameras),  # type: ignore[arg-type]
            spec=spec,
            videos=videos_of(cameras),
        )
        with writer as w:
            return record_episodes(
                env,
                w,
                actor.act,
                o.episodes,
                seed=o.seed,
                policy_version=o.policy_version,
                reset_actor=actor.reset,
                on_episode=on_episode,
                cameras=cameras,  # type: ignore[arg-type]
                actor_cameras=actor.cameras,
            )


@contextmanager
def arm_env(
    o: RecordOptions, task: ArmTask, reset: tuple[ResetStep, ...], intervention: Intervention | None = None
) -> Iterator[RealEnv]:
    """The arm as a `RealEnv` (the real robot's driver, or the arm bridge started here for sim-as-real), held and
    released on exit: what `reflexlab record` and the real-world RL actor both step."""
    if o.sim_as_real:  # the simulated robot lives on this host; never talk to the LAN
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    with _maybe_bridge(o), _arm(task) as arm:
        arm.wait_for_state(timeout_s=30.0)
        env = RealEnv(
            arm,
            task,
            RealEnvConfig(episode_time_s=o.episode_time_s, reset=reset),
            intervention,
            detectors=default_detectors(task, intervention),
        )
        try:
            yield env
        finally:
            env.close()


@contextmanager
def _maybe_bridge(o: RecordOptions) -> Iterator[object]:
    if not (o.sim_as_real and o.start_bridge):
        yield None
        return
    with sim_bridge_process(o.task, o.seed) as proc:
        yield proc


@contextmanager
def _arm(task: ArmTask) -> Iterator[RosArm]:
    arm = RosArm(ArmTopics.tracking(task.tracked_objects))  # the task's tracked objects, on their tracker topics
    try:
        yield arm
    finally:
        arm.close()
