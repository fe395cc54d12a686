"""`reflexlab rl habc|select|rl100`: real-world RL, the actor (robot, policy, recorder) and the learner apart.

They meet only in the work folder: ``rollouts/`` (the dataset the actor records), ``policies/`` (the versions the
learner deploys, `deploy.policy_store`) and ``learner/`` (checkpoints, ``rounds.jsonl``, ``rounds.png``, TensorBoard).
By default this process runs the learner and starts the actor beside it; ``--actor-only`` on the robot's computer
and ``--learner-only`` on a GPU box share the folder (NFS, rsync, Syncthing) instead. Either may be killed at any
moment and started again with the same command: the actor loses at most the episode in flight, the learner
resumes at its next round.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any, ClassVar, Literal

import tyro

from policies.rl.limits import HEAD_STEPS, MAX_ACTION_SHIFT, TARGET_KL
from reflexlab.env import SingleEnv

if TYPE_CHECKING:
    from policies.rl.rounds import RoundUpdate
    from policies.rl.selection import SelectionConfig


@dataclass(frozen=True)
class _RealWorldRl:
    """What every real-world RL method shares: the work folder, the robot side and the round sizes."""

    initial: Path | None = None
    """the policy to start from: a bc run folder or checkpoint (learner)."""
    demos: Path = Path("runs/panda-push-t/demos")
    """the demonstrations: observation histories that check each export (learner)."""
    work_dir: Path = Path("runs/rl")
    """rollouts/, policies/ and learner/ live here (shared by actor and learner)."""
    task: str = "panda-push-t"
    """an arm task with a simulated scene (and a real-robot adapter for sim-as-real)."""
    robot: Literal["sim", "sim-as-real"] = "sim"
    """sim: the task's MuJoCo scene stepped as fast as it goes (robot time = steps x period); sim-as-real: the arm
    bridge over ROS 2 in real time (actor)."""
    intervener: Literal["none", "scripted"] = "none"
    """scripted: a noisy copy of the task's expert takes over, through the teleop arbiter, when the policy stalls,
    regresses or leaves the safety region, and hands back (teleop.scripted; actor)."""
    episodes_per_round: int = 10
    episode_time_s: float = 30.0
    """time limit per episode (actor)."""
    sampling_steps: int = 10
    """the deployed policy's sampler steps (unrolled in its ONNX file)."""
    seed: int = 0
    """episode k of the dataset runs seed + k."""
    paced: bool = True
    """the actor collects exactly the episodes each round asks for and holds the robot while the learner trains;
    --no-paced: it keeps collecting with the deployed version meanwhile (learner)."""
    actor_only: bool = False
    learner_only: bool = False

    method: ClassVar[str] = ""  # the subcommand, for the actor process

    def run(self) -> None:
        if self.actor_only and self.learner_only:
            raise ValueError("--actor-only and --learner-only exclude each other (give neither to run both here)")
        if self.actor_only:
            self._actor()
            return
        print(json.dumps({"work_dir": str(self.work_dir), "rounds": self.learn()}))

    def learn(self, actor_log: Path | None = None) -> list[dict]:
        """The learner here and, unless ``learner_only``, the actor as a child process (its output to ``actor_log``
        when given); returns the round log."""
        if not self.demos.exists():
            raise FileNotFoundError(f"--demos {self.demos}: no such dataset (reflexlab demos writes one)")
        with contextlib.ExitStack() as stack:
            if actor_log is not None:
                actor_log.parent.mkdir(parents=True, exist_ok=True)
            out = None if actor_log is None else stack.enter_context(actor_log.open("a"))
            actor = None if self.learner_only else self._start_actor(out)
            try:
                rows = self._learner()
                if actor is not None:  # the learner said it is done: the actor stops at its next episode boundary
                    actor.wait(timeout=self.episode_time_s + 60)
            finally:
                if actor is not None and actor.poll() is None:  # Ctrl-C here: the episode in flight is discarded
                    actor.send_signal(signal.SIGINT)
                    actor.wait(timeout=60)
        return rows

    def _start_actor(self, out: IO[str] | None) -> subprocess.Popen:
        """The actor as its own process, given what the robot side needs (the learner's settings stay here)."""
        argv = [sys.executable, "-m", "reflexlab.cli", "rl", self.method, "--actor-only"]
        for name in ("work_dir", "task", "robot", "intervener", "episode_time_s", "seed"):
            argv += [f"--{name.replace('_', '-')}", str(getattr(self, name))]
        return subprocess.Popen(argv, stdout=out, stderr=out)

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

        initial = self._initial()
        update, rounds = self._update()
        options = LearnerOptions(
            rounds=rounds,
            episodes_per_round=self.episodes_per_round,
            demos=self.demos,
            update=update,
            sampling_steps=self.sampling_steps,
            paced=self.paced,
            **self._chains(update),
        )
        store = PolicyStore(self.work_dir / "policies")
        return run_learner(self.work_dir / "rollouts", store, self.work_dir / "learner", initial, options)

    def _initial(self) -> Path:
        """The checkpoint round 1 starts from."""
        from policies.checkpoint import resolve_checkpoint

        if self.initial is None:
            raise ValueError("the learner needs --initial, the policy to start from (a bc run or checkpoint)")
        return resolve_checkpoint(Path(self.initial))

    def _update(self) -> tuple[RoundUpdate, int]:
        """The method's round update and how many rounds it runs."""
        raise NotImplementedError(f"{type(self).__name__} names no round update")

    def _chains(self, update: RoundUpdate) -> dict[str, Any]:
        """`LearnerOptions.chain` and ``explore_rounds`` for a method whose rounds train on recorded chains."""
        return {}

    def _selection(self, k: int, critic_steps: int) -> SelectionConfig:
        """Critic-guided picks of ``k`` proposals drawn with the deployed sampler's steps (select, habc --select-k)."""
        from policies.rl.iql import IqlConfig
        from policies.rl.selection import SelectionConfig

        iql = IqlConfig(steps=critic_steps)
        return SelectionConfig(k=k, iql=iql, sampling_steps=self.sampling_steps, seed=self.seed)


