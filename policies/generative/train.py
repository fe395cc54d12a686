"""Training loops for generative policies: teachers from demonstrations, one-step students from teachers.

Dataset- and task-agnostic: a loop gets episodes ({"obs", "action"} arrays), the Spec as JSON
(whose horizons shape the windows and which every checkpoint records) and a `TrainConfig`. The
optimiser is Diffusion Policy's (AdamW, betas (0.95, 0.999), wd 1e-6, cosine schedule with 500
warm-up steps, batch 256, EMA) except the learning rate: 3e-4 by default, not the paper's 1e-4 (for
~5000 epochs), because runs on CPUs are ~30× shorter. Batches are drawn uniformly with replacement, so runs
are sized in optimiser steps, not epochs, and a time budget can stop one anywhere. Progress goes
to stderr (tqdm), scalars to TensorBoard event files in the run directory, and checkpoints
(``model_<step>.pt``, written atomically) every ``checkpoint_every`` steps and at the end.
Students train on `TeacherSamples` drawn once from the teacher, teachers on `ChunkWindows`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from policies.generative.consistency import TEACHER_STEPS, chunk_step_weights, distillation_loss
from policies.generative.dagger import DaggerConfig, Labels, visited_states
from policies.generative.data import ChunkWindows
from policies.generative.ema import EMA
from policies.generative.methods import FROM_DATA, METHODS, STUDENTS, Method
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.policy import GenerativePolicy, PolicyConfig, PolicyOptions, make_student
from policies.generative.teacher_samples import TeacherSamples
from reflexlab.io import file_sha256
from reflexlab.spec import Spec

Episodes = Sequence[Mapping[str, Any]]
Loss = tuple[torch.Tensor, dict[str, float]]
LossFn = Callable[..., Loss]


class Batches(Protocol):
    """What the loop draws from: `ChunkWindows` (obs, actions) or `TeacherSamples` (obs, noise, chunk), each
    followed by the camera frames (B, To, K, 3, H, W) when the policy has cameras."""

    def __len__(self) -> int: ...

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


@dataclass(frozen=True)
class TrainConfig:
    """One training run. ``policy`` sets the network and method options of a policy trained from data;
    a student copies its teacher's network and takes only the method options (meanflow_*,
    dispersive_*) from here; ``dagger`` adds rounds of training on states the student visits.
    Training stops at ``max_steps`` or after ``time_budget_s``, whichever comes first; the
    learning-rate schedule always spans ``max_steps``. ``device`` holds the
    networks and each batch (the episodes stay in CPU memory); checkpoints load on any device.
    """

    method: Method = "diffusion"
    max_steps: int = 50_000
    time_budget_s: float | None = None
    batch_size: int = 256
    lr: float = 3e-4
    betas: tuple[float, float] = (0.95, 0.999)
    weight_decay: float = 1e-6
    warmup_steps: int = 500
    ema_max_decay: float = 0.9999
    student_ema_decay: float = 0.95
    teacher_steps: int = TEACHER_STEPS
    teacher_samples_per_window: int = 8
    unexecuted_step_weight: float = 0.1  # students only: see `consistency.chunk_step_weights`
    dagger: DaggerConfig = field(default_factory=DaggerConfig)
    seed: int = 0
    device: str = "cpu"
    checkpoint_every: int = 5000
    log_every: int = 100
    progress: bool = True
    policy: PolicyOptions = field(default_factory=PolicyOptions)


def train_teacher(episodes: Episodes, cfg: TrainConfig, run_dir: Path, spec_json: str) -> Path:
    """Train a policy from demonstrations (diffusion or flow teacher, or MeanFlow from scratch as in
    DMPO's pretraining); returns the final checkpoint, whose EMA weights are the ones to use."""
    if cfg.method not in FROM_DATA:
        raise ValueError(f"train_teacher trains {', '.join(FROM_DATA)}; a {cfg.method} student needs distill_student")
    spec = Spec.from_json(spec_json)
    windows = _windows(episodes, spec)
    torch.manual_seed(cfg.seed)
    pcfg = PolicyConfig(
        cfg.method, windows.obs_dim, windows.action_dim, spec.observation_horizon, spec.action_chunk, cfg.policy
    )
    _check_images(windows, cfg.policy, spec)
    policy = GenerativePolicy(pcfg, MinMaxNormalizer.fit(windows.obs), MinMaxNormalizer.fit(windows.action))
    policy.to(cfg.device)
    ema = EMA(policy, max_decay=cfg.ema_max_decay)
    extra = {"spec": spec.to_dict(), "train_config": dataclasses.asdict(cfg), "role": "teacher"}

    def camera_loss(obs: torch.Tensor, actions: torch.Tensor, images: torch.Tensor) -> Loss:
        return policy.loss(obs, actions, images=images)

    loss_fn = camera_loss if cfg.policy.image_keys else policy.loss  # state only: exactly as before cameras
    return _fit(policy, loss_fn, windows, ema, cfg, Path(run_dir), extra)


class WeightedWindows:
    """`ChunkWindows` with a weight per window (per current step), drawn with it: (obs, action, weight[, images])."""

    def __init__(self, windows: ChunkWindows, weights: torch.Tensor) -> None:
        if weights.shape != (len(windows),) or not torch.isfinite(weights).all() or (weights < 0).any():
            raise ValueError(f"need one finite weight >= 0 per step ({len(windows)}), got {tuple(weights.shape)}")
        self.windows, self.weights = windows, weights.float()

    def __len__(self) -> int:
        return len(self.windows)

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        obs, action, *images = self.windows.gather(idx)
        return (obs, action, self.weights[idx], *images)


class WeightedChunks:
    """(obs window, chunk, weight) triples that were not cut from an episode: critic-guided picks
    (`policies.rl.selection`). Drawn as `WeightedWindows` is: (obs (B, To, n), action (B, H, A), weight (B,))."""

    def __init__(self, obs: Any, action: Any, weights: Any) -> None:
        self.obs, self.action = torch.as_tensor(obs, dtype=torch.float32), torch.as_tensor(action, dtype=torch.float32)
        self.weights = torch.as_tensor(weights, dtype=torch.float32)
        n = len(self.obs)
        if self.obs.ndim != 3 or self.action.ndim != 3 or len(self.action) != n or self.weights.shape != (n,):
            raise ValueError(
                f"need obs (N, To, n), chunks (N, H, A) and weights (N,), got {tuple(self.obs.shape)}, "
                f"{tuple(self.action.shape)}, {tuple(self.weights.shape)}"
            )
        finite = all(bool(torch.isfinite(x).all()) for x in (self.obs, self.action, self.weights))
        if not finite or (self.weights < 0).any():
            raise ValueError("chunk targets must be finite with weights >= 0")

    def __len__(self) -> int:
        return len(self.obs)

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.obs[idx], self.action[idx], self.weights[idx]


class ConcatBatches:
    """Several `Batches` drawn from as one: index i < len(first) is the first's, and so on."""

    def __init__(self, *parts: Batches) -> None:
        self.parts = [p for p in parts if len(p)]
        self.ends = torch.cumsum(torch.tensor([len(p) for p in self.parts]), 0)

    def __len__(self) -> int:
        return int(self.ends[-1])

    def gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        which = torch.bucketize(idx, self.ends, right=True)
        drawn = [
            part.gather(idx[which == i] - (self.ends[i - 1] if i else 0))
            for i, part in enumerate(self.parts)
            if (which == i).any()
        ]
        return tuple(torch.cat(column) for column in zip(*drawn, strict=True))


def finetune_weighted(
    checkpoint: Path,
    episodes: Episodes,
    weights: Any,
    cfg: TrainConfig,
    run_dir: Path,
    extra: dict[str, Any],
    targets: WeightedChunks | None = None,
) -> Path:
    """Go on training a policy from data (diffusion, flow, MeanFlow) with a weight per step of ``episodes``.

    Advantage-weighted BC (HABC, `policies.rl.habc`): ``weights`` holds one weight per step, the episodes' steps in
    order; ``targets``, chunks chosen for given windows (`policies.rl.selection`), are drawn beside them. Training
    starts from the checkpoint's raw weights with a fresh EMA (its warm-up follows the new weights from the first
    step); the observation and action normalisers are kept, so the deployed action range does not move under a
    robot. ``extra`` is stored with the checkpoint beside the original's Spec.
    """
    policy, stored = GenerativePolicy.load(checkpoint, use_ema=False)
    if policy.objective is None:
        raise ValueError(f"{checkpoint} is a {policy.method} student: fine-tune the policy it was distilled from")
    spec = Spec.from_dict(stored["spec"])
    windows = _windows(episodes, spec)
    _check_images(windows, policy.cfg.options, spec)
    batches: Batches = WeightedWindows(windows, torch.as_tensor(weights))
    if targets is not None:
        if windows.images is not None:
            raise ValueError("chunk targets carry no camera frames: a policy with cameras trains on episodes only")
        batches = ConcatBatches(batches, targets)
    torch.manual_seed(cfg.seed)
    policy.train().requires_grad_(True).to(cfg.device)
    ema = EMA(policy, max_decay=cfg.ema_max_decay)

    def loss_fn(obs: torch.Tensor, actions: torch.Tensor, w: torch.Tensor, images: torch.Tensor | None = None) -> Loss:
        return policy.loss(obs, actions, images=images, sample_weights=w)

    info = {**stored, **extra, "role": stored.get("role", "teacher"), "finetuned_from": str(checkpoint)}
    return _fit(policy, loss_fn, batches, ema, cfg, Path(run_dir), info)


def distill_student(
    teacher_ckpt: Path,
    episodes: Episodes,
    cfg: TrainConfig,
    run_dir: Path,
    spec_json: str,
    init: Path | None = None,
) -> Path:
    """Train a one-step student of a teacher checkpoint on the observations of ``episodes``.

    The teacher's Spec must equal the dataset's (``spec_json``): a `SpecMismatchError` names the
    first field that differs. The student starts as `make_student` says. Both learn from the
    teacher's K-step samples (its EMA weights, ``cfg.teacher_steps``), ``cfg.teacher_samples_per_window``
    noise draws per window, drawn once and kept beside the teacher (`TeacherSamples.load_or_draw`):
    ``consistency`` regresses its one step onto them with a fixed-decay EMA; ``meanflow`` learns the
    average velocity of each (noise, chunk) pair's straight path, with the teacher-schedule EMA.
    Then ``cfg.dagger.rounds`` DAgger rounds (`dagger`): the teacher's samples at the states the
    student visits join the set, and training goes on for ``cfg.dagger.steps`` per round.

    ``init``: start from this student checkpoint (of the same method and teacher) instead of the
    teacher's weights; with ``cfg.max_steps`` = 0 only the DAgger rounds run.
    """
    if cfg.method not in STUDENTS:
        raise ValueError(f"distill_student trains {' or '.join(STUDENTS)}, not {cfg.method}")
    teacher_ckpt = Path(teacher_ckpt)
    teacher, teacher_extra = GenerativePolicy.load(teacher_ckpt)
    spec = Spec.from_json(spec_json)
    # The execution horizon is how a chunk is executed, not what the network reads or outputs: a student may differ.
    teacher_spec = dataclasses.replace(Spec.from_dict(teacher_extra["spec"]), execution_horizon=spec.execution_horizon)
    spec.check_compatible(teacher_spec, context=f"teacher {teacher_ckpt.name}")
    windows = _windows(episodes, spec)
    _check_images(windows, teacher.cfg.options, spec)
    torch.manual_seed(cfg.seed)
    teacher.requires_grad_(False).to(cfg.device)
    teacher_sha256 = file_sha256(teacher_ckpt)
    cfg = dataclasses.replace(cfg, dagger=cfg.dagger.for_student(cfg.method, cameras=bool(teacher.image_keys)))
    if cfg.dagger.rounds and teacher.image_keys:
        raise ValueError(f"DAgger rounds are for state-only students; this teacher reads {list(teacher.image_keys)}")
    if cfg.max_steps < 1 and cfg.dagger.rounds < 1:
        raise ValueError("nothing to train: max_steps is 0 and there are no DAgger rounds")
    if init is None:
        student, init_ema, init_step, before = make_student(teacher, cfg.method, cfg.policy), None, 0, Labels()
    else:
        student, init_ema, init_step, before = _init_student(Path(init), cfg.method, teacher_sha256)
    student.to(cfg.device)
    samples, cached = TeacherSamples.load_or_draw(
        teacher,
        teacher_sha256,
        windows,
        cfg.teacher_samples_per_window,
        cfg.teacher_steps,
        teacher_ckpt.parent / "teacher_samples",
        seed=cfg.seed,
        device=cfg.device,
        progress=cfg.progress,
    )
    weights = None
    if cfg.unexecuted_step_weight != 1.0:
        weights = chunk_step_weights(
            spec.action_chunk, spec.observation_horizon, spec.execution_horizon, cfg.unexecuted_step_weight
        ).to(cfg.device)
    if METHODS[cfg.method].objective is None:  # a one-call generator: consistency distillation
        ema = EMA(student, fixed_decay=cfg.student_ema_decay)

        def loss_fn(
            obs: torch.Tensor, noise: torch.Tensor, chunk: torch.Tensor, images: torch.Tensor | None = None
        ) -> Loss:
            return distillation_loss(student, obs, noise, chunk, images, weights)

    else:
        ema = EMA(student, max_decay=cfg.ema_max_decay)

        def loss_fn(
            obs: torch.Tensor, noise: torch.Tensor, chunk: torch.Tensor, images: torch.Tensor | None = None
        ) -> Loss:
            return student.loss(obs, chunk, noise, images, weights)

    if init_ema is not None:
        ema.model.load_state_dict(init_ema)
        ema.updates = init_step  # the decay schedule goes on where the run it continues left it
    extra = {
        "spec": spec.to_dict(),
        "train_config": dataclasses.asdict(cfg),
        "role": "student",
        "teacher": str(teacher_ckpt),
        "teacher_sha256": teacher_sha256,
        "teacher_method": teacher.method,
        "teacher_samples": len(samples),
        "teacher_samples_cached": cached,
        "init": None if init is None else str(init),
        "dagger_rounds": before.rounds,
    }
    run_dir, step = Path(run_dir), init_step
    ckpt = None
    if cfg.max_steps > 0:
        ckpt = _fit(student, loss_fn, samples, ema, cfg, run_dir, extra, start_step=step)
        step += cfg.max_steps
    dg = cfg.dagger
    round_cfg = dataclasses.replace(
        cfg, max_steps=dg.steps, checkpoint_every=dg.steps, warmup_steps=min(500, dg.steps // 10 + 1)
    )
    labels = before
    for r in range(len(before.rounds), len(before.rounds) + dg.rounds):  # a run that goes on counts on
        visits = visited_states(ema.model, spec, dg.round_seeds(r), noise_seed=dg.seed + r)
        new = TeacherSamples.draw_at(
            teacher,
            visits.states,
            dg.draws_per_state,
            cfg.teacher_steps,
            seed=dg.seed + r,
            device=cfg.device,
            progress=cfg.progress,
        )
        record = {
            "round": r + 1,
            "seeds": f"{dg.round_seeds(r)[0]}..{dg.round_seeds(r)[-1]}",
            "visited_states": len(visits.states),
            "rollout_success_rate": visits.success_rate,
            "rollout_mean_max_coverage": visits.mean_max_coverage,
        }
        labels = labels.add(new, record)
        labels.save(run_dir)
        extra["dagger_rounds"] = labels.rounds
        extra["teacher_samples"] = len(samples) + len(labels)
        if cfg.progress:
            print(
                f"DAgger round {r + 1}: the student (step {step}) scored {visits.mean_max_coverage:.3f} / "
                f"{visits.success_rate:.2f} on {dg.episodes} rollouts; {len(visits.states)} visited states "
                f"labelled, {len(samples) + len(labels)} samples",
                file=sys.stderr,
            )
        # Each round's batches and noise come from their own seed, not from wherever the stream stood: a round
        # run in this process and the same round run from the saved checkpoint (``init``) train identically.
        torch.manual_seed(cfg.seed * 1_000_003 + dg.seed + r)
        ckpt = _fit(student, loss_fn, samples + labels.samples, ema, round_cfg, run_dir, extra, start_step=step)
        step += dg.steps
    assert ckpt is not None
    return ckpt


def _init_student(path: Path, method: str, teacher_sha256: str) -> tuple[GenerativePolicy, dict[str, Any], int, Labels]:
    """(training weights, EMA weights, step, DAgger labels so far) of a student checkpoint to go on from;
    refused unless it is a ``method`` student of this very teacher."""
    student, extra = GenerativePolicy.load(path, use_ema=False)
    averaged, _ = GenerativePolicy.load(path)
    if extra.get("role") != "student" or student.method != method:
        raise ValueError(f"{path} is a {student.method} {extra.get('role')}, not a {method} student to go on from")
    if extra.get("teacher_sha256") != teacher_sha256:
        raise ValueError(f"{path} was distilled from another teacher ({extra.get('teacher')}) than this one")
    labels = Labels.load(path.parent, extra.get("dagger_rounds", []))
    return student, averaged.state_dict(), int(extra.get("step", 0)), labels


def _windows(episodes: Episodes, spec: Spec) -> ChunkWindows:
    windows = ChunkWindows(episodes, spec.observation_horizon, spec.action_chunk)
    if windows.obs_dim != spec.policy_obs.size:
        raise ValueError(
            f"episodes have {windows.obs_dim} observation values per step but the Spec's policy group "
            f"'{spec.policy_group}' has {spec.policy_obs.size}"
        )
    if windows.action_dim != spec.action.size:
        raise ValueError(
            f"episodes have {windows.action_dim} action values per step, the Spec's action {spec.action.size}"
        )
    return windows


def _check_images(windows: ChunkWindows, options: PolicyOptions, spec: Spec) -> None:
    """The episodes' camera frames must be what the policy's options and the Spec's ``images`` say."""
    want = (len(options.image_keys), *options.image_shape) if options.image_keys else None
    if windows.image_shape != want:
        raise ValueError(
            f"the policy reads cameras {list(options.image_keys)} as (K, 3, H, W) = {want}, the episodes carry "
            f"images {windows.image_shape}"
        )
    spec_images = tuple((i.name, i.height, i.width) for i in spec.images)
    options_images = tuple((k, *options.image_size) for k in options.image_keys)
    if spec_images != options_images:
        raise ValueError(f"the Spec's images {spec_images} differ from the policy's cameras {options_images}")


def _lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))


