"""Vector loads whose lanes follow a constant pattern (decision 076): a window load and a shuffle, or
two loads within the span, instead of a gather; compared with numpy, with the rows placed against
unreadable pages so that a read outside what the lanes ask for faults."""
from __future__ import annotations

import numpy as np
import pytest

import tensorir.codegen.vector as vector
from tensorir.codegen import codegen
from tensorir.te.expr import Binary, BinOp, Var
from tensorir.tir.ir import PrimFunc

from tests.loopir import SERIAL, UNROLLED, VECTORIZED, _e, buf, ld, loop, rand, run, st
from tests.test_codegen import guarded


def _div(a, b):
    return Binary(BinOp.FLOORDIV, a, _e(b))


def _mod(a, b):
    return Binary(BinOp.MOD, a, _e(b))


def _groups(lanes: int, g: int, unrolled: bool):
    """``Y[i, k] = X[i, (k // g) * g + c]`` summed over c < g: a grouped conv's block-diagonal read."""
    X, Y = buf("X", (3, lanes)), buf("Y", (3, lanes))
    i, k, c = Var("i"), Var("k"), Var("c")
    body = st(Y, (i, k), ld(Y, i, k) + ld(X, i, _div(k, g) * _e(g) + c))
    f = PrimFunc(f"groups{lanes}_{g}_{unrolled}", (X, Y),
                 loop(i, 3, loop(c, g, loop(k, lanes, body, VECTORIZED), UNROLLED if unrolled else SERIAL)))
    x = rand((3, lanes))
    want = np.stack([x[:, (np.arange(lanes) // g) * g + j] for j in range(g)]).sum(0)
    return f, x, want


@pytest.mark.parametrize("lanes,g", [(16, 4), (8, 4), (16, 2), (8, 8), (16, 16)])
@pytest.mark.parametrize("unrolled", [True, False])
def test_group_reads_are_window_loads_and_shuffles(lanes, g, unrolled):
    f, x, want = _groups(lanes, g, unrolled)
    text = str(codegen(f))
    assert "masked.gather" not in text and "shufflevector" in text
    if unrolled:             # a constant place in the row: one whole-row load per group channel
        assert f"load <{lanes} x float>" in text
    y = np.zeros_like(x)
    run(f, x, y)
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_pattern_loads_off_fall_back_to_a_gather():
    f, x, want = _groups(16, 4, True)
    try:
        vector.PATTERN_LOADS = False
        assert "masked.gather" in str(codegen(f))
    finally:
        vector.PATTERN_LOADS = True


@pytest.mark.parametrize("at", ["start", "end"])
def test_upsampling_reads_only_its_span(at):
    # Y[q] = X[q // 2 + 1]: lanes read X[1..8] of a 9-element X placed against an unreadable page on
    # either side; a load of a whole vector from X[1] or ending at X[8] + 7 would fault
    n, lanes = 9, 16
    X, Y = buf("X", (n,)), buf("Y", (lanes,))
    q = Var("q")
    f = PrimFunc(f"up_{at}", (X, Y), loop(q, lanes, st(Y, (q,), ld(X, _div(q, 2) + _e(1))), VECTORIZED))
    assert "masked.gather" not in str(codegen(f))
    x, y = guarded(n, at=at), np.zeros(lanes, np.float32)
    x[:] = rand(n)
    run(f, x, y)
    np.testing.assert_array_equal(y, x[np.arange(lanes) // 2 + 1])


@pytest.mark.parametrize("at", ["start", "end"])
def test_a_lane_free_offset_reads_two_loads_within_the_span(at):
    # Y[o, q] = X[o * 3 + q % 4 * 2]: the offset o * 3 is not constant (no row window); the lanes
    # span 7 elements (two loads of 4 inside them)
    n, lanes = 3 * 3 + 7, 16
    X, Y = buf("X", (n,)), buf("Y", (4, lanes))
    o, q = Var("o"), Var("q")
    f = PrimFunc(f"span_{at}", (X, Y), loop(o, 4, loop(q, lanes, st(Y, (o, q), ld(X, o * _e(3) + _mod(q, 4) * _e(2))),
                                                       VECTORIZED)))
    text = str(codegen(f))
    assert "masked.gather" not in text and "load <4 x float>" in text
    x, y = guarded(n, at=at), np.zeros((4, lanes), np.float32)
    x[:] = rand(n)
    run(f, x, y)
    want = np.stack([x[r * 3 + (np.arange(lanes) % 4) * 2] for r in range(4)])
    np.testing.assert_array_equal(y, want)


def test_a_wide_spread_pattern_loads_each_element_once():
    # Y[q] = X[(q % 2) * 40 + q // 2]: a span of 48 elements, past two vectors: scalar loads
    X, Y = buf("X", (48,)), buf("Y", (16,))
    q = Var("q")
    f = PrimFunc("spread", (X, Y), loop(q, 16, st(Y, (q,), ld(X, _mod(q, 2) * _e(40) + _div(q, 2))), VECTORIZED))
    text = str(codegen(f))
    assert "masked.gather" not in text and text.count("load float") == 16
    x, y = rand(48), np.zeros(16, np.float32)
    run(f, x, y)
    np.testing.assert_array_equal(y, x[(np.arange(16) % 2) * 40 + np.arange(16) // 2])


def test_a_pattern_mixed_with_another_variable_stays_a_gather():
    # X[(q + o) // 2]: the lane term involves o: no constant pattern
    X, Y = buf("X", (24,)), buf("Y", (4, 16))
    o, q = Var("o"), Var("q")
    f = PrimFunc("mixed", (X, Y), loop(o, 4, loop(q, 16, st(Y, (o, q), ld(X, _div(q + o, 2))), VECTORIZED)))
    assert "masked.gather" in str(codegen(f))
    x, y = rand(24), np.zeros((4, 16), np.float32)
    run(f, x, y)
    np.testing.assert_array_equal(y, np.stack([x[(np.arange(16) + r) // 2] for r in range(4)]))
