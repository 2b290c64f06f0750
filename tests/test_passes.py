"""Lowering as a list of passes: each pass alone on hand-written loop IR, the pipeline's order and
printing, idempotence on real schedules, and the parts of loop_nest (bound inference, guards) alone."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest

from schedules import Schedule
from schedules.lowering import PASS_NAMES, SCHEDULED, apply_passes, lower, lower_steps
from schedules.lowering.bounds import infer_bounds
from schedules.lowering.guards import GuardScope, for_all_inner
from schedules.space import FixedDecisions, GeneratedSpace, SpaceOptions
from tensorir.codegen import codegen
from tensorir.ops.registry import get_workload
from tensorir.te.expr import Binary, BinOp, Const, Select, Var
from tensorir.tir.analysis import affine, int_range
from tensorir.tir.ir import Allocate, ForKind, IfThenElse, PrimFunc, Scope, Seq, Store
from tensorir.tir.transform.promote import promote_func
from tensorir.tir.transform.simplify import simplify_func
from tensorir.tir.transform.vector_chunks import chunk_vectors, vector_chunks
from tests.conftest import GOLDEN_TARGET, conv_wl, matmul_wl
from tests.loopir import SERIAL, UNROLLED, VECTORIZED, buf, c, ld, loop, rand, run, st


def _i(v):
    return Const(v, "int32")


def add(a, b):
    return Binary(BinOp.ADD, a, b)


def mul(a, b):
    return Binary(BinOp.MUL, a, b)


# ------------------------------------------------------------------ the pipeline

def test_passes_in_order():
    assert PASS_NAMES == ("loop_nest", "simplify", "unswitch", "promote", "vector_chunks")
    assert SCHEDULED in PASS_NAMES
    s = Schedule(matmul_wl())
    assert [name for name, _ in lower_steps(s, GOLDEN_TARGET)] == list(PASS_NAMES)
    assert [name for name, _ in s.lower_steps(target=GOLDEN_TARGET)] == list(PASS_NAMES)
    assert [name for name, _ in lower_steps(s, GOLDEN_TARGET, until="promote")] == list(PASS_NAMES[:4])


def test_lower_is_the_last_step_and_prints_after_the_passes_asked_for():
    s = Schedule(matmul_wl()).split("C.j", factor=12).reorder("C.i", "C.j.0", "C.k", "C.j.1").vectorize("C.j.1")
    steps = lower_steps(s, GOLDEN_TARGET)
    assert lower(s, GOLDEN_TARGET) == steps[-1][1] == s.lower(target=GOLDEN_TARGET)
    assert s.lower(target=GOLDEN_TARGET, until=SCHEDULED) == dict(steps)[SCHEDULED]
    out = io.StringIO()
    lower(s, GOLDEN_TARGET, print_after=True, file=out)
    headers = [ln for ln in out.getvalue().splitlines() if ln.startswith("# after ")]
    assert headers == [f"# after {name}" for name in PASS_NAMES]
    out = io.StringIO()
    lower(s, GOLDEN_TARGET, print_after=["promote"], file=out)
    assert out.getvalue() == f"# after promote\n{dict(steps)['promote']}\n"
    with pytest.raises(ValueError, match="unknown lowering pass"):
        lower(s, print_after=["promotion"])
    with pytest.raises(ValueError, match="unknown lowering pass"):
        lower_steps(s, until="codegen")


def test_each_pass_leaves_its_mark_on_a_vectorized_matmul():
    s = Schedule(matmul_wl()).split("C.j", factor=12).reorder("C.i", "C.j.0", "C.k", "C.j.1").vectorize("C.j.1")
    steps = dict(lower_steps(s, GOLDEN_TARGET))
    assert "// 12" not in str(steps["simplify"]) and "C.reg0" not in str(steps["simplify"])
    assert "C.reg0" in str(steps["promote"]) and "range(12):  # vectorized" in str(steps["promote"])
    final = str(steps["vector_chunks"])
    assert "range(12):  # vectorized" not in final
    assert "range(8):  # vectorized" in final and "range(4):  # vectorized" in final
    # vector pieces follow the target: 16-lane registers make one 8-lane and one 4-lane piece too,
    # but a 4-lane (SSE) target cuts 12 into three 4-lane pieces
    sse = GOLDEN_TARGET.__class__("x86-64", "+sse4.2", vector_bits=128, cores=1, threads=1)
    assert str(s.lower(target=sse)).count("range(4):  # vectorized") > final.count("range(4):  # vectorized")


@pytest.mark.parametrize("case", ["readme_matmul", "tiled_odd_matmul", "conv2d_start", "softmax_start",
                                  "chunked_conv2d_start"])
def test_passes_are_idempotent_on_lowered_schedules(case):
    """Codegen gets the function lowering printed: running any pass again changes nothing
    (promote finds no accumulator left to promote, vector_chunks no loop left to cut)."""
    s = _schedule(case)
    steps = lower_steps(s, GOLDEN_TARGET)
    for name, func in steps[1:]:
        assert apply_passes(func, GOLDEN_TARGET, [name]) is func, name
    final = steps[-1][1]
    assert promote_func(final) is final
    assert chunk_vectors(final, 8) is final


def _schedule(case):
    from tensorir.ops.registry import get_workload
    if case == "readme_matmul":
        s = Schedule(matmul_wl(64, 96, 48)).pack("B", {1: 16}, order=["1.o", "0", "1.i"]).cache_write("C")
        s = s.tile(["C.i", "C.j"], [4, 16]).compute_at("C_local", "C.j.0")
        s = s.reorder("C_local.k", "C_local.i", "C_local.j").unroll("C_local.i").vectorize("C_local.j")
        return s.vectorize("C.j.1").parallel("C.i.0")
    if case == "tiled_odd_matmul":
        s = Schedule(matmul_wl()).cache_write("C").tile(["C.i", "C.j"], [5, 12]).compute_at("C_local", "C.j.0")
        return s.reorder("C_local.k", "C_local.i", "C_local.j").unroll("C_local.i").vectorize("C_local.j")
    name, opts = {"conv2d_start": ("conv2d", SpaceOptions(256, 2)), "softmax_start": ("softmax", SpaceOptions(256, 2)),
                  "chunked_conv2d_start": ("conv2d", SpaceOptions(512, 4))}[case]
    wl = get_workload(name)
    space = GeneratedSpace(wl.make(**wl.defaults), opts)
    return space.apply(FixedDecisions(space.default_decisions()))


def test_codegen_compiles_the_function_as_given():
    """No promotion or vector pieces inside codegen any more: a 12-lane loop stays one 12-lane vector
    unless the vector_chunks pass cut it."""
    A, B = buf("A", (12,)), buf("B", (12,))
    i = Var("i")
    f = PrimFunc("copy12", (A, B), loop(i, 12, st(B, (i,), ld(A, i)), VECTORIZED))
    assert "<12 x float>" in str(codegen(f, GOLDEN_TARGET))
    cut = str(codegen(chunk_vectors(f, 8), GOLDEN_TARGET))
    assert "<12 x float>" not in cut and "<8 x float>" in cut and "<4 x float>" in cut


# ------------------------------------------------------------------ simplify

def test_simplify_pass_uses_the_loop_ranges_and_keeps_guards():
    A, B = buf("A", (64,)), buf("B", (64,))
    i0, i1 = Var("i0"), Var("i1")
    flat = add(mul(i0, _i(16)), i1)
    guard = Binary(BinOp.LT, add(flat, _i(0)), _i(60))
    body = IfThenElse(guard, st(B, (flat,), ld(A, Binary(BinOp.MOD, flat, _i(64)))))
    f = PrimFunc("p", (A, B), loop(i0, 4, loop(i1, 16, body)))
    g = simplify_func(f)
    text = str(g)
    assert "A[i0 * 16 + i1]" in text            # (i0*16 + i1) % 64 with i0 < 4, i1 < 16
    assert "if i0 * 16 + i1 + 0 < 60" in text    # guards are loop_nest's: left as they are
    assert simplify_func(g) is g
    unchanged = PrimFunc("q", (A, B), loop(i0, 64, st(B, (i0,), ld(A, i0))))
    assert simplify_func(unchanged) is unchanged


# ------------------------------------------------------------------ promote

def _row_sum(n, m):
    X, acc = buf("X", (n, m)), buf("acc", (n,))
    i, k = Var("i"), Var("k")
    init = loop(i, n, st(acc, [i], c(0.0)), VECTORIZED)
    upd = loop(k, m, loop(i, n, st(acc, [i], add(ld(acc, i), ld(X, i, k))), VECTORIZED))
    return PrimFunc("row_sum", (X, acc), Seq((init, upd)))


def test_promote_pass_alone():
    f = _row_sum(16, 29)
    g = promote_func(f)
    assert g is not f and "acc.reg0 = alloc_local([16], float32)" in str(g)
    assert promote_func(g) is g                       # its copy is not promoted again
    nothing = PrimFunc("n", f.params, f.body.stmts[0])
    assert promote_func(nothing) is nothing
    x, a = rand((16, 29)), np.zeros(16, np.float32)
    run(f, x, a)
    np.testing.assert_allclose(a, x.sum(1), rtol=1e-5, atol=1e-5)


def test_promote_pass_unrolls_register_tile_walks():
    T, out = buf("T", (4, 8), scope=Scope.LOCAL), buf("out", (4, 8))
    i, j = Var("i"), Var("j")
    fill = loop(i, 4, loop(j, 8, st(T, (i, j), c(1.0)), VECTORIZED), UNROLLED)
    back = loop(i, 4, loop(j, 8, st(out, (i, j), ld(T, i, j)), VECTORIZED), SERIAL)
    g = promote_func(PrimFunc("t", (out,), Allocate(T, Seq((fill, back)))))
    assert g.body.body.stmts[1].kind is ForKind.UNROLLED
    assert promote_func(g) is g


# ------------------------------------------------------------------ vector_chunks

def test_vector_chunk_widths():
    assert vector_chunks(32, 16) == [(0, 32)]
    assert vector_chunks(48, 16) == [(0, 16), (16, 16), (32, 16)]
    assert vector_chunks(58, 16) == [(0, 16), (16, 16), (32, 16), (48, 8), (56, 2)]
    assert vector_chunks(7, 8) == [(0, 4), (4, 2), (6, 1)]
    for n in range(1, 70):
        chunks = vector_chunks(n, 8)
        assert [o for o, _ in chunks] == list(np.cumsum([0] + [w for _, w in chunks[:-1]]))
        assert sum(w for _, w in chunks) == n and all(w & (w - 1) == 0 for _, w in chunks)


def test_vector_chunks_pass_alone():
    A, B = buf("A", (3, 8)), buf("B", (3, 7))
    r, j = Var("r"), Var("j")
    f = PrimFunc("v7", (A, B), loop(r, 3, loop(j, 7, st(B, (r, j), ld(A, r, add(j, _i(1)))), VECTORIZED)))
    g = chunk_vectors(f, 8)
    pieces = g.body.body.stmts
    assert [(p.extent, p.kind) for p in pieces] == [(4, VECTORIZED), (2, VECTORIZED), (1, VECTORIZED)]
    assert str(pieces[1].body) == "B[r, j + 4] = A[r, j + 4 + 1]"
    assert chunk_vectors(g, 8) is g
    a, b = rand((3, 8)), np.zeros((3, 7), np.float32)
    run(f, a, b)
    np.testing.assert_array_equal(b, a[:, 1:])


def test_vector_chunks_leave_other_loops_alone():
    A = buf("A", (64,))
    i, k = Var("i"), Var("k")
    pow2 = PrimFunc("p", (A,), loop(i, 16, st(A, (i,), c(0.0)), VECTORIZED))
    assert chunk_vectors(pow2, 8) is pow2
    serial_inside = PrimFunc("s", (A,), loop(i, 12, loop(k, 3, st(A, (add(i, k),), c(0.0))), VECTORIZED))
    assert chunk_vectors(serial_inside, 8) is serial_inside      # codegen runs it serially: not SIMD
    too_wide = PrimFunc("w", (buf("W", (300,)),), loop(i, 300, st(buf("W", (300,)), (i,), c(0.0)), VECTORIZED))
    assert chunk_vectors(too_wide, 8) is too_wide


def test_a_masked_loop_wider_than_the_target_vectors_is_cut_into_native_pieces():
    """LLVM's x86 backend miscompiles the masked loads it splits itself (an AVX-512-width max pool
    replayed on AVX2 read the next row into its padding), so a guarded or selecting SIMD loop wider
    than the target's vectors reaches codegen in native pieces; an unmasked one stays whole."""
    A, O = buf("A", (3, 23)), buf("O", (3, 25))
    r, j, h = Var("r"), Var("j"), Var("h")
    col = add(mul(h, _i(16)), j)
    inside = Binary(BinOp.AND, Binary(BinOp.GE, col, _i(1)), Binary(BinOp.LT, col, _i(24)))
    pad = st(O, (r, col), Select(inside, ld(A, r, Binary(BinOp.SUB, col, _i(1))), c(-3e38)))
    guarded = IfThenElse(Binary(BinOp.LT, col, _i(25)), pad, None)
    a = rand((3, 23))
    want = np.full((3, 25), -3e38, np.float32)
    want[:, 1:24] = a
    for body in (guarded, pad):
        f = PrimFunc("pad", (A, O), loop(r, 3, loop(h, 2 if body is guarded else 1, loop(j, 16, body, VECTORIZED),
                                                     UNROLLED)))
        g = chunk_vectors(f, 8)
        pieces = g.body.body.body.stmts
        assert [(p.extent, p.kind) for p in pieces] == [(8, VECTORIZED), (8, VECTORIZED)]
        assert chunk_vectors(f, 16) is f and chunk_vectors(g, 8) is g
    o = np.zeros((3, 25), np.float32)
    run(PrimFunc("pad", (A, O), loop(r, 3, loop(h, 2, loop(j, 16, guarded, VECTORIZED), UNROLLED))), a, o)
    np.testing.assert_array_equal(o, want)
    plain = PrimFunc("p", (A,), loop(j, 16, st(A, (0, j), c(0.0)), VECTORIZED))
    assert chunk_vectors(plain, 8) is plain


