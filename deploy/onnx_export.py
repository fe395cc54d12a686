"""Export a checkpoint to ONE self-contained ONNX file and verify it against torch.

The file takes observations in physical units (a PPO policy's per-term Spec scales and any running
normaliser, a generative policy's min-max normalisers, are baked in), has a dynamic batch
dimension, and carries the Spec and the checkpoint hash in ``metadata_props``: a robot needs
nothing but this file and its own Spec to check that the two agree. Beside them the file describes
itself for a user with onnxruntime alone (`deploy.artifact.interface_metadata`): what each input
holds, what the graph already applies, how a raw action becomes a robot target, a generator's noise
and chunk layout. What the graph applies is stated by whoever built the traced module
(`GraphFacts`), never guessed from the Spec. rsl-rl's own exporter writes ``.onnx`` + ``.onnx.data``
with batch 1, which is why we export here. Plain policies (obs → action) and one-step generators
(obs history + noise → action chunk, `export_generator`) share the writer, so both artefacts obey
the same contract.
"""

from __future__ import annotations

import dataclasses
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

from deploy.artifact import (
    CHUNK_OUTPUT_NAME,
    IMAGE_INPUT_PREFIX,
    INPUT_NAME,
    NOISE_NAME,
    OUTPUT_NAME,
    STEP_NOISE_NAME,
    ExportError,
    GraphFacts,
    image_input_names,
    interface_metadata,
    read_metadata,
    spec_of,
)
from policies.actor import LoadedPolicy
from policies.generative.methods import METHODS
from policies.generative.policy import GenerativePolicy, MultiStepSampler, OneStepGenerator
from policies.rl.chain import ChainConfig, ChainSampler
from reflexlab import __version__
from reflexlab.io import file_sha256
from reflexlab.spec import Spec

OPSET = 18


