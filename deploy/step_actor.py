"""An exported policy as a step-by-step actor: one observation in, the action for this step out.

The policy node serves models against a clock (`reflexlab.chunking.ChunkExecutor` at 1 kHz); an env
loop at the control rate (`reflexlab record`, real-world RL) wants the simpler contract of
gymnasium: ``act(obs)`` once per step. A plain policy maps obs → action; a generator keeps its
observation history, samples a chunk every ``execution_horizon`` steps (receding horizon, as it
was evaluated in `policies.chunk_eval`) and plays it out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from deploy.runner import OnnxGenerator, OnnxPolicy, load_model, require_no_cameras
from reflexlab.chunking import ObservationHistory
from reflexlab.spec import Spec


class StepActor:
    """``act(obs)`` per control step for an exported plain policy or one-step generator.

    Args:
        path: the `.onnx` file.
        robot_spec: the robot's (task's) Spec; a model for anything else is refused by the loader.
        seed: seeds a generator's noise, so a session can be replayed.
    """

    def __init__(self, path: Path, robot_spec: Spec | None = None, seed: int = 0) -> None:
        self.model: OnnxPolicy | OnnxGenerator = load_model(Path(path), robot_spec)
        require_no_cameras(self.model.spec, path, "StepActor (act(obs) takes state observations only)")
        if isinstance(self.model, OnnxGenerator):
            self.model.rng = np.random.default_rng(seed)
        self.spec = self.model.spec
        self.reset()

    @property
    def noise_size(self) -> int:
        """Floats of noise per chunk (`OnnxGenerator.noise_size`); 0 for a plain policy, which draws none."""
        return self.model.noise_size if isinstance(self.model, OnnxGenerator) else 0

    def reset(self) -> None:
        """Forget the episode's history and plan."""
        s = self.spec
        self._history = ObservationHistory(s.observation_horizon, self.model.obs_size)
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

    def act(self, obs: np.ndarray) -> np.ndarray:
        """The raw action for this step (the Spec's action units)."""
        if isinstance(self.model, OnnxPolicy):
            return np.asarray(self.model.act(obs), dtype=np.float64)
        history = self._history.push(np.asarray(obs, dtype=np.float32))
        self._noise = None
        if not self._plan:
            s = self.spec
            chunk = self.model.sample(history)
            self._noise = self.model.last_noise
            first = s.observation_horizon - 1
            self._plan = list(chunk[first : first + s.execution_horizon].astype(np.float64))
        return self._plan.pop(0)
