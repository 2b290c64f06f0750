"""Register promotion, vector chunks, SIMD exp and the fast LLVM pipeline vs -O3, against numpy
(hand-written nests go through the promote and vector_chunks passes first, as lowered ones do:
``tests.loopir.prepared``; the chunk widths themselves are tested in test_passes.py)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.loopir import SERIAL, UNROLLED, VECTORIZED, buf, c, ld, loop, prepared, rand, rng, run, st
from tensorir.runtime import llvm as runtime
from tensorir.target import Target
from tensorir.runtime import compile_func
from tensorir.te.expr import Binary, BinOp, Const, Unary, UnOp, Var
from tensorir.tir.ir import Allocate, IfThenElse, PrimFunc, Scope, seq


def _row_sum(n, m, vec=False):
    """acc[i] = sum_k X[i, k], k outer, i inner (vectorized or serial): acc is invariant in k... per i."""
    X, acc = buf("X", (n, m)), buf("acc", (n,))
    i, k = Var("i"), Var("k")
    init = loop(i, n, st(acc, [i], c(0.0)), VECTORIZED if vec else SERIAL)
    upd = loop(k, m, loop(i, n, st(acc, [i], Binary(BinOp.ADD, ld(acc, i), ld(X, i, k))),
                          VECTORIZED if vec else SERIAL))
    return PrimFunc("row_sum", (X, acc), seq(init, upd))


def test_promote_keeps_vector_accumulator_of_serial_loop():
    from tensorir.tir.transform.promote import invariant_elements, promote
    f = _row_sum(16, 37, vec=True)
    upd = f.body.stmts[1]
    (found,) = invariant_elements(upd)
    assert found[0].name == "acc" and [lp.kind for lp in found[2]] == [VECTORIZED]
    out = promote(f.body)
    text = str(PrimFunc("p", f.params, out))
    assert "acc.reg0" in text
    x, a = rand((16, 37)), np.zeros(16, np.float32)
    run(f, x, a)
    np.testing.assert_allclose(a, x.sum(1), rtol=1e-5, atol=1e-5)


def test_promote_refuses_unsafe_elements():
    from tensorir.tir.transform.promote import invariant_elements
    X, acc = buf("X", (8, 9)), buf("acc", (8,))
    i, k = Var("i"), Var("k")
    # element depends on a serial inner loop: not one element
    upd = loop(k, 9, loop(i, 8, st(acc, [i], Binary(BinOp.ADD, ld(acc, i), ld(X, i, k)))))
    assert invariant_elements(upd) == []
    # conditional store: the element might never be written
    cond = Binary(BinOp.LT, k, Const(3, "int32"))
    upd = loop(k, 9, IfThenElse(cond, st(acc, [0], Binary(BinOp.ADD, ld(acc, 0), ld(X, 0, k)))))
    assert invariant_elements(upd) == []
    # two different elements of one buffer: a load of acc[1] could see a stale value
    upd = loop(k, 9, seq(st(acc, [0], Binary(BinOp.ADD, ld(acc, 1), ld(X, 0, k)))))
    assert invariant_elements(upd) == []
    # scalar accumulator: promoted
    upd = loop(k, 9, st(acc, [2], Binary(BinOp.ADD, ld(acc, 2), ld(X, 2, k))))
    assert [(b.name, v) for b, _, v in invariant_elements(upd)] == [("acc", [])]


@pytest.mark.parametrize("vec", [False, True])
def test_promoted_reductions_match_numpy_on_both_pipelines(vec):
    f = _row_sum(13 if not vec else 16, 29, vec=vec)
    x = rand(f.params[0].shape)
    for cfg in (runtime.OptConfig(pipeline="fast"), runtime.OptConfig(pipeline="default")):
        a = np.full(f.params[1].shape, 7.0, np.float32)
        compile_func(prepared(f), cfg)(x, a)
        np.testing.assert_allclose(a, x.sum(1), rtol=1e-5, atol=1e-5)


def test_masked_register_tile_keeps_masked_lanes():
    """A masked store into a stack tile (plain load/select/store) leaves masked-off lanes alone."""
    A, out = buf("A", (16,)), buf("out", (16,))
    T = buf("T", (16,), scope=Scope.LOCAL)
    j = Var("j")
    fill = loop(j, 16, st(T, [j], c(5.0)), VECTORIZED)
    cond = Binary(BinOp.LT, j, Const(11, "int32"))
    masked = loop(j, 16, IfThenElse(cond, st(T, [j], Binary(BinOp.ADD, ld(T, j), ld(A, j)))), VECTORIZED)
    back = loop(j, 16, st(out, [j], ld(T, j)), VECTORIZED)
    f = PrimFunc("masked_tile", (A, out), Allocate(T, seq(fill, masked, back)))
    a = rand(16)
    for cfg in (runtime.OptConfig(pipeline="fast"), runtime.OptConfig(pipeline="default")):
        o = np.zeros(16, np.float32)
        compile_func(prepared(f), cfg)(a, o)
        expect = np.full(16, 5.0, np.float32)
        expect[:11] += a[:11]
        np.testing.assert_allclose(o, expect, rtol=1e-6)


def test_fast_and_default_pipelines_agree_on_a_tiled_matmul():
    from schedules import Schedule
    from tensorir import ops
    lanes = Target.host().lanes32
    s = Schedule(ops.matmul(37, 2 * lanes + 3, 19)).cache_write("C")
    s = s.tile(["C.i", "C.j"], [5, lanes]).compute_at("C_local", "C.j.0")
    s = s.reorder("C_local.k", "C_local.i", "C_local.j").unroll("C_local.i").vectorize("C_local.j")
    s = s.vectorize("C.j.1")
    f = s.lower()
    a, b = rand((37, 19)), rand((19, 2 * lanes + 3))
    outs = []
    for cfg in (runtime.OptConfig(pipeline="fast"), runtime.OptConfig(pipeline="default")):
        o = np.zeros((37, 2 * lanes + 3), np.float32)
        compile_func(f, cfg)(a, b, o)
        outs.append(o)
    np.testing.assert_allclose(outs[0], a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def test_opt_config_rejects_unknown_pipeline():
    with pytest.raises(ValueError, match="pipeline"):
        runtime.OptConfig(pipeline="O7")


@pytest.mark.parametrize("n", [23, 48, 58])
def test_non_power_of_two_vector_loops_with_masks_and_shifted_reads(n):
    """Vector loops cut into chunks: masked stores, reads at var+1, a reduction tile."""
    A, out = buf("A", (3, n + 1)), buf("out", (3, n))
    i, j = Var("i"), Var("j")
    cond = Binary(BinOp.LT, j, Const(n - 3, "int32"))
    val = Binary(BinOp.MUL, ld(A, i, Binary(BinOp.ADD, j, Const(1, "int32"))), c(2.0))
    body = loop(i, 3, seq(loop(j, n, st(out, [i, j], c(-1.0)), VECTORIZED),
                          loop(j, n, IfThenElse(cond, st(out, [i, j], val)), VECTORIZED)))
    f = PrimFunc(f"chunks{n}", (A, out), body)
    a, o = rand((3, n + 1)), np.zeros((3, n), np.float32)
    run(f, a, o)
    want = np.full((3, n), -1.0, np.float32)
    want[:, :n - 3] = 2 * a[:, 1:n - 2]
    np.testing.assert_allclose(o, want, rtol=1e-6)


def test_attached_stage_is_not_versioned_again_inside_the_full_tile_copy():
    """The consumer's full-tile copy already checked the edge condition the attached producer needs."""
    from schedules import Schedule
    from tensorir import ops
    s = Schedule(ops.matmul(40, 70, 9)).cache_write("C").tile(["C.i", "C.j"], [4, 24])
    s = s.split("C.i.0", factor=2).reorder("C.i.0.0", "C.j.0", "C.i.0.1")
    s = s.compute_at("C_local", "C.i.0.1").reorder("C_local.k", "C_local.i", "C_local.j")
    s = s.unroll("C_local.i").vectorize("C_local.j").vectorize("C.j.1")
    f = s.lower()
    text = str(f)
    assert text.count("if C.j.0 * 24 < 47:") == 1, text
    a, b = rand((40, 9)), rand((9, 70))
    o = np.zeros((40, 70), np.float32)
    run(f, a, b, o)
    np.testing.assert_allclose(o, a @ b, rtol=1e-4, atol=1e-4)


