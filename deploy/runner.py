"""Run an exported reflexlab policy with onnxruntime: the inference core of every policy node.

`OnnxPolicy` reads the Spec from the model, refuses a robot whose Spec differs (naming the
field), assembles observations from named terms in the Spec's order, checks shapes and values
with messages that say what is wrong (not an onnxruntime stack trace), and turns the raw action
into joint targets with the Spec's scale and offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from reflexlab.spec import Spec


class PolicyInputError(ValueError):
    """An observation the policy cannot take; the message names the term or the shape."""


class OnnxPolicy:
    """An exported policy on onnxruntime's CPU provider.

    Args:
        path: the `.onnx` file written by `reflexlab export`.
        robot_spec: the robot's Spec; when given, a model for another robot is refused.
        threads: onnxruntime intra-op threads (1 keeps latency predictable beside a control loop).
    """

    def __init__(self, path: Path, robot_spec: Spec | None = None, threads: int = 1) -> None:
        import onnxruntime as ort

        from deploy.artifact import INPUT_NAME, OUTPUT_NAME, spec_of

        self.path = Path(path)
        self.spec = spec_of(self.path)  # raises with the file's name when missing/corrupt/foreign
        if robot_spec is not None:
            robot_spec.check_compatible(self.spec, context=f"model {self.path.name} vs robot")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        self._input, self._output = INPUT_NAME, OUTPUT_NAME
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
        if not np.isfinite(x).all():
            bad = np.argwhere(~np.isfinite(x))[0][-1]
            term = next(n for n, sl in self._slices.items() if sl.start <= bad < sl.stop)
            raise PolicyInputError(f"observation term {term!r} is not finite (index {bad})")
        out = self.session.run([self._output], {self._input: x})[0]
        return out[0] if single else out

    def joint_targets(self, action: np.ndarray) -> np.ndarray:
        """Joint-position targets (rad) from raw actions: offset + scale * action (no limits: see `deploy.safety`)."""
        return self._offset + self._scale * np.asarray(action, dtype=np.float64)