# ------------------------------------------------------------------ loop_nest's parts

def test_bound_inference_alone_gives_read_only_layouts():
    s = Schedule(conv_wl()).split("conv.h", factor=4).compute_at("pad", "conv.h.0")
    g = s.stage_graph()
    bounds = infer_bounds(g)
    pad = bounds.layout(g.stage("pad"))
    assert [ext for _, ext in pad.region] == [1, 3, 6, 11]        # 4 output rows read 6 padded rows
    assert pad.local and pad.buffer.scope is Scope.LOCAL and pad.buffer.shape == (1, 3, 6, 11)
    assert bounds.attached[("conv", "h.0")] == (g.stage("pad"),)
    with pytest.raises(TypeError):
        pad.extents["h"] = 1
    with pytest.raises(TypeError):
        bounds.layouts["pad"] = pad


def test_guards_alone():
    i0, i1 = Var("i0"), Var("i1")
    cond = Binary(BinOp.LT, add(mul(i0, _i(4)), i1), _i(37))
    # the whole inner range of i1 (0..3) is inside when i0 * 4 + 3 < 37
    assert str(for_all_inner(cond, {i0}, {i0: (0, 9), i1: (0, 3)})) == "i0 * 4 + 3 < 37"
    assert for_all_inner(cond, {i0, i1}, {}) is None                # nothing left to decide
    scope = GuardScope({})
    body = Store(buf("B", (40,)), (i0,), c(1.0))
    with scope.stage({i0: (0, 9)}):
        assert scope.guard([(Binary(BinOp.LT, i0, _i(10)), True)], body) is body    # provably true
        assert scope.guard([(Binary(BinOp.LT, i0, _i(0)), True)], body) == Seq(())  # provably empty
        guarded = scope.guard([(Binary(BinOp.LT, i0, _i(5)), True)], body)
        assert isinstance(guarded, IfThenElse) and guarded.then is body
        with scope.loop(i0):
            assert scope.split([(cond, True)]) == ([], [(cond, True)])


