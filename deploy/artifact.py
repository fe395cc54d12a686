"""Reading an exported policy's metadata without torch: what a robot-side process needs.

The policy node loads models at configure time; importing torch there would cost seconds and
hundreds of MB for nothing. The names of the model's input and output live here too, so that the
exporter and every reader agree on them.

The file also explains itself to a user with onnxruntime and nothing of ours (`interface_metadata`
writes, `read_metadata` reads): besides the Spec (``reflexlab_spec``), ``metadata_props`` holds, in
plain JSON, what every input holds and what the graph already does to it (the Spec's per-term
scales, normalisation), what the output is, how a raw action becomes a robot target (offset, scale,
clipping, rate) and, for generators, the noise's distribution and which chunk index is the current
step. onnxruntime reads them as ``InferenceSession.get_modelmeta().custom_metadata_map``; `reflexlab
inspect` prints them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from reflexlab.errors import UserFacingError
from reflexlab.spec import Spec

INPUT_NAME = "obs"
OUTPUT_NAME = "action"
# Generators (Spec.is_generator): obs (batch, observation_horizon, obs_size) oldest first, noise
# (batch, action_chunk, action_size) ~ N(0, I) → action_chunk (batch, action_chunk, action_size),
# raw actions (targets = Spec.action.to_targets). The caller owns the noise so runs are reproducible.
NOISE_NAME = "noise"
# A generator whose sampler is a chain of K Gaussian denoising steps (RL-100's exploring actor) takes their noise too,
# right after "noise": float32 (batch, K, action_chunk, action_size) ~ N(0, I), step k's draw at index k.
STEP_NOISE_NAME = "step_noise"
CHUNK_OUTPUT_NAME = "action_chunk"
# Generators with cameras (Spec.images) take one more input per camera, after obs and noise, in the
# Spec's order: "image.<name>", uint8 RGB (batch, observation_horizon, 3, height, width), oldest first.
IMAGE_INPUT_PREFIX = "image."

# The self-description's format: the name changes never, the number when a reader of the old one
# would misread a new file (adding a key does not count). A file without it was written before
# it existed and carries the Spec and the checkpoint's lineage only.
METADATA_FORMAT = "reflexlab.onnx/1"
FORMAT_KEY = "reflexlab_format"
SPEC_KEY = "reflexlab_spec"
# Everything a reader needs besides the Spec, under "reflexlab_<name>": JSON, except the two plain strings.
INTERFACE_KEYS = ("kind", "usage", "control_rate_hz", "inputs", "outputs", "action", "chunk", "sampling")
_PLAIN_KEYS = ("kind", "usage")

# What an exported graph may do to observations besides the Spec's scales (`GraphFacts.obs_normalization`).
OBS_NORMALIZATIONS = {
    "none": "nothing",
    "running_mean_std": "(x - mean) / std per element, rsl-rl's running statistics frozen at export",
    "min_max": "each element mapped to [-1, 1] by the minimum and maximum of the training data",
}


def image_input_names(spec: Spec) -> list[str]:
    """The ONNX input names of a generator's cameras, in the order the model takes them."""
    return [IMAGE_INPUT_PREFIX + i.name for i in spec.images]


class ExportError(RuntimeError, UserFacingError):
    """Export failed or the exported model disagrees with torch (here so that catching it needs no torch)."""


@dataclass(frozen=True)
class GraphFacts:
    """What an exported graph does inside, which its input and output names cannot tell a reader.

    Only the exporter knows (it built the module it traced), so it states them and they are written
    into the file: a user who guesses scales observations a second time, or re-clips what the graph
    already clipped. Every graph takes raw observations in physical units; these say how it gets from
    there to its network.

    Attributes:
        spec_scales: the graph multiplies each observation term by its Spec ``scale`` (PPO policies do;
            generative policies' min-max normalisation takes the scales' place).
        obs_normalization: what else the graph does to observations: a key of `OBS_NORMALIZATIONS`.
        output: what the raw output is, as a phrase ("the mean of the actor's GaussianDistribution").
        action_bounds: (lower, upper) per action dimension that the graph clips its raw output to, in
            raw action units; None when it clips nothing.
        method: a generator's sampling method (``diffusion``, ``consistency``, …), None if not one of ours.
        steps: the network evaluations per chunk that ``method`` was unrolled to.
        chain_sigmas: a generator taking ``step_noise``: the σ (normalised action units) its K steps scale their
            noise by, in step order; all 0 for a deterministic sampler that takes the input and ignores it. None: no
            such input.
    """

    spec_scales: bool
    obs_normalization: str
    output: str
    action_bounds: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    method: str | None = None
    steps: int | None = None
    chain_sigmas: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.obs_normalization not in OBS_NORMALIZATIONS:
            raise ValueError(
                f"obs_normalization {self.obs_normalization!r}: expected one of {', '.join(OBS_NORMALIZATIONS)}"
            )
        if (self.method is None) != (self.steps is None):
            raise ValueError("a generator's method and steps are stated together or not at all")


