"""Reading an exported policy's metadata without torch: what a robot-side process needs.

The policy node loads models at configure time; importing torch there would cost seconds and
hundreds of MB for nothing. The names of the model's input and output live here too, so that the
exporter and every reader agree on them.
"""

from __future__ import annotations

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
CHUNK_OUTPUT_NAME = "action_chunk"
# Generators with cameras (Spec.images) take one more input per camera, after obs and noise, in the
# Spec's order: "image.<name>", uint8 RGB (batch, observation_horizon, 3, height, width), oldest first.
IMAGE_INPUT_PREFIX = "image."


def image_input_names(spec: Spec) -> list[str]:
    """The ONNX input names of a generator's cameras, in the order the model takes them."""
    return [IMAGE_INPUT_PREFIX + i.name for i in spec.images]


class ExportError(RuntimeError, UserFacingError):
    """Export failed or the exported model disagrees with torch (here so that catching it needs no torch)."""


def read_metadata(path: Path) -> dict[str, Any]:
    """The metadata of an exported policy with the Spec parsed (and validated)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"model {path} does not exist")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError and friends for non-ONNX bytes
        raise ValueError(f"{path} is not a readable ONNX model ({type(e).__name__}: {e})") from e
    meta = {p.key: p.value for p in model.metadata_props}
    if "reflexlab_spec" not in meta:
        raise ValueError(f"{path} carries no reflexlab Spec in its metadata; export it with `reflexlab export`")
    meta["spec"] = Spec.from_json(meta.pop("reflexlab_spec")).to_dict()
    meta["inputs"] = {i.name: _shape(i) for i in model.graph.input}
    meta["outputs"] = {o.name: _shape(o) for o in model.graph.output}
    return meta


def _shape(value_info: Any) -> list[Any]:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def spec_of(path: Path) -> Spec:
    return Spec.from_dict(read_metadata(path)["spec"])
