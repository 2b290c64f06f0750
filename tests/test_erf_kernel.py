"""Erf and Gelu compiled with their heuristic start (a select-free sign, so the polynomial runs once
per element) against numpy, at sizes the vector width does not divide, both signs and large |x|."""
from __future__ import annotations

import math

import numpy as np
import pytest

from graph.builder import GraphBuilder
from graph.fusion import fuse
from graph.lower import lower_group
from logs.apply import heuristic_schedule
from tensorir.runtime import build

ERF = np.vectorize(math.erf)


def compiled(op, shape, dtype, **attrs):
    b = GraphBuilder("t")
    g = b.build([b.op(op, [b.input("x", shape, dtype)], **attrs)])
    (group,) = fuse(g)
    return build(heuristic_schedule(lower_group(g, group, {}).tensors).lower())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["Erf", "Gelu"])
def test_erf_and_gelu_kernels_match_numpy(op, dtype):
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(37 * 45 - 8) * 3, [0.0, -0.0, 1e-8, -1e-8, 6.0, -6.0, 40.0, -40.0]])
    x = x.reshape(37, 45).astype(dtype)
    y = np.full(x.shape, np.nan, dtype)
    compiled(op, x.shape, dtype)(x, y)
    xd = x.astype(np.float64)
    want = ERF(xd) if op == "Erf" else 0.5 * xd * (1 + ERF(xd / math.sqrt(2)))
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-6 * max(1.0, float(np.abs(want).max())) if op == "Gelu" else 1e-6)
    if op == "Erf":      # odd: the sign factor gives -erf(|x|) exactly
        np.testing.assert_array_equal(y[x < 0], -compiled_abs(x, dtype)[x < 0])


def compiled_abs(x, dtype):
    y = np.full(x.shape, np.nan, dtype)
    compiled("Erf", x.shape, dtype)(np.abs(x), y)
    return y