def test_the_guarded_copy_of_a_task_runs_its_full_tiles_guard_free():
    """A task of 15 output rows in tiles of 3 over 28 rows: its second task holds one edge tile.  The
    guarded copy is versioned again at the row tiles, so its four full tiles get register accumulators
    too (two promoted tiles, each with its tap copy, instead of one), and the result stays exact."""
    params = dict(N=1, C=32, H=56, W=56, K=32, R=3, S=3, stride=2, pad=1, cb=16, kb=16, dtype="float32")
    wl = get_workload("conv2d_nchwc")
    space = GeneratedSpace(wl.make(**params), SpaceOptions(vector_bits=256, cores=2))
    s = space.apply(FixedDecisions(space.default_decisions({"Y.pt": 3, "Y.qt": 2, "Y.p2": 5})))
    assert str(s.lower(target=GOLDEN_TARGET)).count("alloc_local([3, 2, 16]") == 4
    ins = wl.inputs(seed=2, **params)
    out = np.full(s.tensors[-1].shape, np.nan, np.float32)
    s.build()(*ins, out)
    np.testing.assert_allclose(out, wl.reference(ins, **params)[0], rtol=1e-4, atol=1e-4)


def test_an_edge_tile_alone_in_its_guarded_copy_runs_as_a_smaller_tile():
    """7 output rows in tiles of 2: the last task's guarded copy holds the last tile alone, so its row
    sum is pinned (the version's check failed, and the sum has no larger value): the guard ``sum + p1
    < 7`` becomes ``p1 < 1``, the row loop is shortened to one row and the edge tile gets register
    accumulators of its own (1 x 7 columns), without a test; the result stays exact."""
    params = dict(N=1, C=32, H=14, W=14, K=16, R=1, S=1, stride=2, pad=0, cb=16, kb=8, dtype="float32")
    text = _avx2_conv_nchwc_checked(params, {"Y.kb": 8, "Y.pt": 2, "Y.qt": 7})
    assert text.count("alloc_local([2, 7, 8]") == 1 and text.count("alloc_local([1, 7, 8]") == 1


