"""Checkpoints: atomic writes, discovery, integrity and Spec checks on load.

A checkpoint is rsl-rl's saved dict (model and optimiser states, ``iter``) plus ``infos``: the
task, profile, configs and Spec of the run. It is written to a temporary file and renamed into
place, so a process killed mid-write never leaves a truncated ``model_*.pt`` behind.
"""

from __future__ import annotations

import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from reflexlab.errors import UserFacingError
from reflexlab.io import replace_atomically
from reflexlab.spec import Spec

_NAME = re.compile(r"^model_(\d+)\.pt$")


class CheckpointError(RuntimeError, UserFacingError):
    """A checkpoint file that cannot be used; the message names the file and the reason."""


def save_checkpoint(runner: Any, run_dir: Path, it: int, info: dict[str, Any]) -> Path:
    """Write ``model_<it>.pt`` atomically; refuse to save non-finite weights over a good file."""
    state = runner.alg.save()
    for key in ("actor_state_dict", "critic_state_dict"):
        for name, t in state.get(key, {}).items():
            if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all():
                raise CheckpointError(f"refusing to save iteration {it}: {key}.{name} is not finite")
    state["iter"] = it
    state["infos"] = info
    path = run_dir / f"model_{it}.pt"
    replace_atomically(path, lambda tmp: torch.save(state, tmp))
    return path


def list_checkpoints(run_dir: Path) -> list[Path]:
    found = [(int(m.group(1)), p) for p in Path(run_dir).glob("model_*.pt") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def resolve_checkpoint(path: Path) -> Path:
    """A run directory resolves to its latest checkpoint; a file is taken as it is."""
    path = Path(path)
    if path.is_dir():
        ckpt = latest_checkpoint(path)
        if ckpt is None:
            raise CheckpointError(f"no checkpoint (model_*.pt) in {path}")
        return ckpt
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    return path


def load_checkpoint(path: Path, expect_spec: Spec | None = None) -> dict[str, Any]:
    """Load and validate a checkpoint; with ``expect_spec``, refuse one made for another Spec."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise CheckpointError(
            f"checkpoint {path} is corrupt or truncated and cannot be read ({type(e).__name__}: {e})"
        ) from e
    if not isinstance(state, dict) or "actor_state_dict" not in state or "infos" not in state:
        raise CheckpointError(f"{path} is not a reflexlab checkpoint (missing actor weights or run info)")
    info = state["infos"] or {}
    if "spec" not in info:
        raise CheckpointError(f"{path} carries no Spec; it was not written by reflexlab train")
    if expect_spec is not None:
        expect_spec.check_compatible(Spec.from_dict(info["spec"]), context=f"checkpoint {path.name}")
    return state
