"""Sampling a generative policy from numpy, as the evaluators and the ONNX parity check call it.

Lives below `policies.imitation` and `policies.generative.dagger` (both sample students), so neither
imports the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from policies.generative.policy import GenerativePolicy

_flush_depth = 0


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Flush denormal floats to zero inside the block: a U-Net step with denormals ran 40× slower here (5.3 vs 0.13 s).

    Diffusion training drives many activations towards zero; x86 handles subnormal results in
    microcode. Flushing changes nothing a float32 network can resolve. The flag is processor state
    of the whole process, so it is set only while our training or sampling runs and cleared after
    (left set, it broke hypothesis, which refuses to run without subnormals). Blocks may nest.
    """
    global _flush_depth
    if _flush_depth == 0:
        torch.set_flush_denormal(True)
    _flush_depth += 1
    try:
        yield
    finally:
        _flush_depth -= 1
        if _flush_depth == 0:
            torch.set_flush_denormal(False)


class TorchSampler:
    """A policy at a fixed step count as a batched numpy sampler (obs (N,To,n), noise (N,H,A)) → chunk.

    A policy with cameras also takes ``images``: {camera: (N, To, 3, H, W) uint8}, as its ONNX file does.
    """

    def __init__(self, policy: GenerativePolicy, steps: int | None) -> None:
        self.policy, self.steps = policy.eval(), steps

    @torch.no_grad()
    def __call__(self, obs: np.ndarray, noise: np.ndarray, images: dict[str, np.ndarray] | None = None) -> np.ndarray:
        stacked = None
        if self.policy.image_keys:
            if images is None:
                raise ValueError(f"this policy reads cameras {list(self.policy.image_keys)}: pass their images")
            stacked = torch.stack([torch.from_numpy(np.asarray(images[k])) for k in self.policy.image_keys], dim=2)
        with flush_denormals():
            chunk = self.policy.sample(torch.from_numpy(obs), torch.from_numpy(noise), self.steps, images=stacked)
        return chunk.numpy()
