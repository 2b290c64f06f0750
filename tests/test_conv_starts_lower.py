"""Every blocked convolution's heuristic start lowers, at AVX2's and AVX-512's vector widths, over block
sizes and shapes that neither network here has: a start that fails to lower leaves a model's group to the
naive loop nest (a 1x1 96 -> 24 in blocks of 8 did on AVX-512: its prefetch loop read 48 lines a tap)."""
from __future__ import annotations

import itertools

import pytest

from schedules.space import FixedDecisions, GeneratedSpace, SpaceOptions
from tensorir.ops.registry import get_workload

SHAPES = [  # C, K, R, stride, pad, H
    (96, 24, 1, 1, 0, 9), (24, 96, 1, 1, 0, 10), (64, 40, 3, 1, 1, 9), (40, 64, 3, 2, 1, 11),
    (128, 8, 1, 2, 0, 8), (8, 136, 3, 1, 1, 7), (256, 56, 1, 1, 0, 5), (32, 96, 5, 1, 2, 8),
]


@pytest.mark.parametrize("bits", [256, 512])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "c{}-k{}-r{}s{}".format(*s[:4]))
def test_blocked_conv_starts_lower(bits, shape):
    C, K, R, stride, pad, H = shape
    tried = 0
    for cb, kb in itertools.product((8, 16, 32), repeat=2):
        if C % cb or K % kb:
            continue
        tensors = get_workload("conv2d_nchwc").make(N=1, C=C, H=H, W=H + 1, K=K, R=R, S=R, stride=stride, pad=pad,
                                                     cb=cb, kb=kb)
        space = GeneratedSpace(tensors, SpaceOptions(vector_bits=bits, cores=2))
        space.apply(FixedDecisions(space.default_decisions())).lower()     # raises if the start does not lower
        tried += 1
    assert tried
