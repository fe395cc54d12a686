"""Generative action-chunk policies: one module for every method, and the modules that get exported.

`GenerativePolicy` = observation normaliser → `ObsEncoder` → `ConditionalUnet1D` (+ action
normaliser), with the method deciding what the U-Net's output means:

* ``diffusion``: ε-prediction on the cosine schedule, sampled with DDIM (K steps) or DDPM (100);
* ``flow``: velocity ε − A of flow matching, sampled with K Euler steps;
* ``meanflow``: average velocity u(z, r, t), sampled in K jumps (one is the point);
* ``consistency``: a one-step student distilled from a teacher (see `consistency`).

Both one-step students sample the same way, A = clip(z − f(z, t = 1[, t − r = 1], O), −1, 1): for
MeanFlow that is z₁ − u(z₁, r = 0, t = 1); for a consistency student, a copy of a flow teacher
starts as one Euler step and a copy of a diffusion teacher as z − ε̂(z) — a sane start either way,
unlike reading a raw output as the action. Everything inside works in normalised units; `sample`,
`OneStepGenerator` and `MultiStepSampler` take and return raw units.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from policies.checkpoint import CheckpointError
from policies.generative.diffusion import Diffusion
from policies.generative.dispersive import dispersive_loss
from policies.generative.meanflow import MeanFlowVariant
from policies.generative.methods import METHODS, ONE_STEP_METHODS, STUDENTS, TEACHERS, Method
from policies.generative.normalizer import MinMaxNormalizer
from policies.generative.unet import ConditionalUnet1D, ObsEncoder
from policies.generative.vision import ImageEncoder
from reflexlab.io import replace_atomically

CHECKPOINT_FORMAT = "reflexlab.generative/1"


@dataclass(frozen=True)
class PolicyOptions:
    """What a user chooses about a generative policy; the Spec supplies its sizes and horizons.

    Network fields follow Diffusion Policy except the widths, (32, 64) and a 64-wide time
    embedding, sized for CPUs; the paper's state-input U-Net is down_dims (256, 512, 1024) with
    time_embed_dim 256. On a 2-core machine a batch-256 step takes 74 ms at (32, 64), 160 ms at
    (32, 64, 128) and 0.32 s at (64, 128, 256), and the one-step student runs in onnxruntime at
    p50/p99 0.44/0.69 ms (1 thread) against 0.81/1.46 ms for (32, 64, 128): the third level is what
    kept a student above 1 ms. ``dispersive_weight`` > 0 adds DMPO's regulariser on the encoder output,
    for any method (METHODS.md: weight ≈ 0.5, τ ≈ 0.3–0.5); it is off by default.

    Cameras: ``image_keys`` names the cameras the policy reads (dataset features
    ``observation.images.<key>``, ONNX inputs ``image.<key>``), each an RGB uint8 frame of
    ``image_size`` (H, W), encoded by its own `ImageEncoder` (random ``image_crop_fraction`` crop in
    training, centre crop at inference) into ``image_feature_dim`` features per frame that join the
    state history in the FiLM condition. Empty (the default) is the state-only policy, unchanged:
    the ``image_*`` fields are then not even written to its checkpoints.
    """

    down_dims: tuple[int, ...] = (32, 64)
    kernel_size: int = 5
    n_groups: int = 8
    time_embed_dim: int = 64
    encoder_hidden: int = 256
    encoder_dim: int = 64
    diffusion_train_steps: int = 100
    flow_beta: tuple[float, float] = (1.5, 1.0)
    meanflow_variant: MeanFlowVariant = "imf"
    meanflow_r_equals_t: float = 0.5
    meanflow_logit_mean: float = 0.0
    meanflow_logit_std: float = 2.0
    meanflow_weight_power: float = 1.0
    meanflow_jump_fraction: float = 0.0
    meanflow_endpoint_weight: float = 0.0
    dispersive_weight: float = 0.0
    dispersive_tau: float = 0.4
    image_keys: tuple[str, ...] = ()
    image_size: tuple[int, int] = (96, 96)
    image_crop_fraction: float = 0.9
    image_channels: tuple[int, ...] = (16, 32, 64)
    image_keypoints: int = 32
    image_feature_dim: int = 64

    def __post_init__(self) -> None:
        bad = [k for k in self.image_keys if not k or not k.replace("_", "a").replace("-", "a").isalnum()]
        if bad or len(set(self.image_keys)) != len(self.image_keys):
            raise ValueError(
                f"image_keys {self.image_keys}: camera names must be distinct, non-empty letters, digits, '_' or '-' "
                "(the dataset feature is observation.images.<key>)"
            )

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(3, H, W): one camera frame as the policy (and its ONNX file) takes it."""
        return (3, *self.image_size)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyOptions:
        d = dict(d)
        d["down_dims"], d["flow_beta"] = tuple(d["down_dims"]), tuple(d["flow_beta"])
        for k in ("image_keys", "image_size", "image_channels"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        """Plain data; a state-only policy's leaves out the ``image_*`` fields, so its checkpoints stay as they were."""
        d = dataclasses.asdict(self)
        return d if self.image_keys else {k: v for k, v in d.items() if not k.startswith("image_")}


@dataclass(frozen=True)
class PolicyConfig:
    """Everything needed to rebuild a policy's modules: stored in every checkpoint."""

    method: Method
    obs_dim: int
    action_dim: int
    obs_horizon: int
    horizon: int
    options: PolicyOptions = field(default_factory=PolicyOptions)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown generative method {self.method!r}; known: {', '.join(METHODS)}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyConfig:
        return cls(**{**d, "options": PolicyOptions.from_dict(d["options"])})

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "options": self.options.to_dict()}