def interface_metadata(spec: Spec, facts: GraphFacts) -> dict[str, str]:
    """The ``metadata_props`` that let a user run the file with onnxruntime alone and command a robot with it.

    Keys (``reflexlab_`` + name): ``format``; ``kind`` ("policy" or "generator"); ``usage`` (the same
    in a paragraph of prose); ``control_rate_hz``; ``inputs`` and ``outputs`` ({name: dtype, shape with
    "batch", what it holds}; ``obs`` lists its terms and says what the graph applies); ``action`` (raw
    action → robot target); for generators ``chunk`` (layout, current index, steps to execute) and,
    for our generative policies, ``sampling`` (method, network evaluations).
    """
    generator = spec.is_generator
    obs = spec.policy_obs
    a = spec.action
    terms, start = [], 0
    for t in obs.terms:
        terms.append({"name": t.name, "start": start, "size": t.size, "units": t.units, "spec_scale": t.scale})
        start += t.size
    obs_in: dict[str, Any] = {
        "dtype": "float32",
        "shape": ["batch", spec.observation_horizon, obs.size] if generator else ["batch", obs.size],
        "holds": "the policy observation: the terms below concatenated in this order, in physical units as "
        "measured (their 'units'), unscaled",
        "terms": terms,
        "caller_scaling": "none",
        "spec_scales_applied_in_graph": facts.spec_scales,
        "normalization_in_graph": facts.obs_normalization,
        "normalization_in_graph_means": OBS_NORMALIZATIONS[facts.obs_normalization],
    }
    inputs: dict[str, Any] = {INPUT_NAME: obs_in}
    chunk_shape = ["batch", spec.action_chunk, a.size]
    if generator:
        obs_in["history"] = {
            "length": spec.observation_horizon,
            "order": "oldest first: index observation_horizon - 1 is the newest (current) observation",
            "at_episode_start": "fill every slot with the first observation",
        }
        inputs[NOISE_NAME] = {
            "dtype": "float32",
            "shape": chunk_shape,
            "holds": "the generator's noise: independent standard normal samples, drawn afresh for every chunk",
            "distribution": "standard_normal",
            "mean": 0.0,
            "std": 1.0,
            "independent": True,
        }
        if facts.chain_sigmas is not None:
            inputs[STEP_NOISE_NAME] = {
                "dtype": "float32",
                "shape": ["batch", len(facts.chain_sigmas), spec.action_chunk, a.size],
                "holds": "the noise of each denoising step, in step order: independent standard normal samples, drawn "
                "afresh for every chunk; step k adds sigmas[k] times its draw (record it to replay the chain)",
                "distribution": "standard_normal",
                "sigmas": list(facts.chain_sigmas),
                "independent": True,
            }
        for i in spec.images:
            inputs[IMAGE_INPUT_PREFIX + i.name] = {
                "dtype": "uint8",
                "shape": ["batch", spec.observation_horizon, *i.shape],
                "holds": f"camera {i.name!r}: RGB frames resized to {i.height}x{i.width}, channels first, values "
                "0-255, oldest first like obs; cropping and scaling are inside the graph",
            }
    bounds = (
        None
        if facts.action_bounds is None
        else {"lower": list(facts.action_bounds[0]), "upper": list(facts.action_bounds[1])}
    )
    out_name = CHUNK_OUTPUT_NAME if generator else OUTPUT_NAME
    outputs = {
        out_name: {
            "dtype": "float32",
            "shape": chunk_shape if generator else ["batch", a.size],
            "names": list(a.names),
            "holds": f"raw actions, not robot targets (see reflexlab_action): {facts.output}"
            + ("; one per control step, laid out as reflexlab_chunk says" if generator else ""),
            "clipped_in_graph_to": bounds,
        }
    }
    norm = "the vector's Euclidean norm" if a.kind == "ee_position" else "each dimension"
    max_rate = a.max_rate if math.isfinite(a.max_rate) else None
    action = {
        "kind": a.kind,
        "names": list(a.names),
        "target": "clip(offset + scale * action, lower, upper); then, from the previous target, a change of "
        "at most max_rate / control_rate_hz per control step",
        "offset": list(a.offset),
        "scale": a.scale,
        "lower": list(a.lower),
        "upper": list(a.upper),
        "max_rate": max_rate,
        "max_rate_limits": norm,
        "applied_in_graph": False,
        "note": "none of the target mapping is inside the graph; a robot may clip tighter to its own limits",
    }
    meta = {
        FORMAT_KEY: METADATA_FORMAT,
        "reflexlab_kind": "generator" if generator else "policy",
        "reflexlab_control_rate_hz": _json(spec.control_rate_hz),
        "reflexlab_inputs": _json(inputs),
        "reflexlab_outputs": _json(outputs),
        "reflexlab_action": _json(action),
    }
    if generator:
        first = spec.observation_horizon - 1
        meta["reflexlab_chunk"] = _json(
            {
                "length": spec.action_chunk,
                "action_size": a.size,
                "observation_horizon": spec.observation_horizon,
                "current_index": first,
                "index_meaning": "action_chunk[:, i] is the action for control step t + i - current_index, t being "
                "the step of the newest observation: index 0 lines up with the oldest observation",
                "execute_steps": spec.execution_horizon,
                "execute": "from current_index, one action per control period, at most execute_steps of them; then "
                "sample a new chunk from the newer history and fresh noise (reflexlab's StepActor re-plans after "
                "execute_steps, its policy node every control period)",
                "step_period_s": 1.0 / spec.control_rate_hz,
            }
        )
        if facts.method is not None:
            meta["reflexlab_sampling"] = _json(
                {
                    "method": facts.method,
                    "network_evaluations": facts.steps,
                    "deterministic_given_noise": True,
                }
            )
    meta["reflexlab_usage"] = _usage(spec, facts, inputs, out_name, action)
    return meta