def _fit(
    policy: GenerativePolicy,
    loss_fn: LossFn,
    batches: Batches,
    ema: EMA,
    cfg: TrainConfig,
    run_dir: Path,
    extra: dict[str, Any],
    start_step: int = 0,
) -> Path:
    """The shared loop; refuses a non-finite loss, naming the step, before it reaches the weights.

    ``start_step``: where a run that goes on (a DAgger round) counts from, for checkpoint names and logs;
    the optimiser and its learning-rate schedule start afresh over ``cfg.max_steps``.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    policy.train()
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg.warmup_steps, cfg.max_steps))
    writer = SummaryWriter(log_dir=str(run_dir))
    start, step, stopped_by = time.monotonic(), start_step, "max_steps"
    end = start_step + cfg.max_steps

    def checkpoint() -> Path:
        info = {**extra, "step": step, "elapsed_s": time.monotonic() - start, "stopped_by": stopped_by}
        return policy.save(run_dir / f"model_{step}.pt", info, ema=ema.model)

    try:
        with tqdm(total=cfg.max_steps, desc=policy.method, file=sys.stderr, disable=not cfg.progress) as bar:
            while step < end:
                batch = batches.gather(torch.randint(len(batches), (cfg.batch_size,)))
                loss, logs = loss_fn(*(x.to(cfg.device) for x in batch))
                if not torch.isfinite(loss):
                    raise FloatingPointError(
                        f"non-finite {policy.method} loss ({loss.item()}) at step {step + 1}; nothing was saved "
                        "from this step: lower the learning rate or check the episodes for NaN/inf"
                    )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                ema.update(policy)
                step += 1
                bar.update(1)
                if step % cfg.log_every == 0 or step == start_step + 1:
                    for k, v in logs.items():
                        writer.add_scalar(f"train/{k}", v, step)
                    writer.add_scalar("train/lr", sched.get_last_lr()[0], step)
                    writer.add_scalar("train/ema_decay", ema.decay(), step)
                    bar.set_postfix(loss=f"{logs['loss']:.4g}")
                if cfg.time_budget_s is not None and time.monotonic() - start >= cfg.time_budget_s:
                    stopped_by = "time_budget"
                    break
                if (step - start_step) % cfg.checkpoint_every == 0 and step < end:
                    checkpoint()
        return checkpoint()
    finally:
        writer.close()
