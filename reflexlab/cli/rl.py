"""`reflexlab rl habc`: real-world RL, the actor (robot, policy, recorder) and the learner as two processes.

They meet only in the work folder: ``rollouts/`` (the dataset the actor records), ``policies/`` (the versions the
learner deploys, `deploy.policy_store`) and ``learner/`` (checkpoints, ``rounds.jsonl``, ``rounds.png``, TensorBoard).
By default this process runs the learner and starts the actor beside it; ``--actor-only`` on the robot's computer
and ``--learner-only`` on a GPU box share the folder (NFS, rsync, Syncthing) instead. Either may be killed at any
moment and started again with the same command: the actor loses at most the episode in flight, the learner
resumes at its next round.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tyro

from reflexlab.env import SingleEnv


@dataclass(frozen=True)
class Habc:
    """HABC: advantage-weighted BC from the robot's own episodes, outcome credit only to what the policy executed.

    Each round collects ``episodes-per-round`` episodes with the deployed version, fits the viability and
    efficiency critics, fine-tunes the policy with per-step weights and deploys it (`policies.rl.habc` says how).
    """

    initial: Path | None = None
    """the SFT policy to start from: a bc run folder or checkpoint (learner; e.g. runs/panda-push-t/flow)."""
    demos: Path = Path("runs/panda-push-t/demos")
    """the demonstrations: observation histories that check each export (learner)."""
    work_dir: Path = Path("runs/rl/habc")
    """rollouts/, policies/ and learner/ live here (shared by actor and learner)."""
    task: str = "panda-push-t"
    """an arm task with a simulated scene (and a real-robot adapter for sim-as-real)."""
    robot: Literal["sim", "sim-as-real"] = "sim"
    """sim: the task's MuJoCo scene stepped as fast as it goes (robot time = steps x period); sim-as-real: the arm
    bridge over ROS 2 in real time (actor)."""
    intervener: Literal["none", "scripted"] = "none"
    """scripted: a noisy copy of the task's expert takes over, through the teleop arbiter, when the policy stalls,
    regresses or leaves the safety region, and hands back (teleop.scripted; actor)."""
    rounds: int = 5
    episodes_per_round: int = 10
    episode_time_s: float = 30.0
    """time limit per episode (actor)."""
    sampling_steps: int = 10
    """the deployed policy's sampler steps (unrolled in its ONNX file)."""
    update_steps: int = 2000
    """fine-tune steps per round."""
    update_lr: float = 1e-3
    critic_steps: int = 2000
    """optimiser steps per critic fit."""
    critics: Literal["two", "one"] = "two"
    """one: the single-critic advantage-weighted BC baseline (viability only, no gate)."""
    aware: bool = True
    """intervention-aware credit; --no-aware is the ablation (outcomes cross intervention boundaries)."""
    seed: int = 0
    """episode k of the dataset runs seed + k."""
    actor_only: bool = False
    learner_only: bool = False

    def run(self) -> None:
        if self.actor_only and self.learner_only:
            raise ValueError("--actor-only and --learner-only exclude each other (give neither to run both here)")
        if self.actor_only:
            self._actor()
            return
        if self.initial is None:
            raise ValueError("the learner needs --initial, the SFT policy to start from (a bc run or checkpoint)")
        if not self.demos.exists():
            raise FileNotFoundError(f"--demos {self.demos}: no such dataset (reflexlab demos writes one)")
        actor = None if self.learner_only else self._start_actor()
        try:
            rows = self._learner()
            if actor is not None:  # the learner said it is done: the actor stops at its next episode boundary
                actor.wait(timeout=self.episode_time_s + 60)
        finally:
            if actor is not None and actor.poll() is None:  # Ctrl-C here: the episode in flight is discarded
                actor.send_signal(signal.SIGINT)
                actor.wait(timeout=60)
        print(json.dumps({"work_dir": str(self.work_dir), "rounds": rows}))

    def _start_actor(self) -> subprocess.Popen:
        """The actor as its own process, given what the robot side needs (the learner's settings stay here)."""
        argv = [sys.executable, "-m", "reflexlab.cli", "rl", "habc", "--actor-only"]
        for name in ("work_dir", "task", "robot", "intervener", "episode_time_s", "seed"):
            argv += [f"--{name.replace('_', '-')}", str(getattr(self, name))]
        return subprocess.Popen(argv)

    def _actor(self) -> None:
        from deploy.policy_store import PolicyStore
        from deploy.rl.actor import ActorOptions, run_actor

        store = PolicyStore(self.work_dir / "policies")
        options = ActorOptions(seed=self.seed)  # until the learner says it is finished (or Ctrl-C)
        with self._robot() as env:
            try:
                summary = run_actor(env, self.work_dir / "rollouts", store, options)
            except KeyboardInterrupt:  # stopped: the episode in flight is discarded, the committed ones stay
                print(json.dumps({"actor": "interrupted", "dataset": str(self.work_dir / "rollouts")}))
                return
            stats = getattr(env, "stats", None)
        report = {"actor_episodes": summary.episodes, "versions": summary.versions}
        if stats is not None:  # a real-time robot: did the loop keep its rate?
            report |= {"steps": stats.steps, "late_steps": stats.late_steps, "worst_late_ms": stats.worst_lateness_ms}
        print(json.dumps(report))

    @contextmanager
    def _robot(self) -> Iterator[SingleEnv]:
        """The robot the actor steps: the MuJoCo scene as fast as it goes, or the arm bridge in real time."""
        from teleop.scripted import ScriptedIntervention, scripted_person

        person = scripted_person(self.task, seed=self.seed) if self.intervener == "scripted" else None
        if self.robot == "sim":
            from sim.single_env import SimSingleEnv

            intervention = None if person is None else ScriptedIntervention(person)
            yield SimSingleEnv(self.task, _steps(self.task, self.episode_time_s), intervention)
            return
        from real.session import RecordOptions, arm_env
        from real.tasks import arm_task

        task = arm_task(self.task)
        record = RecordOptions(self.work_dir / "rollouts", task=self.task, episode_time_s=self.episode_time_s)
        intervention = None if person is None else ScriptedIntervention(person, observe=task.observation)
        with arm_env(record, task, ("sim",), intervention) as env:
            yield env

    def _learner(self) -> list[dict]:
        from deploy.policy_store import PolicyStore
        from deploy.rl.learner import LearnerOptions, run_learner
        from policies.checkpoint import resolve_checkpoint
        from policies.generative.train import TrainConfig
        from policies.rl.critics import CriticConfig
        from policies.rl.habc import HabcConfig, HabcRound

        train = TrainConfig(max_steps=self.update_steps, lr=self.update_lr, warmup_steps=100, checkpoint_every=10**9)
        options = LearnerOptions(
            rounds=self.rounds,
            episodes_per_round=self.episodes_per_round,
            demos=self.demos,
            sampling_steps=self.sampling_steps,
            update=HabcRound(
                HabcConfig(
                    critic=CriticConfig(steps=self.critic_steps), train=train, aware=self.aware, critics=self.critics
                )
            ),
        )
        store = PolicyStore(self.work_dir / "policies")
        initial = resolve_checkpoint(Path(self.initial))  # type: ignore[arg-type]
        return run_learner(self.work_dir / "rollouts", store, self.work_dir / "learner", initial, options)


def _steps(task: str, seconds: float) -> int:
    from sim.registry import get_task

    return max(1, round(seconds * get_task(task).spec().control_rate_hz))


def rl(method: tyro.conf.Positional[Literal["habc"]], options: tyro.conf.OmitArgPrefixes[Habc]) -> None:
    """Real-world RL from the robot's own episodes, actor and learner apart: habc (RL-100 is to come).

    Args:
        method: the learning method.
        options: its settings.
    """
    {"habc": options}[method].run()
