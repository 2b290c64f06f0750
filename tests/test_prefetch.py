"""Software prefetch: the loop IR's ``Prefetch`` statement, its code (``llvm.prefetch``, never
checked or guarded), the ``prefetch`` schedule primitive and the space's prefetch-distance decision
for a dense product's packed weights (docs/decisions/028-prefetch-packed-weights.md)."""
from __future__ import annotations

import numpy as np
import pytest

from logs import TuningRecord
from schedules import Schedule
from schedules.errors import AnnotationError, LoweringError, PrefetchError, SplitError, UnknownHandleError
from schedules.prefetch import PANEL_DISTANCE, PREFETCH_BYTES
from schedules.space import FixedDecisions, GeneratedSpace, SpaceOptions
from tensorir import ops, te
from tensorir.codegen.module import codegen
from tensorir.runtime import build
from tensorir.te.expr import Var, const
from tensorir.tir.ir import Buffer, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Store, seq, walk_stmts
from tests.conftest import check_against_evaluator
from tuner.asm_view import kernel_asm

AVX512 = SpaceOptions(vector_bits=512, cores=2)


def prefetches(func) -> list:
    return [s for s in walk_stmts(func.body) if isinstance(s, Prefetch)]


def copy_with_prefetch(n=10, offset=4096, ahead=3):
    """``B[i] = A[i] * 2`` with a prefetch of ``A[i + ahead]`` plus ``offset`` bytes: past A's end."""
    a, b = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    i = Var("i")
    body = seq(Prefetch(a, (i + ahead,), offset),
               Store(b, (i,), Load(a, (i,)) * const(2.0)))
    return PrimFunc("copy2", (a, b), For(i, n, ForKind.SERIAL, body))


# ------------------------------------------------------------------ IR and code

def test_prefetch_prints_in_the_loop_nest():
    text = str(copy_with_prefetch())
    assert "prefetch(A[i + 3] + 4096 bytes)" in text, text
    assert "prefetch(A[i])" in str(Prefetch(Buffer("A", (4,), "float32"), (Var("i"),)))
    assert "locality=1" in str(Prefetch(Buffer("A", (4,), "float32"), (Var("i"),), 0, 1))


@pytest.mark.parametrize("checked", [False, True])
def test_a_prefetch_past_the_buffer_is_not_checked_and_computes_exactly(checked):
    """The prefetched address lies past A's end: a checked build checks loads and stores, not the
    prefetch, so the call succeeds; the module holds ``llvm.prefetch.p0`` and no inbounds on it."""
    func = copy_with_prefetch()
    a = np.arange(10, dtype=np.float32)
    b = np.empty_like(a)
    build(func, checked=checked)(a, b)
    np.testing.assert_array_equal(b, a * 2)
    ir_text = str(codegen(func, checked=checked))
    assert 'declare void @"llvm.prefetch.p0"(ptr' in ir_text
    call = next(line for line in ir_text.splitlines() if 'call void @"llvm.prefetch.p0"' in line)
    assert "i32 0, i32 3, i32 1)" in call, call      # read, keep in every level, data cache
    ptr = call.split("(ptr ")[1].split(",")[0]
    made = next(line for line in ir_text.splitlines() if line.strip().startswith(f"{ptr} ="))
    assert "getelementptr" in made and "inbounds" not in made, made


def test_prefetch_becomes_prefetcht0_in_the_assembly():
    asm = kernel_asm(copy_with_prefetch())
    assert "prefetcht0" in asm
    low = Prefetch(Buffer("A", (10,), "float32"), (Var("i"),), 0, 0)
    func = copy_with_prefetch()
    func = PrimFunc(func.name, func.params, For(func.body.var, 10, ForKind.SERIAL, seq(low, func.body.body.stmts[1])))
    assert "prefetchnta" in kernel_asm(func)


# ------------------------------------------------------------------ the primitive

def dense_schedule(m=12, k=256, n=96, t3=32, distance=1024, threads_parallel=True):
    """The generated space's dense schedule with the packed W (panels of ``t3`` floats)."""
    tensors = ops.dense(m, k, n)
    space = GeneratedSpace(tensors, AVX512)
    d = space.default_decisions({"D.j.t3": t3, "D.i.t3": 6, "D.pack_W": True, "D.prefetch_W": distance,
                                 "Y.parallel": threads_parallel})
    src = FixedDecisions(d)
    s = space.apply(src)
    return tensors, space, s, dict(src.decisions)


def dense_reference(tensors, seed=0):
    rng = np.random.default_rng(seed)
    x, w, b = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in tensors[:-1])
    return [x, w, b], np.maximum(x @ w.T + b, 0)


