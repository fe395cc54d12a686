"""Run an exported reflexlab model with onnxruntime: the inference core of every policy node.

`OnnxPolicy` (obs → action) and `OnnxGenerator` (observation history + noise → action chunk) read
the Spec from the model, refuse a robot whose Spec differs (naming the field), assemble
observations from named terms in the Spec's order, check shapes and values with messages that
say what is wrong (not an onnxruntime stack trace), and turn raw actions into joint targets with
the Spec's scale and offset. Each refuses the other's kind of file and names the right loader;
`load_model` picks it from the Spec. A generator whose Spec lists ``images`` also takes camera
frames (`OnnxGenerator.sample`'s ``images``), which `deploy.step_actor` and `deploy.controller` feed
from the robot's cameras.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from reflexlab.spec import Spec


class PolicyInputError(ValueError):
    """An observation or noise the model cannot take; the message names the term or the shape."""


class ModelKindError(ValueError):
    """A generator file given to the plain-policy loader or the other way round; names the loader to use."""


class _OnnxModel:
    """What both loaders share: the Spec, the robot check, the session, term assembly and targets."""

    generator: bool  # the kind of file this loader serves (Spec.is_generator)

    def __init__(self, path: Path, robot_spec: Spec | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        from deploy.artifact import (
            CHUNK_OUTPUT_NAME,
            INPUT_NAME,
            NOISE_NAME,
            OUTPUT_NAME,
            STEP_NOISE_NAME,
            image_input_names,
            spec_of,
        )

        self.path = Path(path)
        self.spec = spec_of(self.path)  # raises with the file's name when missing/corrupt/foreign
        if self.spec.is_generator != self.generator:
            raise ModelKindError(_wrong_loader(self.path, self.spec, type(self).__name__))
        if robot_spec is not None:
            # a chunk model's horizons are its own business: the robot checks the task it was trained for
            robot_spec.task_interface().check_compatible(
                self.spec.task_interface(), context=f"model {self.path.name} vs robot"
            )
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        self._inputs = inputs = (
            [INPUT_NAME, NOISE_NAME, *image_input_names(self.spec)] if self.generator else [INPUT_NAME]
        )
        self._output = CHUNK_OUTPUT_NAME if self.generator else OUTPUT_NAME
        found = ([i.name for i in self.session.get_inputs()], [o.name for o in self.session.get_outputs()])
        if self.generator and found[0][2:3] == [STEP_NOISE_NAME]:  # a chain sampler: its steps' noise after noise
            self._inputs = inputs = [*inputs[:2], STEP_NOISE_NAME, *inputs[2:]]
        if found != (inputs, [self._output]):
            raise ValueError(
                f"model {self.path.name} has inputs {found[0]} and outputs {found[1]}; its Spec needs inputs "
                f"{inputs} and output [{self._output!r}]: re-export it with deploy.onnx_export"
            )
        group = self.spec.policy_obs
        self.obs_size = group.size
        self._slices = group.slices()
        a = self.spec.action
        self._scale = np.float64(a.scale)
        self._offset = np.asarray(a.offset, dtype=np.float64)

    def assemble(self, terms: Mapping[str, np.ndarray]) -> np.ndarray:
        """Concatenate named observation terms (physical units) in the Spec's order."""
        obs = np.empty(self.obs_size, dtype=np.float32)
        missing = [name for name in self._slices if name not in terms]
        if missing:
            raise PolicyInputError(f"observation terms missing: {', '.join(missing)}")
        for name, sl in self._slices.items():
            value = np.asarray(terms[name], dtype=np.float32).reshape(-1)
            if value.size != sl.stop - sl.start:
                raise PolicyInputError(
                    f"observation term {name!r} has {value.size} values, Spec says {sl.stop - sl.start}"
                )
            obs[sl] = value
        return obs

    def joint_targets(self, action: np.ndarray) -> np.ndarray:
        """Joint-position targets (rad) from raw actions: offset + scale * action (no limits: see `deploy.safety`)."""
        return self._offset + self._scale * np.asarray(action, dtype=np.float64)

    def _check_finite(self, x: np.ndarray, where: str = "") -> None:
        """Name the first non-finite observation term; its index counts within one observation vector."""
        if np.isfinite(x).all():
            return
        *lead, bad = np.argwhere(~np.isfinite(x))[0]
        term = next(n for n, sl in self._slices.items() if sl.start <= bad < sl.stop)
        at = f", {where.format(*lead)}" if where else ""
        raise PolicyInputError(f"observation term {term!r} is not finite (index {bad}{at})")