def _run_unary(op, lanes: int, a):
    """``op(a)`` through a loop nest whose inner loop is ``lanes`` wide and vectorized."""
    n = len(a)
    A, B = buf("A", (n,)), buf("B", (n,))
    i, j = Var("i"), Var("j")
    idx = Binary(BinOp.ADD, Binary(BinOp.MUL, i, Const(lanes, "int32")), j)
    body = loop(i, n // lanes, loop(j, lanes, st(B, [idx], Unary(op, ld(A, idx))), VECTORIZED))
    out = np.empty_like(a)
    run(PrimFunc(f"unary{lanes}", (A, B), body), a, out)
    return out


@pytest.mark.parametrize("lanes", [16, 8, 5])
def test_vector_exp_is_accurate_over_the_whole_float32_range(lanes):
    """The SIMD exp polynomial: within 1 ulp of exp, inf/0/NaN/denormals as numpy (the clamp at
    [-110, 89] and the two-factor 2**k are what keep the ends right without selects)."""
    n = 4080                                  # a multiple of every lane count tested
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.72, 88.7228, 88.73, 89.5, 1e30, -103.9,
                         -103.97, -104.0, -110.5, -1e30, 1e-30, -87.3, -100.5], np.float32)
    a = np.concatenate([specials, rng.uniform(-104, -87, 1000).astype(np.float32),
                        rng.uniform(-104, 89, n - len(specials) - 1000).astype(np.float32)])
    out = _run_unary(UnOp.EXP, lanes, a)
    with np.errstate(over="ignore"):
        want = np.exp(a)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(out[~np.isfinite(want)], want[~np.isfinite(want)])
    np.testing.assert_array_equal(out[want == 0], 0.0)
    fin = np.isfinite(want)
    ulps = np.abs(out[fin].astype(np.float64) - np.exp(a[fin].astype(np.float64))) / np.spacing(want[fin])
    assert ulps.max() <= 1.0, (ulps.max(), a[fin][ulps.argmax()])