def _usage(spec: Spec, facts: GraphFacts, inputs: dict[str, Any], out_name: str, action: dict[str, Any]) -> str:
    """The same facts as one paragraph of prose, for a person reading the file in Netron or `reflexlab inspect`."""
    obs = inputs[INPUT_NAME]
    terms = ", ".join(f"{t['name']} ({t['size']})" for t in obs["terms"])
    norm = OBS_NORMALIZATIONS[facts.obs_normalization]
    if facts.spec_scales:
        scaling = "the graph applies the Spec's per-term scales" + ("" if norm == "nothing" else f", then {norm}")
    elif norm != "nothing":
        scaling = f"the graph normalises them itself ({norm}) instead of using the Spec's per-term scales"
    else:
        scaling = "the graph takes them as they are (it uses neither the Spec's scales nor a normaliser)"
    kind = "generator" if spec.is_generator else "policy"
    parts = [
        f"reflexlab {kind} for {spec.robot} / {spec.task}, run it at {spec.control_rate_hz:g} Hz with onnxruntime; "
        "the JSON keys reflexlab_inputs, reflexlab_outputs and reflexlab_action say the same for programs.",
        f"Input {INPUT_NAME!r}: float32 {_shape_text(obs['shape'])}, the terms {terms} concatenated in that order, "
        f"in physical units; {scaling}, so do not scale them.",
    ]
    if spec.is_generator:
        n = spec.observation_horizon
        parts.append(
            f"It holds the last {n} observations, oldest first (at an episode's start repeat the first). "
            f"Input {NOISE_NAME!r}: float32 {_shape_text(inputs[NOISE_NAME]['shape'])}, independent standard normal "
            "samples, drawn afresh for every chunk."
        )
        if STEP_NOISE_NAME in inputs:
            stochastic = any(inputs[STEP_NOISE_NAME]["sigmas"])
            parts.append(
                f"Input {STEP_NOISE_NAME!r}: float32 {_shape_text(inputs[STEP_NOISE_NAME]['shape'])}, the same kind of "
                "samples for each denoising step"
                + (" (this file's steps add them: it explores)." if stochastic else " (this file ignores them).")
            )
        for name, image in inputs.items():
            if name.startswith(IMAGE_INPUT_PREFIX):
                parts.append(f"Input {name!r}: uint8 {_shape_text(image['shape'])}, {image['holds']}.")
        parts.append(
            f"Output {out_name!r}: {spec.action_chunk} raw actions, one per control step; index {n - 1} is the "
            f"current step (index 0 lines up with the oldest observation); execute at most "
            f"{spec.execution_horizon} from there, then sample again."
        )
    else:
        parts.append(f"Output {out_name!r}: float32 (batch, {spec.action.size}), raw actions: {facts.output}.")
    if facts.action_bounds is not None:
        parts.append("The graph clips raw actions to the training data's range (reflexlab_outputs).")
    limit = action["max_rate"]
    rate = "" if limit is None else f", changing by at most {limit:g} per second on {action['max_rate_limits']}"
    parts.append(
        f"Robot target ({action['kind']}): clip(offset + {action['scale']:g} * action, lower, upper){rate}, "
        "with offset and limits from reflexlab_action; none of this is inside the graph."
    )
    return " ".join(parts)


