"""An exported policy as a step-by-step actor: one observation in, the action for this step out.

The policy node serves models against a clock (`reflexlab.chunking.ChunkExecutor` at 1 kHz); an env
loop at the control rate (`reflexlab record`, real-world RL) wants the simpler contract of
gymnasium: ``act(obs)`` once per step. A plain policy maps obs → action; a generator keeps its
observation history, samples a chunk every ``execution_horizon`` steps (receding horizon, as it
was evaluated in `policies.chunk_eval`) and plays it out.

A generator with cameras (`Spec.images`) also takes each camera's newest frame every step,
``act(obs, images)``: raw (H, W, 3) RGB at the camera's own size, resized to the size the policy was
trained at by the resize its training used (`reflexlab.images.FrameResizer`), kept as a history
beside the observations'. A camera whose frame is stale (None: the recorder's frame-age limit) makes
the step a hold: a NaN action, which the env never sends, and the plan is dropped, so the first step
with fresh frames samples a new chunk instead of finishing one planned before the robot stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from deploy.runner import OnnxGenerator, OnnxPolicy, PolicyInputError, load_model
from reflexlab.chunking import ObservationHistory
from reflexlab.images import FrameResizer
from reflexlab.spec import Spec


class StepActor:
    """``act(obs)`` (``act(obs, images)`` for a model with cameras) per control step for an exported plain policy or
    one-step generator.

    Args:
        path: the `.onnx` file.
        robot_spec: the robot's (task's) Spec; a model for anything else is refused by the loader.
        seed: seeds a generator's noise, so a session can be replayed.
    """

    def __init__(self, path: Path, robot_spec: Spec | None = None, seed: int = 0) -> None:
        self.model: OnnxPolicy | OnnxGenerator = load_model(Path(path), robot_spec)
        if isinstance(self.model, OnnxGenerator):
            self.model.rng = np.random.default_rng(seed)
        self.spec = self.model.spec
        self._resize = {i.name: FrameResizer(i.height, i.width) for i in self.spec.images}
        self.reset()

    @property
    def cameras(self) -> tuple[str, ...]:
        """The cameras whose frames `act` needs every step (none for a state-only model)."""
        return tuple(self._resize)

    @property
    def noise_size(self) -> int:
        """Floats of noise per chunk (`OnnxGenerator.noise_size`); 0 for a plain policy, which draws none."""
        return self.model.noise_size if isinstance(self.model, OnnxGenerator) else 0

    def reset(self) -> None:
        """Forget the episode's history and plan."""
        s = self.spec
        self._history = ObservationHistory(s.observation_horizon, self.model.obs_size)
        self._frames = {i.name: ObservationHistory(s.observation_horizon, i.shape, np.uint8) for i in s.images}
        self._plan: list[np.ndarray] = []
        self._noise: np.ndarray | None = None

    def noise_row(self, size: int) -> np.ndarray:
        """The noise of the chunk sampled at the last `act`, flattened (x_K's, then a chain's steps') and zero-padded
        to ``size``; all zeros at a step that played out an earlier chunk. A recorder's ``policy.noise`` column:
        with the version's policy it replays the chunk (RL-100's online stage), and a row of zeros says "no chunk
        began here" (a draw is never exactly 0)."""
        row = np.zeros(size, dtype=np.float32)
        if self._noise is not None:
            if self._noise.size > size:
                raise ValueError(
                    f"model {self.model.path.name} draws {self._noise.size} noise values per chunk; the dataset's "
                    f"policy.noise column holds {size}: record it into a new dataset"
                )
            row[: self._noise.size] = self._noise.ravel()
        return row

    def act(self, obs: np.ndarray, images: Mapping[str, np.ndarray | None] | None = None) -> np.ndarray:
        """The raw action for this step (the Spec's action units); all NaN (hold) when a camera's frame is None.

        ``images``: for a model with cameras, {camera: its newest frame, (H, W, 3) uint8 RGB at any size, or None
        when it has none fresh}; a state-only model takes none.
        """
        if isinstance(self.model, OnnxPolicy):
            return np.asarray(self.model.act(obs), dtype=np.float64)
        frames = self._checked_frames(images)
        if frames is None:
            self._plan = []
            self._noise = None
            return np.full(self.spec.action.size, np.nan)
        history = self._history.push(np.asarray(obs, dtype=np.float32))
        seen = {name: self._frames[name].push(frame) for name, frame in frames.items()}
        self._noise = None
        if not self._plan:
            s = self.spec
            chunk = self.model.sample(history, images=seen)
            self._noise = self.model.last_noise
            first = s.observation_horizon - 1
            self._plan = list(chunk[first : first + s.execution_horizon].astype(np.float64))
        return self._plan.pop(0)

    def _checked_frames(self, images: Mapping[str, np.ndarray | None] | None) -> dict[str, np.ndarray] | None:
        """Each camera's frame at the policy's size, channel-first; None when one has no fresh frame."""
        images = dict(images or {})
        extra = sorted(set(images) - set(self._resize))
        if extra:
            reads = ", ".join(self.cameras) or "none (state only)"
            raise PolicyInputError(f"images for unknown camera(s) {extra}; model {self.model.path.name} reads: {reads}")
        missing = [c for c in self.cameras if c not in images]
        if missing:
            raise PolicyInputError(
                f"model {self.model.path.name} reads cameras {list(self.cameras)} every step; no frame given for "
                f"{missing} (pass each camera's newest frame, or None when it has no fresh one)"
            )
        if any(images[c] is None for c in self.cameras):
            return None
        out = {}
        for c in self.cameras:
            try:
                out[c] = self._resize[c](images[c])
            except ValueError as e:
                raise PolicyInputError(f"camera {c!r}: {e}") from None
        return out