@pytest.mark.parametrize("lanes", [16, 8, 5])
def test_vector_tanh_is_accurate_over_the_whole_float32_range(lanes):
    """The SIMD tanh (polynomial below 0.625, exp above): a few ulp from tanh, specials as numpy."""
    n = 4080                                  # a multiple of every lane count tested
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-30, 0.6249999, 0.625, -0.625,
                         9.0, 44.0, 45.0, -90.0, 1e30], np.float32)
    a = np.concatenate([specials, rng.uniform(-1, 1, 1000).astype(np.float32),
                        rng.uniform(-12, 12, n - len(specials) - 1000).astype(np.float32)])
    out = _run_unary(UnOp.TANH, lanes, a)
    want = np.tanh(a.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    assert np.signbit(out[4]) and out[3] == 0.0 and out[5] == a[5]          # -0.0, 0.0, a denormal
    fin = ~np.isnan(want)
    ulps = np.abs(out[fin].astype(np.float64) - want[fin]) / np.spacing(np.abs(want[fin]).astype(np.float32))
    assert ulps.max() <= 3.0, (ulps.max(), a[fin][ulps.argmax()])


@pytest.mark.parametrize("lanes", [16, 8, 5])
def test_vector_log_is_accurate_over_the_whole_float32_range(lanes):
    """The SIMD log (exponent bits + polynomial): a few ulp from log, specials and denormals as numpy."""
    n = 4080                                  # a multiple of every lane count tested
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0, 1e-45, 3e-39, 1.1754942e-38,
                         1.1754944e-38, 0.70710677, 0.7071068, 3.4e38, 1.0000001, 0.99999994], np.float32)
    a = np.concatenate([specials, rng.uniform(0.5, 2.0, 1000).astype(np.float32),
                        (10.0 ** rng.uniform(-44, 38, n - len(specials) - 1000)).astype(np.float32)])
    out = _run_unary(UnOp.LOG, lanes, a)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(a.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(out[np.isinf(want)], want[np.isinf(want)])
    fin = np.isfinite(want)
    ulps = np.abs(out[fin].astype(np.float64) - want[fin]) / np.spacing(np.abs(want[fin]).astype(np.float32))
    ulps[want[fin] == 0] = np.abs(out[fin][want[fin] == 0]) / np.spacing(np.float32(0))   # log(1) == 0 exactly
    assert ulps.max() <= 3.0, (ulps.max(), a[fin][ulps.argmax()])


def test_accumulator_tiles_are_promoted_around_invariant_loops_and_repeated_bodies():
    """acc[i1, j] updated under serial c/r loops (invariant) and an unrolled k (repeated) -> LOCAL tiles."""
    from tensorir.tir.transform.promote import invariant_elements, promote, repeated_tiles
    X, acc = buf("X", (5, 4, 3, 16)), buf("acc", (3, 16))
    c, r, k, i1, j = Var("c"), Var("r"), Var("k"), Var("i1"), Var("j")
    upd = st(acc, [i1, j], Binary(BinOp.ADD, ld(acc, i1, j), ld(X, c, r, i1, j)))
    tile = loop(i1, 3, loop(j, 16, upd, VECTORIZED), UNROLLED)
    nest = loop(c, 5, loop(r, 4, tile))
    (found,) = invariant_elements(nest)
    assert found[0].name == "acc" and [lp.kind for lp in found[2]] == [UNROLLED, VECTORIZED]
    body_k = loop(k, 2, loop(i1, 3, loop(j, 16, st(acc, [i1, j], Binary(
        BinOp.ADD, ld(acc, i1, j), ld(X, k, 0, i1, j))), VECTORIZED), UNROLLED), UNROLLED)
    assert [b.name for b, _, _ in repeated_tiles(body_k)] == ["acc"]
    assert repeated_tiles(tile) == []                     # each element touched once: nothing gained
    text = str(PrimFunc("p", (X, acc), promote(nest)))
    assert "acc.reg0 = alloc_local([3, 16]" in text, text
    x, a = rand((5, 4, 3, 16)), rand((3, 16))
    want = a + x.sum((0, 1))
    for cfg in (runtime.OptConfig(pipeline="fast"), runtime.OptConfig(pipeline="default")):
        o = a.copy()
        compile_func(prepared(PrimFunc("tiles", (X, acc), nest)), cfg)(x, o)
        np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-5)