class OnnxPolicy(_OnnxModel):
    """An exported plain policy (obs → action) on onnxruntime's CPU provider.

    Args:
        path: the `.onnx` file written by `reflexlab export`.
        robot_spec: the robot's Spec; when given, a model for another robot is refused.
        threads: onnxruntime intra-op threads (1 keeps latency predictable beside a control loop).
    """

    generator = False

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Raw actions for observations of shape (obs_size,) or (batch, obs_size)."""
        x = np.asarray(obs, dtype=np.float32)
        single = x.ndim == 1
        if single:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != self.obs_size:
            raise PolicyInputError(
                f"observation has shape {np.shape(obs)}, expected ({self.obs_size},) or (batch, {self.obs_size})"
            )
        self._check_finite(x)
        out = self.session.run([self._output], {self._inputs[0]: x})[0]
        return out[0] if single else out


class OnnxGenerator(_OnnxModel):
    """An exported one-step generator: the last ``observation_horizon`` observations + noise → an action chunk.

    The noise is an input so that runs are reproducible: the caller passes it, or a seeded
    generator draws it (``seed`` here, or the ``rng`` of each `sample` call). A model with cameras
    (``spec.images``) takes their frames too: uint8 RGB, channel-first, one history per camera.

    Args:
        path: the `.onnx` file written by `deploy.onnx_export.export_generator`.
        robot_spec: the robot's Spec; when given, a model for another robot is refused.
        threads: onnxruntime intra-op threads.
        seed: seeds the noise drawn when `sample` gets neither noise nor an rng.
    """

    generator = True

    def __init__(self, path: Path, robot_spec: Spec | None = None, threads: int = 1, seed: int = 0) -> None:
        super().__init__(path, robot_spec, threads)
        s = self.spec
        self.history_shape = (s.observation_horizon, self.obs_size)
        self.chunk_shape = (s.action_chunk, s.action.size)
        self.image_shapes = {i.name: (s.observation_horizon, *i.shape) for i in s.images}  # per camera (To, 3, H, W)
        self.rng = np.random.default_rng(seed)
        from deploy.artifact import STEP_NOISE_NAME

        chain = {i.name: i.shape for i in self.session.get_inputs()}.get(STEP_NOISE_NAME)
        # a chain sampler's per-step noise (K, H, A); None for a generator that takes x_K's noise only
        self.step_noise_shape = None if chain is None else (int(chain[1]), *self.chunk_shape)
        self._fed: list[np.ndarray] = []  # the last call's noise inputs, joined only when a recorder asks

    @property
    def last_noise(self) -> np.ndarray | None:
        """(batch, 1 + K, H, A): the last `sample`'s x_K noise, then each chain step's, as fed; None before one.
        Joined here, not in `sample`, so that serving (the policy node re-plans every period) pays nothing for it."""
        if not self._fed:
            return None
        eps, *chain = self._fed
        return np.concatenate([eps[:, None], *chain], axis=1)

    @property
    def noise_size(self) -> int:
        """Floats of noise one chunk takes: x_K's (H · A) and, for a chain sampler, K steps' more."""
        k = 0 if self.step_noise_shape is None else self.step_noise_shape[0]
        return (1 + k) * int(np.prod(self.chunk_shape))

    def sample(
        self,
        obs_history: np.ndarray,
        noise: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
        images: Mapping[str, np.ndarray] | None = None,
        step_noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """Raw action chunk(s) (H, A) or (batch, H, A) for observation histories (To, n) or (batch, To, n).

        History oldest first, physical units; chunk index 0 is aligned with the oldest observation.
        Without ``noise``, N(0, I) noise is drawn from ``rng`` (or this runner's seeded generator).
        ``images``: for a model with cameras, {camera: uint8 frames (To, 3, H, W), or (batch, To, 3, H, W)
        beside a batch of histories}, oldest first, raw RGB (no scaling).
        ``step_noise``: a chain sampler's per-step noise (K, H, A) or (batch, K, H, A); drawn after ``noise``, from
        the same generator, when not given. What was fed is kept in ``last_noise``, for a recorder.
        """
        x = np.asarray(obs_history, dtype=np.float32)
        single = x.ndim == 2
        if single:
            x = x[None]
        if x.ndim != 3 or x.shape[1:] != self.history_shape:
            to, n = self.history_shape
            raise PolicyInputError(
                f"observation history has shape {np.shape(obs_history)}, expected (To, n) = ({to}, {n}) "
                f"or (batch, To, n) = (batch, {to}, {n}), oldest observation first"
            )
        self._check_finite(x, "batch {}, history step {}")
        want = (len(x), *self.chunk_shape)
        if noise is None:
            eps = (rng or self.rng).standard_normal(want, dtype=np.float32)
        else:
            eps = self._checked_noise(noise, want, single)
        chain = self._checked_step_noise(step_noise, rng, len(x), single)
        frames = self._checked_images(images, len(x), single)
        feeds = dict(zip(self._inputs, (x, eps, *chain, *frames), strict=True))
        out = self.session.run([self._output], feeds)[0]
        self._fed = [eps, *chain]
        return out[0] if single else out

    def _checked_step_noise(
        self, step_noise: np.ndarray | None, rng: np.random.Generator | None, batch: int, single: bool
    ) -> list[np.ndarray]:
        """A chain sampler's step noise as [(batch, K, H, A) float32]; [] for a generator without that input."""
        if self.step_noise_shape is None:
            if step_noise is not None:
                raise PolicyInputError(f"model {self.path.name} takes no step noise (it is no chain sampler)")
            return []
        want = (batch, *self.step_noise_shape)
        if step_noise is None:
            return [(rng or self.rng).standard_normal(want, dtype=np.float32)]
        return [self._checked_noise(step_noise, want, single, "step_noise", ("batch", "K", "H", "A"))]

    def _checked_images(self, images: Mapping[str, np.ndarray] | None, batch: int, single: bool) -> list[np.ndarray]:
        """Each camera's frames as (batch, To, 3, H, W) uint8, in the model's input order."""
        images = images or {}
        extra = sorted(set(images) - set(self.image_shapes))
        if extra:
            reads = ", ".join(self.image_shapes) or "none (state only)"
            raise PolicyInputError(f"images for unknown camera(s) {extra}; this model reads cameras: {reads}")
        out = []
        for name, shape in self.image_shapes.items():
            if name not in images:
                raise PolicyInputError(
                    f"camera {name!r} missing: this model reads images {list(self.image_shapes)}, each uint8 "
                    f"(To, 3, H, W) = {shape} or (batch, To, 3, H, W)"
                )
            frames = np.asarray(images[name])
            if single and frames.shape == shape:
                frames = frames[None]
            if frames.shape != (batch, *shape) or frames.dtype != np.uint8:
                raise PolicyInputError(
                    f"camera {name!r} images are {frames.dtype} {np.shape(images[name])}, expected uint8 RGB "
                    f"(batch, To, 3, H, W) = {(batch, *shape)}"
                    + (f" or (To, 3, H, W) = {shape}" if single else "")
                    + ", oldest frame first, channels first, values 0-255"
                )
            out.append(np.ascontiguousarray(frames))
        return out

    @staticmethod
    def _checked_noise(
        noise: np.ndarray,
        want: tuple[int, ...],
        single: bool,
        name: str = "noise",
        dims: tuple[str, ...] = ("batch", "H", "A"),
    ) -> np.ndarray:
        """N(0, I) samples fed to the model (``noise``, or a chain's ``step_noise``) as float32 of shape ``want``;
        without the batch dimension it is accepted beside a single history."""
        eps = np.asarray(noise)
        if single and eps.shape == want[1:]:
            eps = eps[None]
        if eps.shape != want:
            raise PolicyInputError(f"{name} has shape {np.shape(noise)}, expected ({', '.join(dims)}) = {tuple(want)}")
        if not np.issubdtype(eps.dtype, np.floating):
            raise PolicyInputError(f"{name} has dtype {eps.dtype}, expected floating point (N(0, I) samples)")
        if not np.isfinite(eps).all():
            index = np.argwhere(~np.isfinite(eps))[0]
            where = ", ".join(f"{_DIM_NAMES.get(d, d)} {i}" for d, i in zip(dims, index, strict=True))
            raise PolicyInputError(f"{name} is not finite ({where})")
        return eps.astype(np.float32, copy=False)


_DIM_NAMES = {"K": "denoising step", "H": "chunk step", "A": "action"}  # other dimensions by their own name


def load_model(path: Path, robot_spec: Spec | None = None, threads: int = 1) -> OnnxPolicy | OnnxGenerator:
    """The right loader for the file, chosen by its Spec (`Spec.is_generator`)."""
    from deploy.artifact import spec_of

    cls = OnnxGenerator if spec_of(Path(path)).is_generator else OnnxPolicy
    return cls(path, robot_spec, threads)


def _wrong_loader(path: Path, spec: Spec, loader: str) -> str:
    if spec.is_generator:
        kind = (
            f"a generator (action_chunk {spec.action_chunk}, observation_horizon {spec.observation_horizon}: "
            "obs history + noise → action_chunk)"
        )
        right = "OnnxGenerator"
    else:
        kind, right = "a plain policy (obs → action)", "OnnxPolicy"
    return f"model {path.name} is {kind}; {loader} cannot run it: load it with {right} or deploy.runner.load_model"