def _avx2_conv_nchwc_checked(params: dict, decisions: dict) -> str:
    """The AVX2 start of ``conv2d_nchwc`` with ``decisions`` overridden: its lowered nest (golden
    target), after checking the kernel it builds against the reference."""
    wl = get_workload("conv2d_nchwc")
    space = GeneratedSpace(wl.make(**params), SpaceOptions(vector_bits=256, cores=2))
    s = space.apply(FixedDecisions(space.default_decisions(decisions)))
    ins = wl.inputs(seed=4, **params)
    out = np.full(s.tensors[-1].shape, np.nan, np.float32)
    s.build()(*ins, out)
    np.testing.assert_allclose(out, wl.reference(ins, **params)[0], rtol=1e-4, atol=1e-4)
    return str(s.lower(target=GOLDEN_TARGET))


def test_two_guards_deciding_the_same_check_still_pin_the_edge_tile():
    """A padded 3x3 conv's edge columns are guarded twice (the local tile's extent and the output's
    region give the same ``q < 8``); the version must check it once, so the single failed check pins
    the last column tile: 8 columns in tiles of 3 end in a 2-column register tile (2 rows x 2 columns
    x 2 vectors) instead of guarded code without register accumulators; the result stays exact."""
    params = dict(N=1, C=16, H=8, W=8, K=16, R=3, S=3, stride=1, pad=1, cb=16, kb=16, dtype="float32")
    text = _avx2_conv_nchwc_checked(params, {"Y.pt": 2, "Y.qt": 3})
    # (each tile: its accumulators, and their copy per window row)
    assert text.count("alloc_local([2, 3, 16]") == 2 and text.count("alloc_local([2, 2, 16]") == 2
    assert re.search(r"if (.+) and \1:", text) is None        # no guard tested twice