def test_a_tile_loop_body_split_into_full_tiles_and_a_guarded_edge_promotes_the_full_side():
    """A serial tile loop whose body is ``if full: <unrolled reduction> else: <guarded edge>`` (a
    register tile that does not divide the row): the full side's accumulators go to registers (left
    in memory they made a blocked 1x1 conv run at a fifth of its speed on AVX2); the guarded side,
    whose stores are conditional, stays as it is; both compute the sums."""
    from tensorir.tir.transform.promote import promote
    X, acc = buf("X", (4, 7, 8)), buf("acc", (7, 8))
    t0, c, i1, j = Var("t0"), Var("c"), Var("i1"), Var("j")

    def body(guarded):
        col = Binary(BinOp.ADD, Binary(BinOp.MUL, t0, Const(3, "int32")), i1)
        upd = loop(j, 8, st(acc, [col, j], Binary(BinOp.ADD, ld(acc, col, j), ld(X, c, col, j))), VECTORIZED)
        if guarded:
            upd = IfThenElse(Binary(BinOp.LT, col, Const(7, "int32")), upd)
        return loop(c, 4, loop(i1, 3, upd, UNROLLED), UNROLLED)
    full = Binary(BinOp.LT, Binary(BinOp.MUL, t0, Const(3, "int32")), Const(5, "int32"))
    nest = loop(t0, 3, IfThenElse(full, body(False), body(True)))
    text = str(PrimFunc("p", (X, acc), promote(nest)))
    assert text.count("alloc_local([3, 8]") == 1, text
    x, a = rand((4, 7, 8)), rand((7, 8))
    o = a.copy()
    compile_func(prepared(PrimFunc("edge", (X, acc), nest)), runtime.OptConfig(pipeline="fast"))(x, o)
    np.testing.assert_allclose(o, a + x.sum(0), rtol=1e-5, atol=1e-5)


def test_a_tile_initialized_then_updated_under_an_unrolled_window_is_one_register_tile():
    """``acc[p, j] = 0`` then ``acc[p, j] += X[p + r, j + s]`` under unrolled r, s in one serial row loop
    (a depthwise conv's row on a padded copy: the copy's row index makes the window loop a register-tile
    walk, so the row is a straight-line body): the column loop variable is bound by the initialization
    and the update, the same 16 columns, so the row goes to one register tile.  Bound by loops of other
    extents, the variable names different elements and the tile stays in memory."""
    from tensorir.tir.transform.promote import promote
    X, acc = buf("X", (6, 19)), buf("acc", (4, 16))
    p, r, s_, j = Var("p"), Var("r"), Var("s"), Var("j")

    def nest(init_cols):
        init = loop(j, init_cols, st(acc, [p, j], c(0.0)), VECTORIZED)
        upd = st(acc, [p, j], Binary(BinOp.ADD, ld(acc, p, j), ld(X, Binary(BinOp.ADD, p, r),
                                                                  Binary(BinOp.ADD, j, s_))))
        window = loop(r, 3, loop(s_, 3, loop(j, 16, upd, VECTORIZED), UNROLLED), UNROLLED)
        return loop(p, 4, seq(init, window))
    text = str(PrimFunc("p", (X, acc), promote(nest(16))))
    assert "acc.reg0 = alloc_local([16]" in text, text
    assert "acc.reg" not in str(PrimFunc("p", (X, acc), promote(nest(8))))
    x = rand((6, 19))
    want = sum(x[r:r + 4, s:s + 16] for r in range(3) for s in range(3))
    for cfg in (runtime.OptConfig(pipeline="fast"), runtime.OptConfig(pipeline="default")):
        o = rand((4, 16))
        compile_func(prepared(PrimFunc("rows", (X, acc), nest(16))), cfg)(x, o)
        np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-5)