def test_dense_prefetch_is_one_per_line_of_the_panel_row_and_computes_exactly():
    """A 32-float panel row read by 4 unrolled tile rows x 2 vectors is 2 lines: 2 prefetches per
    iteration of the innermost reduction loop, 64 bytes apart, ``distance`` ahead."""
    tensors, _, s, _ = dense_schedule(t3=32, distance=2048)
    func = s.lower()
    got = prefetches(func)
    assert got and {p.buffer.name for p in got} == {"W_pack"}
    assert sorted({p.offset for p in got}) == [2048, 2048 + 64]
    k_loop = next(x for x in walk_stmts(func.body) if isinstance(x, For) and x.var.name == s.trace[-1].inputs[0])
    assert sum(isinstance(x, Prefetch) for x in k_loop.body.stmts) == 2
    inputs, want = dense_reference(tensors)
    out = np.empty(want.shape, np.float32)
    k = build(func)
    k.threads = 2
    k(*inputs, out)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("offset", [{"offset": 1}, {"offset_bytes": 0}, {"offset": 500}])
def test_prefetch_of_a_conv_s_packed_weights_and_padded_input(offset):
    """Prefetches of a LOCAL packed weight block (region-relative) and the packed input, an
    iteration or far past the end ahead; the results equal the evaluator's."""
    tensors = ops.conv2d(1, 16, 9, 9, 32, 3, 3, pad=1)
    space = GeneratedSpace(tensors, AVX512)
    start = {k: (0 if ".prefetch_" in k else v) for k, v in space.default_decisions().items()}
    s = space.apply(FixedDecisions(start))     # (the start's own weight prefetch off: set here instead)
    s = s.prefetch("Wt_pack", "Y_local.c.1", **offset).prefetch("Xpad_pack", "Y_local.s", **offset)
    func = s.lower()
    assert {p.buffer.name for p in prefetches(func)} == {"Wt_pack", "Xpad_pack"}
    check_against_evaluator(s)


def test_prefetch_on_odd_shapes_runs_past_the_end_in_a_checked_build():
    """Tiles that do not divide 37x29 (K 53): the prefetches at the last iterations (and the guarded
    edge tiles) address past the buffers; a checked build reports no access out of bounds."""
    A, B = te.placeholder((37, 53), "float32", "A"), te.placeholder((53, 29), "float32", "B")
    k = te.reduce_axis(53, "k")
    C = te.compute((37, 29), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    s = Schedule([A, B, C]).split("C.i", factor=8).split("C.j", factor=16)
    s = s.reorder("C.i.0", "C.j.0", "C.k", "C.i.1", "C.j.1").unroll("C.i.1").vectorize("C.j.1")
    s = s.prefetch("B", "C.k", offset=7).prefetch(A, "C.k", offset_bytes=1 << 20)
    func = s.lower()
    assert len(prefetches(func)) >= 2
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-1, 1, (37, 53)).astype(np.float32), rng.uniform(-1, 1, (53, 29)).astype(np.float32)
    c = np.empty((37, 29), np.float32)
    build(func, checked=True)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def _odd_product(first):
    """37x53 @ 53x29 in tiles of 8 rows x 16 columns, prefetching B in the reduction loop of the
    tiles' first iterations named by ``first``."""
    A, B = te.placeholder((37, 53), "float32", "A"), te.placeholder((53, 29), "float32", "B")
    k = te.reduce_axis(53, "k")
    C = te.compute((37, 29), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    s = Schedule([A, B, C]).split("C.i", factor=8).split("C.j", factor=16)
    s = s.reorder("C.j.0", "C.i.0", "C.k", "C.i.1", "C.j.1").unroll("C.i.1").vectorize("C.j.1")
    return s.prefetch("B", "C.k", offset=4, first=first)


def test_a_prefetch_in_the_first_iterations_only_runs_under_their_guard_and_computes_exactly():
    """``first=["C.i.0"]``: the row tiles after the first reuse the column panel of B the first
    streamed in; their prefetches are skipped (an ``if`` around them), the results unchanged."""
    s = _odd_product(["C.i.0"])
    func = s.lower()
    text = str(func)
    assert "if C.i.0 == 0:" in text and text.index("if C.i.0 == 0:") < text.index("prefetch(B[")
    guarded = [p for g in walk_stmts(func.body) if isinstance(g, IfThenElse) and str(g.cond) == "C.i.0 == 0"
               for p in walk_stmts(g.then) if isinstance(p, Prefetch)]
    assert prefetches(func) and len(guarded) == len(prefetches(func))
    assert "first=['C.i.0']" in s.to_python()
    assert str(Schedule.from_json(s.tensors, s.to_json()).lower()) == text
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-1, 1, (37, 53)).astype(np.float32), rng.uniform(-1, 1, (53, 29)).astype(np.float32)
    for checked in (False, True):
        c = np.empty((37, 29), np.float32)
        build(func, checked=checked)(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: _odd_product(["C.k"]), PrefetchError, "not a loop of C around C.k"),
    (lambda: _odd_product(["C.i.1"]), PrefetchError, "not a loop of C around C.k"),
    (lambda: _odd_product(["C.i"]), UnknownHandleError, "loop C.i was split or fused away"),
    (lambda: _odd_product("C.i.0"), PrefetchError, "must be a list of loop handles"),
    (lambda: _odd_product(["C.i.0"]).split("C.i.0", factor=2), SplitError, "apply split before prefetch"),
    (lambda: _odd_product(["C.i.0"]).reorder("C.j.0", "C.k", "C.i.0").lower(), LoweringError,
     "no longer all around it"),
])
def test_bad_first_iterations_of_a_prefetch_are_one_line_errors(call, exc, match):
    with pytest.raises(exc, match=match) as err:
        call()
    assert "\n" not in str(err.value)