def _json(value: Any) -> str:
    """JSON that strict parsers take: a NaN or infinity is an exporter bug, not a value to write."""
    return json.dumps(value, allow_nan=False)


def _shape_text(shape: list[Any]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ")"


def read_metadata(path: Path) -> dict[str, Any]:
    """The metadata of an exported policy with the Spec parsed (and validated).

    Returns the file's other keys as they are (``checkpoint_sha256``, …), plus ``spec`` (a dict),
    ``inputs`` and ``outputs`` ({name: shape} as the graph declares them) and ``interface``: the
    self-description `interface_metadata` wrote, parsed ({"format", "kind", "usage", "inputs", …}),
    or None for a file exported before it existed.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model {path} does not exist")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError and friends for non-ONNX bytes
        raise ValueError(f"{path} is not a readable ONNX model ({type(e).__name__}: {e})") from e
    meta: dict[str, Any] = {p.key: p.value for p in model.metadata_props}
    if SPEC_KEY not in meta:
        raise ValueError(f"{path} carries no reflexlab Spec in its metadata; export it with `reflexlab export`")
    meta["spec"] = Spec.from_json(meta.pop(SPEC_KEY)).to_dict()
    meta["interface"] = _interface(path, meta)
    meta["inputs"] = {i.name: _shape(i) for i in model.graph.input}
    meta["outputs"] = {o.name: _shape(o) for o in model.graph.output}
    return meta


def _interface(path: Path, meta: dict[str, Any]) -> dict[str, Any] | None:
    """Pop the self-description's keys out of ``meta``, parsed; None for a file that has none."""
    fmt = meta.pop(FORMAT_KEY, None)
    if fmt is None:
        return None
    name, _, version = fmt.partition("/")
    ours_name, _, ours = METADATA_FORMAT.partition("/")
    if name != ours_name or not version.isdigit():
        raise ValueError(f"{path} has metadata format {fmt!r}, not {ours_name}/<n>: it was not written by reflexlab")
    if int(version) > int(ours):
        raise ValueError(
            f"{path} was written in metadata format {fmt}, newer than this reflexlab's {METADATA_FORMAT}: upgrade "
            "reflexlab to read it"
        )
    out: dict[str, Any] = {"format": fmt}
    for key in INTERFACE_KEYS:
        raw = meta.pop(f"reflexlab_{key}", None)
        if raw is None:
            continue
        try:
            out[key] = raw if key in _PLAIN_KEYS else json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: metadata key reflexlab_{key} is not valid JSON ({e})") from e
    return out


def _shape(value_info: Any) -> list[Any]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def spec_of(path: Path) -> Spec:
    return Spec.from_dict(read_metadata(path)["spec"])
