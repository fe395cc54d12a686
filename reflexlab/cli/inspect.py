"""`reflexlab inspect`: what an exported policy expects, read from its ONNX metadata without torch."""

from __future__ import annotations

import json
from pathlib import Path

import tyro


def inspect(model: tyro.conf.Positional[Path]) -> None:
    """Print the Spec and metadata embedded in an exported ONNX policy."""
    from deploy.artifact import read_metadata

    meta = read_metadata(model)
    spec = meta.pop("spec")
    print(json.dumps({"metadata": meta, "spec": spec}, indent=2))