def test_pinned_sums_are_the_last_value_a_failed_check_leaves():
    from schedules.lowering.guards import pinned_sum
    i, j = Var("i"), Var("j")
    ranges = {i: (0, 3), j: (0, 4)}
    assert pinned_sum(Binary(BinOp.LT, mul(i, _i(2)), _i(6)), ranges) == ({i: 2}, 6)      # i * 2 >= 6: i = 3
    assert pinned_sum(Binary(BinOp.LT, mul(i, _i(2)), _i(5)), ranges) == ({i: 2}, 6)      # a multiple of 2
    assert pinned_sum(Binary(BinOp.LT, mul(i, _i(2)), _i(4)), ranges) is None             # 4 or 6
    assert pinned_sum(Binary(BinOp.GE, add(mul(i, _i(3)), j), _i(1)), ranges) == ({i: 3, j: 1}, 0)
    assert pinned_sum(Binary(BinOp.LT, add(mul(i, _i(3)), j), _i(16)), ranges) is None    # 16 > 3 * 3 + 4


def test_affine_form_is_shared():
    i, j, n = Var("i"), Var("j"), Var("n")
    e = add(Binary(BinOp.SUB, mul(i, _i(4)), mul(_i(2), j)), _i(3))
    form = affine(e)
    assert form.terms == {i: 4, j: -2} and form.const == 3
    nonlin = affine(add(mul(i, n), Binary(BinOp.FLOORDIV, j, _i(2))))
    assert list(nonlin.terms.values()) == [1, 1] and len(nonlin.terms) == 2   # atoms
    kept = affine(add(mul(add(i, _i(1)), _i(2)), j), atom=lambda x: x == add(i, _i(1)))
    assert kept.terms == {add(i, _i(1)): 2, j: 1}
    assert int_range(e, {i: (0, 3), j: (0, 5)}) == (3 - 10, 12 + 3)