@dataclass(frozen=True)
class Habc(_RealWorldRl):
    """HABC: advantage-weighted BC from the robot's own episodes, outcome credit only to what the policy executed.

    Each round collects ``episodes-per-round`` episodes with the deployed version, fits the viability and
    efficiency critics, fine-tunes the policy with per-step weights and deploys it (`policies.rl.habc` says how).
    """

    work_dir: Path = Path("runs/rl/habc")
    """rollouts/, policies/ and learner/ live here (shared by actor and learner)."""
    rounds: int = 5
    update_steps: int = 2000
    """fine-tune steps per round."""
    update_lr: float = 1e-4
    """fine-tune peak learning rate (warm-up, cosine decay; the imitation policy trained at a 3e-4 peak)."""
    critic_steps: int = 2000
    """optimiser steps per critic fit."""
    critics: Literal["two", "one"] = "two"
    """one: the single-critic advantage-weighted BC baseline (viability only, no gate)."""
    aware: bool = True
    """intervention-aware credit; --no-aware is the ablation (outcomes cross intervention boundaries)."""
    select_k: int = 0
    """> 0: each round also trains on the best of this many of the policy's chunks at every state of the episodes
    and demonstrations, as IQL critics rank them (policies.rl.selection); 0: off."""
    select_critic_steps: int = 3000
    """optimiser steps of the selection's IQL critics per round."""

    method: ClassVar[str] = "habc"  # every round also trains on --demos (HabcWeighting.demo_weight)

    def _update(self) -> tuple[RoundUpdate, int]:
        from policies.generative.train import TrainConfig
        from policies.rl.critics import CriticConfig
        from policies.rl.habc import HabcConfig, HabcRound

        train = TrainConfig(max_steps=self.update_steps, lr=self.update_lr, warmup_steps=100, checkpoint_every=10**9)
        critic = CriticConfig(steps=self.critic_steps)
        selection = self._selection(self.select_k, self.select_critic_steps) if self.select_k > 0 else None
        config = HabcConfig(
            critic=critic, train=train, aware=self.aware, critics=self.critics, demos=self.demos, selection=selection
        )
        return HabcRound(config), self.rounds


