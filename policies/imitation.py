"""From a dataset to generative policies and back to numbers: the glue behind `reflexlab bc`,
`reflexlab distill`, `reflexlab export` (generators) and `reflexlab bench distill`.

The learning itself lives in `policies.generative` (dataset- and task-agnostic); this module
reads episodes through `reflexlab.dataset`, derives the chunked Spec a policy is trained for
(the dataset's Spec + observation/action horizons), finds checkpoints in run folders and wraps
policies as batched samplers for evaluation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.checkpoint import resolve_checkpoint
from policies.chunk_eval import evaluate_chunks
from policies.generative.dagger import DaggerConfig
from policies.generative.data import ChunkWindows
from policies.generative.methods import METHODS
from policies.generative.policy import CHECKPOINT_FORMAT, GenerativePolicy, PolicyOptions
from policies.generative.sampler import TorchSampler, flush_denormals
from policies.generative.train import TrainConfig, distill_student, train_teacher
from reflexlab.chunking import ChunkConfig
from reflexlab.dataset import IMAGE_PREFIX, Dataset, load_dataset
from reflexlab.images import FrameResizer
from reflexlab.spec import ImageInput, Spec
from sim.registry import get_task


def load_episodes(
    root: Path,
    image_keys: tuple[str, ...] = (),
    image_size: tuple[int, int] | None = None,
    spec_if_none: Spec | None = None,
) -> tuple[list[dict[str, Any]], Spec, Dataset]:
    """Episodes as {"obs", "action"} arrays plus the dataset's Spec; every problem names the episode.

    With ``image_keys``, each episode also gets "images" (T, K, 3, H, W) uint8: the decoded frames of the
    video features ``observation.images.<key>``, resized (antialiased bilinear) to ``image_size`` (H, W)
    when given and different. A camera the dataset lacks is a `ValueError` naming it and the dataset.
    ``spec_if_none``: the Spec of a dataset that records none (one written by LeRobot's own writer); its
    observation.state and action must have the Spec's sizes.
    """
    dataset = load_dataset(root)  # validates keys, shapes, NaN, empty episodes
    spec = dataset.spec or spec_if_none
    if spec is None:
        raise ValueError(
            f"{root}: the dataset records no reflexlab Spec (meta/info.json reflexlab_spec; a dataset written by "
            "LeRobot has none): name the task it was recorded on (--task)"
        )
    if dataset.spec is None:
        wanted = {"observation.state": (spec.policy_obs.size,), "action": (spec.action.size,)}
        for key, shape in wanted.items():
            if dataset.vector_features[key] != shape:
                raise ValueError(
                    f"{root}: {key} has shape {dataset.vector_features[key]}, task {spec.task}'s Spec needs {shape}"
                )
    videos = dataset.video_features
    missing = [k for k in image_keys if IMAGE_PREFIX + k not in videos]
    if missing:
        have = ", ".join(k.removeprefix(IMAGE_PREFIX) for k in videos) or "none"
        raise ValueError(
            f"{root}: the dataset has no camera {', '.join(repr(k) for k in missing)} (video feature "
            f"{IMAGE_PREFIX}{missing[0]}); its cameras: {have}. Record one (e.g. reflexlab demos --cameras "
            f"{missing[0]}) or train with the cameras it has"
        )
    episodes: list[dict[str, Any]] = []
    for i, ep in enumerate(dataset.episodes()):
        episode: dict[str, Any] = {"obs": ep["observation.state"], "action": ep["action"]}
        if image_keys:
            episode["images"] = np.stack(
                [_frames(dataset, i, IMAGE_PREFIX + k, image_size) for k in image_keys], axis=1
            )
        episodes.append(episode)
    return episodes, spec, dataset


def _frames(dataset: Dataset, episode: int, key: str, size: tuple[int, int] | None) -> np.ndarray:
    """One camera's frames of one episode as (T, 3, H, W) uint8, resized to ``size`` (H, W) if given, by the
    resize every server applies to the live camera (`reflexlab.images.FrameResizer`)."""
    frames = list(dataset.video_frames(episode, key))
    resize = FrameResizer(*(size or frames[0].shape[:2]))
    return np.stack([resize(f) for f in frames])


def camera_size(dataset: Dataset, image_keys: tuple[str, ...]) -> tuple[int, int]:
    """(H, W) of the first named camera's frames: a policy's image size when the user sets none."""
    key = IMAGE_PREFIX + image_keys[0]
    if key not in dataset.video_features:
        load_episodes(dataset.root, image_keys)  # raises the error naming the camera
    height, width, _ = dataset.video_features[key]
    return (height, width)


def chunked(
    spec: Spec, obs_horizon: int, horizon: int, execution_horizon: int, images: tuple[ImageInput, ...] = ()
) -> Spec:
    """The Spec of a chunk policy trained on a task whose own Spec is ``spec`` (reading cameras ``images``)."""
    return dataclasses.replace(
        spec,
        observation_horizon=obs_horizon,
        action_chunk=horizon,
        execution_horizon=execution_horizon,
        images=images,
    )


def is_generative(run_or_ckpt: Path) -> bool:
    """Whether a run folder / checkpoint holds a generative policy (rather than an rsl-rl PPO actor)."""

    try:
        state = torch.load(resolve_checkpoint(run_or_ckpt), map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # unreadable here: the PPO loader reports what is wrong with the file, naming it
        return False
    return isinstance(state, dict) and state.get("format") == CHECKPOINT_FORMAT


def load_generative(run_or_ckpt: Path) -> tuple[GenerativePolicy, Spec, dict[str, Any], Path]:
    """(policy with EMA weights, its chunked Spec, checkpoint extra, checkpoint path)."""
    path = resolve_checkpoint(run_or_ckpt)
    policy, extra = GenerativePolicy.load(path)
    return policy, Spec.from_dict(extra["spec"]), extra, path


def check_generative_task(run_or_ckpt: Path, task: str) -> None:
    """Refuse a generative checkpoint trained for another task than ``task``, naming the differing Spec field."""

    get_task(task).spec().check_compatible(load_generative(run_or_ckpt)[1].task_interface(), context=f"task {task}")


def observation_windows(
    dataset_root: Path, spec: Spec, count: int, seed: int = 0
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``count`` observation histories (count, To, n) drawn from a dataset, and for a Spec with cameras their
    frames {camera: (count, To, 3, H, W) uint8}: recorded inputs for export checks."""

    keys = tuple(i.name for i in spec.images)
    size = (spec.images[0].height, spec.images[0].width) if keys else None
    episodes, _, _ = load_episodes(dataset_root, keys, size)
    windows = ChunkWindows(episodes, spec.observation_horizon, spec.action_chunk)
    idx = torch.from_numpy(np.random.default_rng(seed).integers(0, len(windows), count))
    obs = windows.gather(idx)[0].numpy().astype(np.float32)
    if not keys:
        return obs, {}
    frames = windows.gather_images(idx).numpy()
    return obs, {k: np.ascontiguousarray(frames[:, :, j]) for j, k in enumerate(keys)}


def train_bc_run(
    method: str,
    dataset: Path,
    run_dir: Path,
    steps: int,
    time_budget_s: float | None,
    seed: int,
    obs_horizon: int = 2,
    horizon: int = 16,
    execution_horizon: int = 8,
    progress: bool = True,
    down_dims: tuple[int, ...] = PolicyOptions.down_dims,
    lr: float = TrainConfig.lr,
    image_keys: tuple[str, ...] = (),
    image_size: tuple[int, int] | None = None,
    batch_size: int = TrainConfig.batch_size,
    task: str | None = None,
) -> Path:
    """Train a teacher (diffusion | flow, or MeanFlow from data) on a dataset; returns its checkpoint.

    ``down_dims`` and ``lr`` default to the library's CPU-sized choices (`PolicyOptions`, `TrainConfig`
    say why).

    ``image_keys`` adds cameras (video features ``observation.images.<key>``) to the state, each
    frame resized to ``image_size`` (H, W; default: the first camera's recorded size); their frames
    are decoded into memory once (K × 3·H·W bytes per step: 28 kB at 96×96). ``task`` names the task a
    dataset without a reflexlab Spec (written by LeRobot) was recorded on.
    """

    image_keys = tuple(image_keys)
    if image_keys and image_size is None:
        image_size = camera_size(load_dataset(dataset), image_keys)
    task_spec = None if task is None else get_task(task).spec()
    episodes, spec, _ = load_episodes(dataset, image_keys, image_size, task_spec)
    images = tuple(ImageInput(k, *image_size) for k in image_keys) if image_size else ()
    spec = chunked(spec, obs_horizon, horizon, execution_horizon, images)
    options = PolicyOptions(down_dims=down_dims)
    if image_keys:
        options = dataclasses.replace(options, image_keys=image_keys, image_size=tuple(image_size))
    cfg = TrainConfig(
        method=method,
        max_steps=steps,
        time_budget_s=time_budget_s,
        seed=seed,
        progress=progress,
        checkpoint_every=max(steps // 4, 1),
        lr=lr,
        batch_size=batch_size,
        policy=options,
    )
    with flush_denormals():
        return train_teacher(episodes, cfg, run_dir, spec.to_json())


def distill_run(
    teacher: Path,
    method: str,
    dataset: Path,
    run_dir: Path,
    steps: int,
    time_budget_s: float | None,
    seed: int,
    dispersive_weight: float = PolicyOptions.dispersive_weight,
    progress: bool = True,
    samples_per_window: int = TrainConfig.teacher_samples_per_window,
    batch_size: int = TrainConfig.batch_size,
    lr: float = 1e-3,
    teacher_sampling_steps: int = TrainConfig.teacher_steps,
    unexecuted_step_weight: float = TrainConfig.unexecuted_step_weight,
    execution_horizon: int | None = 2,
    dagger: DaggerConfig | None = None,
    init: Path | None = None,
    meanflow_jump_fraction: float = PolicyOptions.meanflow_jump_fraction,
    meanflow_endpoint_weight: float = 1.0,
) -> Path:
    """Distil a one-step student (consistency | meanflow) from a teacher run on a dataset's observations.

    The student learns from ``samples_per_window`` teacher samples (DDIM / Euler with
    ``teacher_sampling_steps``) per training window, drawn once. ``lr`` is 1e-3, not the teacher's
    1e-4 to 3e-4: the student underfits the teacher's noise → chunk map (its error on held-out noise
    equals its training error), and on panda-push-t (6,000 steps, DDIM-10 targets, 50 episodes) the
    consistency student's loss ended at 0.0014 instead of 0.0020 and it scored 0.778 / 0.26
    (coverage / success) instead of 0.732 / 0.12 at 1e-4. A teacher trained for another task or
    robot than the dataset's is refused (`SpecMismatchError`). A teacher with cameras reads them
    from the dataset, resized to its size. ``execution_horizon`` (None: the teacher's) is the Ta the
    student's Spec records, which the policy node and `StepActor` execute per chunk: a one-step
    student can afford to re-plan more often than its teacher (panda-push-t scores are best at
    Ta = 2, `bench distill`). ``unexecuted_step_weight`` weighs the loss on the chunk steps that Ta
    never executes (`consistency.chunk_step_weights`): weighted 0.1 for Ta 2, a MeanFlow student
    reached 0.942 / 0.83 at Ta 2 after 11,250 steps where the unweighted one had 0.934 / 0.36 after
    12,000 (a consistency student scored the same either way, ~0.95 / 0.84). ``dagger`` adds rounds
    on the states the student visits (`policies.generative.dagger`; by default 1 for a state-only
    student); ``init`` goes on from a student run or checkpoint of the same method and teacher
    instead of starting from the teacher. A dataset without a reflexlab Spec (written by LeRobot) is read
    as recorded on the teacher's task.

    ``meanflow_endpoint_weight`` (MeanFlow, default 1): also regress the one-step jump onto the teacher's
    sample from the same noise (`meanflow.MeanFlow`), which the MeanFlow identity alone reaches only
    through rare (r ≈ 0, t ≈ 1) draws. ``meanflow_jump_fraction`` (default 0) trains that jump inside the
    MeanFlow loss instead. On panda-push-t (seed-0 student of the same teacher, 100 episodes at Ta 2,
    success after 3,750 / 7,500 steps): neither 0.73 / 0.75; endpoint term 0.81 / 0.84; jump fraction
    0.25 0.50 after 3,750 (stopped there). Over 3 training seeds at 15,000 steps (400 episodes): 0.889 ± 0.004
    with the endpoint term, 0.79 ± 0.06 without (teacher@100 0.8975).
    """

    _, teacher_spec, _, ckpt = load_generative(teacher)
    t = teacher_spec
    size = (t.images[0].height, t.images[0].width) if t.images else None
    episodes, spec, _ = load_episodes(dataset, tuple(i.name for i in t.images), size, spec_if_none=t)
    ta = t.execution_horizon if execution_horizon is None else execution_horizon
    spec = chunked(spec, t.observation_horizon, t.action_chunk, ta, t.images)
    options = PolicyOptions(
        dispersive_weight=dispersive_weight,
        meanflow_jump_fraction=meanflow_jump_fraction,
        meanflow_endpoint_weight=meanflow_endpoint_weight,
    )
    cfg = TrainConfig(
        method=method,
        max_steps=steps,
        time_budget_s=time_budget_s,
        seed=seed,
        progress=progress,
        checkpoint_every=max(steps // 4, 1),
        warmup_steps=min(500, max(steps // 10, 1)),
        teacher_samples_per_window=samples_per_window,
        teacher_steps=teacher_sampling_steps,
        batch_size=batch_size,
        lr=lr,
        unexecuted_step_weight=unexecuted_step_weight,
        dagger=dagger or DaggerConfig(rounds=None),
        policy=options,
    )
    start = None if init is None else resolve_checkpoint(Path(init))
    with flush_denormals():
        return distill_student(ckpt, episodes, cfg, run_dir, spec.to_json(), init=start)


def evaluate_generative_run(
    run_or_ckpt: Path,
    episodes: int = 100,
    seed: int = 10_000,
    noise_seed: int = 0,
    sampling_steps: int | None = None,
    execution_horizon: int | None = None,
    episode_steps: int | None = None,
    video: Path | None = None,
    progress: bool = True,
    chunking: ChunkConfig | None = None,
) -> dict[str, Any]:
    """Score one generative checkpoint on its task: ``episodes`` seeded episodes (seeds ``seed``…), both
    published scores with their standard errors (`chunk_eval.evaluate_chunks`).

    ``sampling_steps``: the policy's default when None (1 for students, 10 for teachers).
    ``execution_horizon``: actions executed per chunk (Ta); the checkpoint's Spec's when None.
    ``episode_steps``: episode length in control steps; the task's when None. ``chunking``: the
    policy node's chunk execution (receding when None; temporal ensembling over the last Ta chunks). With
    `bench distill`'s evaluation seeds (10000…) and ``noise_seed`` = the training seed, the scores
    are the bench's for that policy, so a checkpoint saved along a run can be placed on its table.
    """

    policy, spec, extra, ckpt = load_generative(run_or_ckpt)
    if execution_horizon is not None:
        spec = dataclasses.replace(spec, execution_horizon=execution_horizon)  # the Spec checks it fits
    steps = sampling_steps if sampling_steps is not None else METHODS[policy.method].default_steps
    res = evaluate_chunks(
        TorchSampler(policy, steps),
        spec,
        list(range(seed, seed + episodes)),
        noise_seed=noise_seed,
        episode_steps=episode_steps,
        progress=progress,
        desc=f"{policy.method}@{steps} Ta={spec.execution_horizon}",
        video=video,
        chunking=chunking,
    )
    return {
        "checkpoint": str(ckpt),
        "method": policy.method,
        "role": extra.get("role"),
        "sampling_steps": steps,
        "execution_horizon": spec.execution_horizon,
        "chunk_execution": (chunking or ChunkConfig()).execution,
        "episodes": episodes,
        "seeds": f"{seed}..{seed + episodes - 1}",
        "noise_seed": noise_seed,
        **res.summary(),
    }