def test_prefetch_in_a_parallel_loop_at_two_threads():
    A = te.placeholder((64, 40), "float32", "A")
    B = te.compute((64, 40), lambda i, j: A[i, j] * 3.0, "B")
    s = Schedule([A, B]).parallel("B.i").prefetch("A", "B.i", offset=2)
    func = s.lower()
    (p,) = prefetches(func) [:1]
    assert p.buffer.name == "A" and len(prefetches(func)) == 3     # 160 bytes of a row: 3 lines
    a = np.random.default_rng(4).uniform(-1, 1, (64, 40)).astype(np.float32)
    out = np.empty_like(a)
    k = build(func)
    k.threads = 2
    k(a, out)
    np.testing.assert_array_equal(out, a * np.float32(3.0))


def test_prefetch_trace_round_trips_through_json_python_and_a_log_record():
    tensors, space, s, decisions = dense_schedule(distance=4096)
    inst = [i for i in s.trace if i.kind == "prefetch"]
    assert len(inst) == 1 and inst[0].attr_dict == {"tensor": "W_pack", "offset_bytes": 4096}
    assert "s = s.prefetch('W_pack', " in s.to_python() and "offset_bytes=4096" in s.to_python()
    nest = str(s.lower())
    assert str(Schedule.from_json(tensors, s.to_json()).lower()) == nest
    rec = TuningRecord(workload_key="k", workload_name="dense", workload_params={},
                       target={"kind": "llvm", "cpu": "x", "features": "", "threads": 2},
                       trace=s.to_json(), decisions=decisions, costs=[1e-3])
    back = TuningRecord.from_json(rec.to_json_line())
    assert back.decisions["D.prefetch_W"] == 4096
    assert str(Schedule.from_json(tensors, back.trace).lower()) == nest
    assert str(space.apply(FixedDecisions(back.decisions, strict=True)).lower()) == nest


