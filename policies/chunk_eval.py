"""Evaluate an action-chunk policy on a demonstration task: seeded episodes, both published scores.

Task-agnostic: the task's scene env (`TaskEntry.task_class` of a ``"demo"`` task) steps a batch of
scenes and reports ``episode_metrics()``; a *sampler* maps observation histories (N, To, n) and
noise (N, H, A) to action chunks (N, H, A). Diffusion Policy's execution: the last To
observations (padded at the start by repeating the first), a chunk, its actions To−1 …
To−1+Ta−1 executed open loop, then re-plan. The noise comes from one seeded generator, so two
policies evaluated with the same seeds see the same initial states *and* the same noise draws.

A policy whose Spec lists ``images`` also gets camera frames: the scene env renders each named MJCF
camera at every control step (``env.render(camera, height, width)``), and the sampler is called as
``sampler(obs, noise, images)`` with images {camera: (N, To, 3, H, W) uint8}, padded at the start as
the observations are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from reflexlab.chunking import ChunkConfig, ChunkExecutor
from reflexlab.spec import ImageInput, Spec
from sim.registry import get_task, require_kind
from sim.render import write_video

Sampler = Callable[..., np.ndarray]  # (obs, noise) → chunk, or (obs, noise, images) for a Spec with cameras


@dataclass
class EvalResult:
    max_coverage: np.ndarray  # (episodes,) each episode's best score
    success: np.ndarray  # (episodes,) bool
    steps: np.ndarray  # (episodes,) control steps used
    replans: int

    def summary(self) -> dict[str, float]:
        """Both published scores, with their standard errors over the episodes (what one seed's luck is worth)."""
        n = len(self.max_coverage)
        p = float(self.success.mean())
        return {
            "mean_max_coverage": float(self.max_coverage.mean()),
            "mean_max_coverage_sem": float(self.max_coverage.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0,
            "success_rate": p,
            "success_rate_sem": float(np.sqrt(p * (1 - p) / n)),
            "mean_steps": float(self.steps.mean()),
        }


def evaluate_chunks(
    sampler: Sampler,
    spec: Spec,
    seeds: list[int],
    noise_seed: int = 0,
    episode_steps: int | None = None,
    progress: bool = False,
    desc: str = "eval",
    video: Path | None = None,
    video_camera: str = "top",
    chunking: ChunkConfig | None = None,
    on_plan: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> EvalResult:
    """Run one episode per seed (all in one batch) with ``sampler`` choosing actions.

    With ``video``, the first seed's episode is rendered from the task's ``video_camera`` at the
    control rate into an MP4 (320×240; software EGL renders one frame in ~10–40 ms here).
    ``chunking`` with ``execution="ensemble"`` executes chunks as the policy node's temporal
    ensembling does (the same `ChunkExecutor`, one per scene): a chunk every control step, each
    step's action the weighted mean of the last Ta chunks' actions for it. Otherwise each chunk's Ta
    actions run open loop (Diffusion Policy's execution; the node's receding mode at Ta = 1).
    ``on_plan(histories (N, To, n), running (N,) bool)`` is called before each chunk is sampled:
    DAgger collects the states a policy visits with it.
    """
    entry = get_task(spec.task)
    require_kind(entry, "demo", "chunk-policy evaluation")
    entry.spec().check_compatible(spec.task_interface(), context=f"policy vs task {spec.task}")
    env = entry.task_class(len(seeds), episode_steps or entry.config().episode_steps)
    if spec.images and not hasattr(env, "render"):
        raise ValueError(f"the policy reads cameras but task {spec.task}'s scene env renders none")
    to, h, ta, a = spec.observation_horizon, spec.action_chunk, spec.execution_horizon, spec.action.size
    rng = np.random.default_rng(noise_seed)
    obs = env.reset(seeds)
    history = np.repeat(obs[:, None], to, axis=1)
    frames = {c.name: np.repeat(_view(env, c)[:, None], to, axis=1) for c in spec.images}
    replans = 0
    ensemble = chunking is not None and chunking.execution == "ensemble"
    executors = [ChunkExecutor.from_spec(spec, spec.control_rate_hz, chunking) for _ in seeds] if ensemble else []
    film: list[np.ndarray] = []
    renderer = _Filming(env, video_camera) if video is not None else None
    if renderer is not None:
        film.append(renderer.frame())
    bar = tqdm(total=env.episode_steps, desc=desc, unit="step", disable=not progress, leave=False)
    while not env.done.all():
        noise = rng.standard_normal((len(seeds), h, a)).astype(np.float32)
        if on_plan is not None:
            on_plan(history.astype(np.float32), ~env.done)
        cams = (frames,) if spec.images else ()
        chunk = np.asarray(sampler(history.astype(np.float32), noise, *cams))
        if chunk.shape != (len(seeds), h, a) or not np.isfinite(chunk).all():
            raise ValueError(
                f"sampler returned {chunk.shape} (finite: {np.isfinite(chunk).all()}), want {(len(seeds), h, a)}"
            )
        replans += 1
        if ensemble:
            t = replans / spec.control_rate_hz  # each chunk's stamp; queried at it, an executor gives its first step
            for ex, c in zip(executors, chunk, strict=True):
                ex.add(c, t)
            actions = [np.stack([ex(t) for ex in executors]).astype(np.float32)]
        else:
            actions = [chunk[:, k] for k in range(to - 1, to - 1 + ta)]
        for action in actions:
            if env.done.all():
                break
            filming = renderer is not None and not env.done[0]
            obs, *_ = env.step(spec.action.to_targets(action))
            history = np.concatenate([history[:, 1:], obs[:, None]], axis=1)
            for c in spec.images:
                frames[c.name] = np.concatenate([frames[c.name][:, 1:], _view(env, c)[:, None]], axis=1)
            if filming:
                film.append(renderer.frame())
            bar.update(1)
    bar.close()
    if renderer is not None:
        renderer.close()
        write_video(video, film, fps=round(spec.control_rate_hz))
    m = env.episode_metrics()
    return EvalResult(m["max_coverage"], m["success"], env.steps.copy(), replans)


def _view(env: Any, camera: ImageInput) -> np.ndarray:
    """The camera's frames of every scene now, channel-first as policies take them: (N, 3, H, W) uint8."""
    return np.ascontiguousarray(env.render(camera.name, camera.height, camera.width).transpose(0, 3, 1, 2))


class _Filming:
    """Renders scene 0 of a demonstration task's batched env (its MuJoCo model and first MjData)."""

    def __init__(self, env: Any, camera: str) -> None:
        import mujoco

        self.env, self.camera = env, camera
        self.renderer = mujoco.Renderer(env.model, height=240, width=320)

    def frame(self) -> np.ndarray:
        self.renderer.update_scene(self.env.scenes[0].data, camera=self.camera)
        return self.renderer.render().copy()

    def close(self) -> None:
        self.renderer.close()