@dataclass(frozen=True)
class Select(_RealWorldRl):
    """Critic-guided self-distillation: each round IQL critics, fit on the demonstrations and every episode so far,
    pick the best of ``k`` of the policy's chunks at every state, and the policy is fine-tuned on those picks beside
    the demonstrations (`policies.rl.selection`, `policies.rl.self_distill`)."""

    work_dir: Path = Path("runs/rl/select")
    """rollouts/, policies/ and learner/ live here (shared by actor and learner)."""
    rounds: int = 5
    k: int = 16
    """chunks the policy proposes per state."""
    update_steps: int = 1000
    """fine-tune steps per round."""
    update_lr: float = 1e-4
    critic_steps: int = 3000
    """optimiser steps of the IQL critics per round."""
    head: bool = True
    """after the rounds, one more distils the last policy into the one-step consistency head the robot serves
    (policies.rl.head); --no-head: the multi-step policy stays deployed."""
    head_steps: int = HEAD_STEPS
    """optimiser steps of the head."""

    method: ClassVar[str] = "select"

    def _update(self) -> tuple[RoundUpdate, int]:
        from policies.generative.train import TrainConfig
        from policies.rl.head import ThenHead, head_train
        from policies.rl.self_distill import SelectConfig, SelectRound

        train = TrainConfig(max_steps=self.update_steps, lr=self.update_lr, warmup_steps=100, checkpoint_every=10**9)
        selection = self._selection(self.k, self.critic_steps)
        update = SelectRound(SelectConfig(self.demos, selection, train=train))
        if not self.head:
            return update, self.rounds
        return ThenHead(update, self.rounds, self.demos, head_train(self.head_steps), self.seed), self.rounds + 1


