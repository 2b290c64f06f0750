"""The unswitch pass: a task's padded copy versioned into a copy without the bounds test for the
tasks away from the border, on hand-written loop IR, and in a lowered depthwise convolution."""
from __future__ import annotations

import numpy as np
import pytest

from schedules.space import FixedDecisions, GeneratedSpace, SpaceOptions
from tensorir.ops.registry import get_workload
from tensorir.target import Target
from tensorir.te.expr import Binary, BinOp, Const, Select, Var, children
from tensorir.tir.ir import Allocate, For, IfThenElse, PrimFunc, Scope, Seq, Store
from tensorir.tir.transform.unswitch import MIN_INSIDE, unswitch_func
from tests.loopir import PARALLEL, UNROLLED, buf, c, ld, loop, rand, run, st


def _i(v):
    return Const(v, "int32")


def _b(op, a, b):
    return Binary(op, a, b)


def _window_sum(n: int, tile: int = 4):
    """Y[q] = X[q-1] + X[q] + X[q+1] (zero outside), per task of ``tile`` outputs through a padded
    local copy P of ``tile + 2`` values, as a convolution task pads its window."""
    X, Y = buf("X", (n,)), buf("Y", (n,))
    P = buf("P", (tile + 2,), scope=Scope.LOCAL)
    t, w, q = Var("t"), Var("w"), Var("q")
    src = _b(BinOp.SUB, _b(BinOp.ADD, _b(BinOp.MUL, t, _i(tile)), w), _i(1))
    inside = _b(BinOp.AND, _b(BinOp.GE, src, _i(0)), _b(BinOp.LT, src, _i(n)))
    copy = loop(w, tile + 2, st(P, (w,), Select(inside, ld(X, src), c(0.0))), UNROLLED)
    out = _b(BinOp.ADD, _b(BinOp.MUL, t, _i(tile)), q)
    total = _b(BinOp.ADD, _b(BinOp.ADD, ld(P, q), ld(P, _b(BinOp.ADD, q, _i(1)))), ld(P, _b(BinOp.ADD, q, _i(2))))
    compute = loop(q, tile, st(Y, (out,), total), UNROLLED)
    return PrimFunc("window_sum", (X, Y), loop(t, n // tile, Allocate(P, Seq((copy, compute))), PARALLEL))


def _selects(s) -> int:
    """Select expressions in statement ``s``."""
    if isinstance(s, Seq):
        return sum(_selects(x) for x in s.stmts)
    if isinstance(s, (For, Allocate)):
        return _selects(s.body)
    if isinstance(s, IfThenElse):
        return _selects(s.then) + (0 if s.otherwise is None else _selects(s.otherwise))
    if isinstance(s, Store):
        stack, n = [s.value, *s.indices], 0
        while stack:
            e = stack.pop()
            n += isinstance(e, Select)
            stack.extend(children(e))
        return n
    return 0


@pytest.mark.parametrize("n", [4, 8, 20, 40, 64])
def test_a_task_copy_is_versioned_for_the_whole_task_and_computes_the_same(n):
    f = _window_sum(n)
    g = unswitch_func(f)
    task = g.body.body
    if n // 4 - 2 < MIN_INSIDE * (n // 4):    # too few tasks away from the border: left as it is
        assert g is f
    else:
        # the task's whole body in two versions, split at its top; the first reads X without a test
        assert isinstance(task, IfThenElse) and isinstance(task.then, Allocate)
        assert _selects(task.then) == 0 and _selects(task.otherwise) == 1
        assert str(task.cond) == f"t * 4 - 1 >= 0 and t * 4 - {n - 4} < 0"
    assert unswitch_func(g) is g     # idempotent: the else branch's copy is not versioned again
    x = rand((n,))
    y = np.full(n, np.nan, np.float32)
    run(g, x, y)
    padded = np.concatenate([[0], x, [0]])
    np.testing.assert_allclose(y, padded[:-2] + padded[1:-1] + padded[2:], rtol=1e-6, atol=1e-6)


def test_a_copy_of_a_whole_padded_array_is_left_as_it_is():
    # the box of a root copy always includes the border: no version could ever run
    n = 10
    X, P = buf("X", (n,)), buf("P", (n + 2,))
    i = Var("i")
    src = _b(BinOp.SUB, i, _i(1))
    inside = _b(BinOp.AND, _b(BinOp.GE, src, _i(0)), _b(BinOp.LT, src, _i(n)))
    f = PrimFunc("pad", (X, P), loop(i, n + 2, st(P, (i,), Select(inside, ld(X, src), c(0.0)))))
    assert unswitch_func(f) is f


def test_a_condition_not_affine_in_the_copy_loops_is_left_as_it_is():
    n = 16
    X, Y = buf("X", (n,)), buf("Y", (n,))
    t, w = Var("t"), Var("w")
    src = _b(BinOp.FLOORDIV, _b(BinOp.ADD, _b(BinOp.MUL, t, _i(4)), w), _i(2))
    cond = _b(BinOp.LT, src, _i(6))
    body = loop(w, 4, st(Y, (_b(BinOp.ADD, _b(BinOp.MUL, t, _i(4)), w),), Select(cond, ld(X, src), c(0.0))),
                UNROLLED)
    f = PrimFunc("half", (X, Y), loop(t, 4, body, PARALLEL))
    assert unswitch_func(f) is f


@pytest.mark.parametrize("size, versioned", [(112, True), (12, False)])
def test_a_depthwise_task_reads_its_window_untested_away_from_the_border(size, versioned):
    # 112x112 in tiles of 4 columns: 91% of the tasks are inside; 12x12: half of them touch the border
    params = dict(N=1, C=32, H=size, W=size, R=3, S=3, stride=1, pad=1, cb=32, dtype="float32")
    wl = get_workload("depthwise_conv2d_nchwc")
    space = GeneratedSpace(wl.make(**params), SpaceOptions(vector_bits=512, cores=2))
    s = space.apply(FixedDecisions(space.default_decisions()))
    # lowered for the space's vector width: a narrower host cuts the masked loop in pieces (vector_chunks)
    lowered = str(s.lower(target=Target("skylake-avx512", "+avx512f,+fma", vector_bits=512, cores=2, threads=2)))
    # (a tap loop's skip of the rows on padding, decision 103, is no version)
    versions = [ln for ln in lowered.splitlines() if ln.lstrip().startswith("if ") and not ln.endswith("# skip")]
    assert lowered.count("select(") == 1 and bool(versions) == versioned
    ins = wl.inputs(seed=3, **params)
    outs = [np.full(t.shape, np.nan, t.dtype) for t in s.tensors if not t.is_placeholder]
    s.build()(*ins, *outs)
    np.testing.assert_allclose(outs[0], wl.reference(ins, **params)[0], rtol=1e-4, atol=1e-4)