class GenerativePolicy(nn.Module):
    """Normalisers + observation encoder + U-Net + method. See the module docstring."""

    def __init__(
        self,
        cfg: PolicyConfig,
        obs_normalizer: MinMaxNormalizer | None = None,
        action_normalizer: MinMaxNormalizer | None = None,
    ) -> None:
        super().__init__()
        o = cfg.options
        self.cfg = cfg
        self.obs_norm = obs_normalizer or MinMaxNormalizer(cfg.obs_dim)
        self.action_norm = action_normalizer or MinMaxNormalizer(cfg.action_dim)
        # State-only: no image modules at all, so its parameters (and checkpoints) are exactly as before.
        self.image_encoders = (
            nn.ModuleList(
                ImageEncoder(
                    o.image_size, o.image_crop_fraction, o.image_channels, o.image_keypoints, o.image_feature_dim
                )
                for _ in o.image_keys
            )
            if o.image_keys
            else None
        )
        per_step = cfg.obs_dim + len(o.image_keys) * o.image_feature_dim
        self.encoder = ObsEncoder(per_step, cfg.obs_horizon, o.encoder_hidden, o.encoder_dim)
        self.denoiser = ConditionalUnet1D(
            cfg.action_dim,
            o.encoder_dim,
            o.down_dims,
            o.kernel_size,
            o.n_groups,
            o.time_embed_dim,
            two_times=METHODS[cfg.method].two_times,
        )
        if cfg.horizon % self.denoiser.horizon_multiple:
            raise ValueError(
                f"action chunk {cfg.horizon} is not a multiple of {self.denoiser.horizon_multiple}, which "
                f"{len(o.down_dims)} U-Net levels (down_dims {o.down_dims}) need; use fewer levels or a longer chunk"
            )
        self.info = METHODS[cfg.method]
        # None for a generator that is one network call (consistency): see `methods.MethodInfo`.
        self.objective = self.info.objective(o) if self.info.objective is not None else None

    @property
    def method(self) -> str:
        return self.cfg.method

    @property
    def image_keys(self) -> tuple[str, ...]:
        return self.cfg.options.image_keys

    def condition(self, obs: torch.Tensor, images: torch.Tensor | None = None) -> torch.Tensor:
        """Raw observation history (B, To, n), oldest first → the FiLM condition (B, encoder_dim).

        ``images``: for a policy with cameras, their uint8 frames (B, To, K, 3, H, W), camera k being
        ``image_keys[k]``; each camera's per-frame features join that frame's state before the MLP.
        """
        x = self.obs_norm.normalize(obs)
        if self.image_encoders is None:
            if images is not None:
                raise ValueError("this policy reads no cameras (state only) but was given images")
            return self.encoder(x)
        want = (len(self.image_keys), *self.cfg.options.image_shape)
        if images is None or images.ndim != 6 or tuple(images.shape[2:]) != want:
            got = None if images is None else tuple(images.shape)
            raise ValueError(
                f"this policy reads cameras {list(self.image_keys)}: images must be (B, To, K, 3, H, W) with "
                f"(K, 3, H, W) = {want}, got {got}"
            )
        feats = [enc(images[:, :, k]) for k, enc in enumerate(self.image_encoders)]
        return self.encoder(torch.cat([x, *feats], dim=-1))

    def _net_fn(self, cond: torch.Tensor) -> Callable[..., torch.Tensor]:
        """The U-Net with ``cond`` bound, in the signature the method's loss and sampler call."""
        if self.info.two_times:
            return lambda z, t, r: self.denoiser(z, t, cond, t - r)
        return lambda x, t: self.denoiser(x, t, cond)

    def loss(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        noise: torch.Tensor | None = None,
        images: torch.Tensor | None = None,
        step_weights: torch.Tensor | None = None,
        sample_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Mean training loss on raw obs (B, To, n) and action chunks (B, H, A), plus scalars to log.

        ``noise`` (B, H, A), MeanFlow only: the noise each chunk was sampled from by a teacher
        (a coupled pair, see `teacher_samples`) instead of independent draws. ``images``: see `condition`.
        ``step_weights`` (H,), MeanFlow only: see `consistency.chunk_step_weights`. ``sample_weights`` (B,):
        each sample's weight in the batch mean (advantage-weighted BC, `policies.rl.habc`: weights averaging 1
        keep the loss's scale).
        """
        if self.objective is None:
            raise ValueError(f"a {self.method} student learns from a teacher: use consistency.distillation_loss")
        cond = self.condition(obs, images)
        x0 = self.action_norm.normalize(actions)
        if self.info.coupled_loss:
            per_sample = self.objective.loss(self._net_fn(cond), x0, noise, step_weights)
        elif noise is not None or step_weights is not None:
            raise ValueError(f"coupled noise and step weights are for MeanFlow students, not a {self.method} policy")
        else:
            per_sample = self.objective.loss(self._net_fn(cond), x0)
        loss = per_sample.mean() if sample_weights is None else (per_sample * sample_weights).mean()
        logs = {f"{self.method}_loss": loss.item()}
        w = self.cfg.options.dispersive_weight
        if w > 0:
            disp = dispersive_loss(cond, self.cfg.options.dispersive_tau)
            loss = loss + w * disp
            logs["dispersive_loss"] = disp.item()
        logs["loss"] = loss.item()
        return loss, logs

    def one_step_unclipped(self, noise: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """A one-step student's normalised chunk before clipping: z − f(z, t = 1[, t − r = 1]); one network call."""
        ones = torch.ones_like(noise[:, 0, 0])
        h = ones if self.denoiser.two_times else None
        return noise - self.denoiser(noise, ones, cond, h)

    def sample_normalized(
        self,
        cond: torch.Tensor,
        noise: torch.Tensor,
        steps: int | None = None,
        sampler: Literal["ddim", "ddpm"] = "ddim",
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """A normalised chunk in [-1, 1] from ``noise`` (B, H, A); ``steps`` defaults per method."""
        steps = self.info.default_steps if steps is None else steps
        if sampler == "ddpm":
            train_steps = self.cfg.options.diffusion_train_steps
            if not isinstance(self.objective, Diffusion) or steps != train_steps:
                raise ValueError(f"DDPM samples diffusion policies in {train_steps} steps only")
            return self.objective.ddpm_sample(self._net_fn(cond), noise, generator)
        if self.objective is not None:
            return self.objective.sample(self._net_fn(cond), noise, steps)
        if steps != 1:
            raise ValueError(f"a {self.method} student samples in one step, not {steps}")
        return self.one_step_unclipped(noise, cond).clamp(-1.0, 1.0)

    def sample(
        self,
        obs: torch.Tensor,
        noise: torch.Tensor,
        steps: int | None = None,
        sampler: Literal["ddim", "ddpm"] = "ddim",
        generator: torch.Generator | None = None,
        images: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Raw obs history (B, To, n) + noise (B, H, A) ~ N(0, I) → action chunk (B, H, A), raw units.

        Deterministic given ``noise`` except for DDPM, whose per-step noise comes from ``generator``.
        ``images``: the camera frames of a policy with cameras, see `condition`.
        """
        x = self.sample_normalized(self.condition(obs, images), noise, steps, sampler, generator)
        return self.action_norm.unnormalize(x)

    # --- checkpoints -----------------------------------------------------------------------------
    def save(self, path: Path, extra: dict[str, Any] | None = None, ema: nn.Module | None = None) -> Path:
        """Write config, weights, the EMA copy's weights and ``extra`` atomically (tmp file + rename)."""
        path = Path(path)
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": self.cfg.to_dict(),
            "state_dict": self.state_dict(),
            "ema_state_dict": None if ema is None else ema.state_dict(),
            "extra": extra or {},
        }
        replace_atomically(path, lambda tmp: torch.save(state, tmp))
        return path

    @classmethod
    def load(cls, path: Path, use_ema: bool = True) -> tuple[GenerativePolicy, dict[str, Any]]:
        """(policy in eval mode, extra); the EMA weights when stored and ``use_ema``, else the raw ones."""
        path = Path(path)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises many types for truncated or foreign files
            raise CheckpointError(f"{path} cannot be read as a checkpoint ({type(e).__name__}: {e})") from e
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError(f"{path} is not a generative-policy checkpoint ({CHECKPOINT_FORMAT})")
        policy = cls(PolicyConfig.from_dict(state["config"]))
        weights = state["ema_state_dict"] if use_ema and state["ema_state_dict"] is not None else state["state_dict"]
        policy.load_state_dict(weights)
        return policy.eval(), state["extra"]


def make_student(teacher: GenerativePolicy, method: Method, options: PolicyOptions | None = None) -> GenerativePolicy:
    """A one-step student initialised from a (diffusion or flow) teacher, in the teacher's normalised units.

    ``consistency``: a copy of the teacher (architecture and all weights), as RL-100 does.
    ``meanflow``: the teacher's network sizes, with the method options (``meanflow_*``,
    ``dispersive_*``) taken from ``options``; it copies the teacher's normalisers, observation
    encoder and U-Net. From a flow teacher that is exact: a flow field is MeanFlow's r = t case,
    and the (t − r) embedding starts at zero, so the student starts as the teacher's one Euler
    step. A diffusion teacher's ε-prediction is not a velocity, so its U-Net is a warm start of
    features only: at (r, t) = (0, 1) it starts where the consistency student starts
    (z − ε̂(z, 1)), and distillation on the teacher's pairs re-targets it.
    """
    if teacher.method not in TEACHERS:
        raise ValueError(f"a student needs a {' or '.join(TEACHERS)} teacher, not a {teacher.method} policy")
    if method not in STUDENTS:
        raise ValueError(f"students are {' or '.join(STUDENTS)}, not {method!r}")
    # The method's own options come from the user (`MethodInfo.student_options`), the rest from the teacher.
    chosen = dataclasses.asdict(options or PolicyOptions())
    method_fields = {k: v for k, v in chosen.items() if k.startswith(METHODS[method].student_options)}
    options = dataclasses.replace(teacher.cfg.options, **method_fields)
    student = GenerativePolicy(dataclasses.replace(teacher.cfg, method=method, options=options))
    for name in ("obs_norm", "action_norm", "encoder", *(("image_encoders",) if teacher.image_keys else ())):
        getattr(student, name).load_state_dict(getattr(teacher, name).state_dict())
    # A two-times student's U-Net has one more embedding (t − r), which starts at zero; all else is copied.
    missing, unexpected = student.denoiser.load_state_dict(teacher.denoiser.state_dict(), strict=False)
    if unexpected or any(not k.startswith("h_embed.") for k in missing):
        raise RuntimeError(f"the teacher's U-Net does not fit the student's: {missing=} {unexpected=}")
    return student


def _stacked(images: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
    """Per-camera frames (B, To, 3, H, W), in ``image_keys`` order → (B, To, K, 3, H, W); none → None."""
    return torch.stack(images, dim=2) if images else None


class OneStepGenerator(nn.Module):
    """What a one-step student exports: raw obs (B, To, n) + noise (B, H, A) → raw action chunk (B, H, A).

    One U-Net evaluation with both normalisers baked in, clipped to the training data's range. A
    policy with cameras takes one more argument per camera (``image_keys`` order): its uint8 frames
    (B, To, 3, H, W), oldest first.
    """

    def __init__(self, policy: GenerativePolicy) -> None:
        super().__init__()
        if policy.method not in ONE_STEP_METHODS:
            raise ValueError(
                f"a {policy.method} policy needs several steps: distil it (consistency/meanflow) or export it "
                "with MultiStepSampler"
            )
        self.policy = policy

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, *images: torch.Tensor) -> torch.Tensor:
        p = self.policy
        cond = p.condition(obs, _stacked(images))
        return p.action_norm.unnormalize(p.one_step_unclipped(noise, cond).clamp(-1.0, 1.0))


class MultiStepSampler(nn.Module):
    """A policy at a fixed number of steps as obs + noise → raw chunk; traced, the loop unrolls.

    This is how a teacher is exported or benchmarked in onnxruntime (DDIM for diffusion).
    """

    def __init__(self, policy: GenerativePolicy, steps: int) -> None:
        super().__init__()
        self.policy, self.steps = policy, steps

    def forward(self, obs: torch.Tensor, noise: torch.Tensor, *images: torch.Tensor) -> torch.Tensor:
        return self.policy.sample(obs, noise, self.steps, images=_stacked(images))