@dataclass(frozen=True)
class Rl100(_RealWorldRl):
    """RL-100: imitation, offline RL rounds gated by offline policy evaluation, online RL rounds, a one-step head.

    ``il`` trains a diffusion policy on ``--demos`` (skipped when ``--initial`` names one); every later round collects
    ``episodes-per-round`` episodes with the deployed version and runs its stage (`policies.rl.rl100` says how); the
    ``distill`` round deploys the consistency head, exported with one sampling step.
    """

    work_dir: Path = Path("runs/rl/rl100")
    """rollouts/, policies/ and learner/ live here (shared by actor and learner)."""
    stages: tuple[Literal["il", "offline", "online", "distill"], ...] = ("il", "offline", "online", "distill")
    """the stages to run, in this order."""
    offline_rounds: int = 3
    online_rounds: int = 1
    il_steps: int = 10000
    """optimiser steps of the imitation policy (il)."""
    ppo_iterations: int = 200
    """PPO iterations over the denoising chain per round."""
    ope_every: int = 50
    """PPO iterations between offline policy evaluations (offline rounds)."""
    ppo_lr: float = 1e-5
    """offline PPO learning rate (online: 3e-6)."""
    ppo_target_kl: float | None = TARGET_KL
    """stop a PPO iteration's epochs once a minibatch's KL to the sampling policy passes 1.5x this (None: no limit)."""
    max_action_shift: float | None = MAX_ACTION_SHIFT
    """trust region: the most a round's PPO may move the executed actions from the deployed policy's (data's action
    std, mean RMS over fixed windows); the iteration that crosses it is undone and PPO ends (None: no bound)."""
    ppo_bc_weight: float = 0.0
    """weight of the policy's diffusion loss on the demonstrations in every PPO minibatch (an anchor to the data)."""
    ppo_advantage: Literal["critics", "random"] = "critics"
    """what points PPO: the critics (RL-100), or random: the control, N(0, 1) advantages through the same rounds,
    which a gain must beat to count as learning (policies.rl.rl100.Rl100Config.advantage)."""
    critic_steps: int = 3000
    """optimiser steps of the IQL critics per round."""
    dynamics_steps: int = 3000
    """optimiser steps of the OPE dynamics ensemble per round."""
    distill_steps: int = HEAD_STEPS
    """optimiser steps of the consistency head (distill)."""
    online_epochs: int = 10
    """PPO passes over the chains the robot ran, per online round."""
    gae_lambda: float = 0.95
    """GAE's lambda for the online stage's advantages."""
    progress_weight: float = 0.0
    """online returns shaped by the task's progress (its reward in [0, 1]): a segment ends at (outcome + w progress)
    / (1 + w); 0: the outcome alone (policies.rl.online_chains.returns_and_values)."""

    method = "rl100"

    def _initial(self) -> Path:
        """--initial, or the imitation policy trained here on the demonstrations (once: a rerun reuses it)."""
        if self.initial is not None or "il" not in self.stages:
            return super()._initial()
        from policies.imitation import train_bc_run
        from reflexlab.io import write_json_atomically

        done = self.work_dir / "learner" / "il.json"
        if done.exists():
            return Path(json.loads(done.read_text())["checkpoint"])
        checkpoint = train_bc_run("diffusion", self.demos, done.parent / "il", self.il_steps, None, self.seed)
        write_json_atomically(done, {"checkpoint": str(checkpoint), "steps": self.il_steps})
        return checkpoint

    def _update(self) -> tuple[RoundUpdate, int]:
        import dataclasses

        from policies.rl.iql import IqlConfig
        from policies.rl.ope import DynamicsConfig
        from policies.rl.rl100 import Rl100Config, Rl100Round

        base = Rl100Config(demos=self.demos)
        limits = {"target_kl": self.ppo_target_kl, "bc_weight": self.ppo_bc_weight}
        config = Rl100Config(
            demos=self.demos,
            offline_rounds=self.offline_rounds if "offline" in self.stages else 0,
            online_rounds=self.online_rounds if "online" in self.stages else 0,
            distill="distill" in self.stages,
            iql=IqlConfig(steps=self.critic_steps),
            dynamics=DynamicsConfig(steps=self.dynamics_steps),
            offline_ppo=dataclasses.replace(base.offline_ppo, lr=self.ppo_lr, **limits),
            online_ppo=dataclasses.replace(base.online_ppo, **limits),
            ppo_iterations=self.ppo_iterations,
            ope_every=self.ope_every,
            max_action_shift=self.max_action_shift,
            sampling_steps=self.sampling_steps,
            distill_train=dataclasses.replace(base.distill_train, max_steps=self.distill_steps),
            advantage=self.ppo_advantage,
            online_epochs=self.online_epochs,
            gae_lambda=self.gae_lambda,
            progress_weight=self.progress_weight,
            chain=dataclasses.replace(base.chain, sampling_steps=self.sampling_steps),
            seed=self.seed,
        )
        if config.rounds == 0:
            raise ValueError(f"--stages {' '.join(self.stages)}: no learner round to run (offline, online, distill)")
        return Rl100Round(config), config.rounds

    def _chains(self, update: RoundUpdate) -> dict[str, Any]:
        """Online rounds train on the chains the robot ran: every multi-step version is a chain sampler."""
        from policies.rl.rl100 import Rl100Round

        assert isinstance(update, Rl100Round)
        config = update.config
        return {"chain": config.chain, "explore_rounds": config.online_round_numbers} if config.online_rounds else {}


def _steps(task: str, seconds: float) -> int:
    from sim.registry import get_task

    return max(1, round(seconds * get_task(task).spec().control_rate_hz))


Method = Annotated[
    Annotated[Habc, tyro.conf.subcommand("habc", prefix_name=False)]
    | Annotated[Select, tyro.conf.subcommand("select", prefix_name=False)]
    | Annotated[Rl100, tyro.conf.subcommand("rl100", prefix_name=False)],
    tyro.conf.OmitArgPrefixes,
]


def rl(method: Method) -> None:
    """Real-world RL from the robot's own episodes, actor and learner apart: habc, select or rl100.

    Args:
        method: the learning method and its settings.
    """
    method.run()