@pytest.mark.parametrize("call, exc, match", [
    (lambda s: s.prefetch("Q", "C.k", offset=1), UnknownHandleError, "no tensor named 'Q'"),
    (lambda s: s.prefetch("A", "C.zz", offset=1), UnknownHandleError, "loop C.zz does not exist"),
    (lambda s: s.prefetch("C", "C.k", offset=1), PrefetchError, "stage C does not read C"),
    (lambda s: s.prefetch("A", "C.k", offset=-1), PrefetchError, "must be >= 0"),
    (lambda s: s.prefetch("A", "C.k", offset_bytes=-64), PrefetchError, "must be >= 0"),
    (lambda s: s.prefetch("A", "C.k"), PrefetchError, "exactly one of offset="),
    (lambda s: s.prefetch("A", "C.k", offset=1, offset_bytes=64), PrefetchError, "exactly one of offset="),
    (lambda s: s.prefetch("A", "C.k", offset=1.5), PrefetchError, "must be an integer"),
    (lambda s: s.prefetch("A", "C.k", offset=1).prefetch("A", "C.k", offset=2), PrefetchError,
     "already prefetches A"),
    (lambda s: s.vectorize("C.j").prefetch("A", "C.j", offset=1), PrefetchError, "is vectorized"),
    (lambda s: s.prefetch("A", "C.j", offset=1).vectorize("C.j"), AnnotationError, "prefetches"),
    (lambda s: s.prefetch("A", "C.k", offset=1).split("C.k", factor=4), SplitError,
     "apply split before prefetch"),
])
def test_bad_prefetch_arguments_are_one_line_errors(call, exc, match):
    A, B = te.placeholder((8, 8), "float32", "A"), te.placeholder((8, 8), "float32", "B")
    k = te.reduce_axis(8, "k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    with pytest.raises(exc, match=match) as err:
        call(Schedule([A, B, C]))
    assert "\n" not in str(err.value)


def test_too_many_lines_per_iteration_is_a_one_line_lowering_error():
    A = te.placeholder((64, 64), "float32", "A")
    B = te.compute((64, 64), lambda i, j: A[j, i] + 1.0, "B")
    s = Schedule([A, B]).prefetch("A", "B.i", offset=1)     # a column of A: 64 lines per iteration
    with pytest.raises(LoweringError, match="more than 32 cache lines of A") as err:
        s.lower()
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ the space's decision

def test_the_space_offers_a_prefetch_distance_for_the_packed_weight_panel():
    """Offered where W is packed, among PREFETCH_BYTES (0 first: none); the heuristic starts at
    PANEL_DISTANCE, weights in a core's L2 or not."""
    for shape in ((32, 1024, 1024), (32, 256, 256)):
        space = GeneratedSpace(ops.dense(*shape), AVX512)
        src = FixedDecisions(space.default_decisions())
        space.apply(src)
        assert src.choices["D.prefetch_W"] == PREFETCH_BYTES and PREFETCH_BYTES[0] == 0
        assert src.decisions["D.prefetch_W"] == PANEL_DISTANCE > 0
    older = {k: v for k, v in space.default_decisions().items() if k != "D.prefetch_W"}
    assert not [i for i in space.apply(FixedDecisions(older)).trace if i.kind == "prefetch"]   # replays as before
    unpacked = FixedDecisions({**space.default_decisions(), "D.pack_W": False})
    space.apply(unpacked)
    assert "D.prefetch_W" not in unpacked.decisions
    mm = GeneratedSpace(ops.matmul(40, 96, 300), AVX512)     # 96 columns in panels of 48: B is packed
    assert mm.default_decisions()["C.prefetch_B"] == PANEL_DISTANCE


@pytest.mark.parametrize("distance", PREFETCH_BYTES)
def test_every_prefetch_distance_computes_what_numpy_computes(distance):
    tensors, space, s, _ = dense_schedule(m=7, k=96, n=40, t3=16, distance=distance)
    assert (len(prefetches(s.lower())) > 0) == (distance > 0)
    inputs, want = dense_reference(tensors, seed=distance)
    out = np.empty(want.shape, np.float32)
    s.build()(*inputs, out)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("unroll_k", [True, False])
def test_prefetches_leave_register_promotion_as_it_was(unroll_k):
    """A prefetch is not an access: the accumulators are kept in the same register copies with and
    without it (the inner reduction loop unrolled or not)."""
    def locals_of(distance):
        tensors = ops.dense(12, 256, 96)
        space = GeneratedSpace(tensors, AVX512)
        d = space.default_decisions({"D.j.t3": 32, "D.i.t3": 6, "D.pack_W": True, "D.prefetch_W": distance,
                                     "D.k.r1": 2, "D.unroll_k": unroll_k})
        func = space.apply(FixedDecisions(d)).lower()
        return sorted(s.buffer.name for s in walk_stmts(func.body) if type(s).__name__ == "Allocate")
    plain, fetched = locals_of(0), locals_of(1024)
    assert any(".reg" in n for n in plain) and fetched == plain


def test_a_prefetch_in_a_straight_line_body_does_not_stop_its_tiles_going_to_registers():
    """``repeated_tiles`` (register promotion of a straight-line body) skips bodies with branches or
    allocations; a prefetch is neither."""
    from tensorir.tir.transform.promote import repeated_tiles
    a, d = Buffer("A", (4, 16), "float32"), Buffer("D", (16,), "float32")
    k, j = Var("k"), Var("j")
    update = For(j, 16, ForKind.VECTORIZED, Store(d, (j,), Load(d, (j,)) + Load(a, (k, j))))
    with_prefetch = For(k, 4, ForKind.UNROLLED, seq(Prefetch(a, (k, const(0)), 256), update))
    without = For(k, 4, ForKind.UNROLLED, update)
    assert [t[0] for t in repeated_tiles(without)] == [d]
    assert [t[0] for t in repeated_tiles(with_prefetch)] == [d]
