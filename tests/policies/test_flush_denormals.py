"""Denormal flushing is scoped: on inside training and sampling, off again afterwards."""

from __future__ import annotations

import torch

from policies.generative.sampler import flush_denormals

TINY = torch.tensor([1e-40], dtype=torch.float32)  # a float32 subnormal


def _kept() -> bool:
    return bool((TINY * 1.0).item() != 0.0)


def test_flushing_is_scoped_and_nests() -> None:
    assert _kept()
    with flush_denormals():
        assert not _kept()
        with flush_denormals():
            assert not _kept()
        assert not _kept()  # the inner block leaves the outer one's setting
    assert _kept()