class PhysicalUnitsPolicy(nn.Module):
    """obs (physical units) → Spec scales → rsl-rl actor (normaliser + MLP + mean).

    ``facts`` says so for the file's readers, read off the modules wrapped (rsl-rl's normaliser is an
    Identity when ``obs_normalization`` is off).
    """

    def __init__(self, policy: LoadedPolicy) -> None:
        super().__init__()
        self.inner = policy.actor.as_onnx(verbose=False)
        self.register_buffer("scales", torch.tensor(policy.spec.policy_obs.scales(), dtype=torch.float32))
        running = not isinstance(self.inner.obs_normalizer, nn.Identity)
        self.facts = GraphFacts(
            spec_scales=True,
            obs_normalization="running_mean_std" if running else "none",
            output=f"the mean of the actor's {type(policy.actor.distribution).__name__}, nothing sampled",
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.inner(obs * self.scales)


def export_policy(policy: LoadedPolicy, out: Path, checkpoint_sha256: str) -> None:
    """Write the ONNX file (single file, dynamic batch, Spec in metadata)."""
    meta = {
        "checkpoint_sha256": checkpoint_sha256,
        "checkpoint_iteration": str(policy.iteration),
        "task": policy.info["task"],
        "profile": policy.info["profile"],
    }
    dummy = torch.zeros(1, policy.spec.policy_obs.size)
    module = PhysicalUnitsPolicy(policy).eval()
    _write(module, (dummy,), [INPUT_NAME], OUTPUT_NAME, policy.spec, module.facts, meta, out)


def export_generator(module: nn.Module, spec: Spec, out: Path, metadata: dict[str, str], facts: GraphFacts) -> None:
    """Write a one-step generator (action-chunk model) as ONE ONNX file with the Spec in its metadata.

    ``module.forward(obs, noise)`` takes obs (B, observation_horizon, obs_size) in physical units,
    oldest first (scales/normalisers belong inside the module, as for policies), and noise
    (B, action_chunk, action_size) ~ N(0, I); it returns raw actions (B, action_chunk, action_size),
    index 0 aligned with the oldest observation (see `deploy.artifact`). A Spec with ``images`` adds one
    argument per camera after the noise, uint8 (B, observation_horizon, 3, height, width), exported as
    the input ``image.<name>``; ``facts.chain_sigmas`` one before the cameras, the chain's per-step noise (B, K,
    action_chunk, action_size), exported as ``step_noise``. ``metadata`` (e.g. the checkpoint's
    ``checkpoint_sha256``, the teacher, the distillation run) is stored beside the Spec; keys starting ``reflexlab_``
    are the exporter's.
    ``facts`` states what ``module`` does inside (observation scaling, output clipping, sampling method),
    written into the file for its readers.
    The module's output shape is checked first, so a mismatch is an `ExportError` naming both shapes
    rather than a file that fails at serve time.
    """
    if not spec.is_generator:
        raise ExportError(
            f"the Spec is not a generator's (action_chunk {spec.action_chunk}, observation_horizon "
            f"{spec.observation_horizon}): export a plain obs → action policy with export_policy"
        )
    bad = sorted(k for k, v in metadata.items() if k.startswith("reflexlab_") or not isinstance(v, str))
    if bad:
        raise ExportError(f"metadata keys {bad}: values must be strings and keys starting 'reflexlab_' are reserved")
    module = module.eval()
    obs = torch.zeros(1, spec.observation_horizon, spec.policy_obs.size)
    noise = torch.zeros(1, spec.action_chunk, spec.action.size)
    chain = () if facts.chain_sigmas is None else (torch.zeros(1, len(facts.chain_sigmas), *noise.shape[1:]),)
    images = tuple(torch.zeros(1, spec.observation_horizon, *i.shape, dtype=torch.uint8) for i in spec.images)
    with torch.no_grad():
        got = tuple(module(obs, noise, *chain, *images).shape)
    want = tuple(noise.shape)
    if got != want:
        raise ExportError(f"generator output has shape {got} for noise {want}; it must equal the noise's (B, H, A)")
    names = [INPUT_NAME, NOISE_NAME, *([STEP_NOISE_NAME] if chain else []), *image_input_names(spec)]
    _write(module, (obs, noise, *chain, *images), names, CHUNK_OUTPUT_NAME, spec, facts, metadata, out)


def _write(
    module: nn.Module,
    dummy: tuple[torch.Tensor, ...],
    input_names: list[str],
    output_name: str,
    spec: Spec,
    facts: GraphFacts,
    metadata: dict[str, str],
    out: Path,
) -> None:
    """Trace ``module`` to one self-contained ONNX file: batch dynamic; the Spec, ``metadata`` and the file's
    self-description (from ``facts``) in metadata_props, the description's prose also as the model's doc_string."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            dummy,
            buf,
            input_names=input_names,
            output_names=[output_name],
            dynamic_axes={name: {0: "batch"} for name in (*input_names, output_name)},
            opset_version=OPSET,
            dynamo=False,
        )
    model = onnx.load_from_string(buf.getvalue())
    interface = interface_metadata(spec, facts)
    meta = {"reflexlab_spec": spec.to_json(), "reflexlab_version": __version__, **interface, **metadata}
    for k, v in meta.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    model.doc_string = interface["reflexlab_usage"]
    onnx.checker.check_model(model, full_check=True)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(out), save_as_external_data=False)


def verify(policy: LoadedPolicy, onnx_path: Path, observations: np.ndarray) -> float:
    """Max abs error between onnxruntime and torch on ``observations`` (physical units)."""
    module = PhysicalUnitsPolicy(policy).eval()
    with torch.no_grad():
        expected = module(torch.from_numpy(observations)).numpy()
    got = _session(onnx_path).run([OUTPUT_NAME], {INPUT_NAME: observations})[0]
    return float(np.max(np.abs(got - expected)))


def verify_generator(
    module: nn.Module,
    onnx_path: Path,
    obs: np.ndarray,
    noise: np.ndarray,
    images: dict[str, np.ndarray] | None = None,
    step_noise: np.ndarray | None = None,
) -> float:
    """Max abs error between onnxruntime and torch for obs (B, To, n) and noise (B, H, A) (float32), plus the
    frames {camera: (B, To, 3, H, W) uint8} of a generator with cameras (in its Spec's order) and the per-step noise
    (B, K, H, A) of a chain sampler."""
    obs, noise = np.asarray(obs, dtype=np.float32), np.asarray(noise, dtype=np.float32)
    chain = [] if step_noise is None else [np.asarray(step_noise, dtype=np.float32)]
    cameras = [i.name for i in spec_of(Path(onnx_path)).images]
    frames = [np.ascontiguousarray(np.asarray((images or {})[k], dtype=np.uint8)) for k in cameras]
    with torch.no_grad():
        expected = module.eval()(*map(torch.from_numpy, (obs, noise, *chain, *frames)))
    feeds = {
        INPUT_NAME: obs,
        NOISE_NAME: noise,
        **({STEP_NOISE_NAME: chain[0]} if chain else {}),
        **{IMAGE_INPUT_PREFIX + k: f for k, f in zip(cameras, frames, strict=True)},
    }
    got = _session(onnx_path).run([CHUNK_OUTPUT_NAME], feeds)[0]
    return float(np.max(np.abs(got - expected.numpy())))


def _session(onnx_path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])


def export_verified_policy(
    policy: LoadedPolicy, out: Path, observations: np.ndarray, tolerance: float = 1e-5
) -> dict[str, Any]:
    """Export a loaded PPO policy and check onnxruntime against torch on ``observations`` (physical units,
    e.g. `policies.rollouts.record_observations`); raise `ExportError` beyond ``tolerance``."""
    sha = file_sha256(policy.path)
    export_policy(policy, out, sha)
    err = verify(policy, out, observations)
    if not err <= tolerance:
        raise ExportError(f"onnxruntime differs from torch by {err:.3g} (> {tolerance:g}) on recorded observations")
    return {
        "onnx": str(out),
        "checkpoint": str(policy.path),
        "checkpoint_sha256": sha,
        "max_abs_error": err,
        "num_obs": len(observations),
    }


def generative_facts(policy: GenerativePolicy, steps: int) -> GraphFacts:
    """What `OneStepGenerator` / `MultiStepSampler` of ``policy`` do inside.

    Observations go through the policy's min-max normaliser (the Spec's scales are not used: a
    min-max map fitted on the data absorbs any fixed per-term factor), and every method's sampler
    ends by clipping the normalised chunk to [-1, 1], which is the action normaliser's training-data
    range in raw units: that range is what the graph clips raw actions to.
    """
    with torch.no_grad():
        ends = policy.action_norm.unnormalize(torch.tensor([[-1.0], [1.0]]).expand(2, policy.cfg.action_dim))
    lower, upper = (tuple(float(v) for v in row) for row in ends.double())
    return GraphFacts(
        spec_scales=False,
        obs_normalization="min_max",
        output=f"a {policy.method} sample ({steps} network evaluation{'s' if steps != 1 else ''}) for the given "
        "noise, in the actions' physical units",
        action_bounds=(lower, upper),
        method=policy.method,
        steps=steps,
    )


def export_verified_generator(
    policy: GenerativePolicy,
    spec: Spec,
    extra: dict[str, Any],
    checkpoint: Path,
    out: Path,
    obs: np.ndarray,
    images: dict[str, np.ndarray],
    steps: int | None = None,
    tolerance: float = 1e-4,
    sampler_tolerance: float = 2e-3,
    chain: ChainConfig | None = None,
    explore: bool = False,
) -> dict[str, Any]:
    """Export a generative policy (one-step student, or a policy at ``steps`` unrolled steps) and verify it
    on observation histories ``obs`` (N, To, n) and, for a policy with cameras, their ``images``.

    ``chain``: export a diffusion policy as RL-100's `ChainSampler` instead (``chain.sampling_steps`` steps, taking
    ``step_noise``): its stochastic chain when ``explore``, else the deterministic DDIM sampler with the same inputs.

    Students export as `OneStepGenerator` (one network evaluation); a multi-step policy (or a student
    asked for more steps) as `MultiStepSampler`, so teachers can be served and benchmarked the same way.
    A one-step student must match within ``tolerance``; an unrolled sampler within ``sampler_tolerance``:
    DDIM's clean-sample estimate divides the network's float32 rounding by √ᾱ (≈ 5e-4 at the noisiest
    step, so a 1-step teacher measured 4.3e-4 m here) and several steps compound it.
    """
    steps = chain.sampling_steps if chain is not None else steps or METHODS[policy.method].default_steps
    one_step = chain is None and METHODS[policy.method].one_step and steps == 1
    if chain is not None:
        module: nn.Module = ChainSampler(policy, chain, stochastic=explore)
    else:
        module = OneStepGenerator(policy) if one_step else MultiStepSampler(policy, steps)
    sha = file_sha256(checkpoint)
    meta = {
        "checkpoint_sha256": sha,
        "checkpoint_step": str(extra.get("step", "")),
        "method": policy.method,
        "sampling_steps": str(steps),
        "role": str(extra.get("role", "")),
        "teacher_sha256": str(extra.get("teacher_sha256", "")),
        "task": spec.task,
    }
    facts = generative_facts(policy, steps)
    step_noise = None
    if isinstance(module, ChainSampler):
        facts = dataclasses.replace(facts, chain_sigmas=tuple(s.sigma for s in module.steps))
        meta["exploring"] = str(explore).lower()
        shape = (len(obs), steps, spec.action_chunk, spec.action.size)
        step_noise = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    export_generator(module, spec, out, meta, facts)
    noise = np.random.default_rng(0).standard_normal((len(obs), spec.action_chunk, spec.action.size))
    err = verify_generator(module, out, obs, noise.astype(np.float32), images, step_noise)
    tolerance = tolerance if one_step else sampler_tolerance
    if not err <= tolerance:
        raise ExportError(f"onnxruntime differs from torch by {err:.3g} (> {tolerance:g}) on recorded observations")
    return {
        "onnx": str(out),
        "checkpoint": str(checkpoint),
        "checkpoint_sha256": sha,
        "method": policy.method,
        "sampling_steps": steps,
        "max_abs_error": err,
        "num_obs": len(obs),
    }


__all__ = [
    "ExportError",
    "export_generator",
    "export_verified_generator",
    "export_verified_policy",
    "generative_facts",
    "read_metadata",
    "spec_of",
    "verify",
    "verify_generator",
]