def test_divmod_by_a_multiple_of_a_block_resolves_and_keeps_every_value():
    # (co * 16 + ci) // 32 with ci < 16 is co // 2 (a relayout between blocks of 16 and 32): the small
    # part never carries; random affine forms over small ranges keep their value everywhere
    from tensorir.tir.analysis.values import int_values
    from tensorir.tir.transform.simplify import simplify
    co, ci = Var("co"), Var("ci")
    ranges = {co: (0, 7), ci: (0, 15)}
    assert str(simplify((co * 16 + ci) // 32, ranges)) == str(co // 2)
    assert str(simplify((co * 16 + ci) % 32, ranges)) == str(co % 2 * 16 + ci)
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b, k = (int(x) for x in rng.integers(-3, 40, 3))
        d = int(rng.choice([2, 4, 6, 8, 12, 16, 32, 48]))
        hi = int(rng.integers(0, 20))
        for op in (BinOp.FLOORDIV, BinOp.MOD):
            e = Binary(op, co * a + ci * b + k, Const(d, "int32"))
            s = simplify(e, {co: (0, 7), ci: (0, hi)})
            for x in range(8):
                for y in range(hi + 1):
                    env = {"co": x, "ci": y}
                    assert int_values(s, env) == int_values(e, env), (e, s, env)
