"""The four kinds of test every schedule primitive has:
golden loop-nest text, numerics vs numpy (odd shapes included), trace round trip,
and every illegal use raising a ScheduleError with a matching message."""
from __future__ import annotations

import json

import numpy as np
import pytest

from schedules import Schedule
from schedules import errors as E
from tests.conftest import GOLDEN_TARGET, chain_wl, check_against_evaluator, conv_wl, matmul_wl, run_schedule

# ---------------------------------------------------------------- schedules

def s_split():
    return Schedule(matmul_wl()).split("C.i", factor=8).split("C.j", nparts=4)


def s_tile():
    return Schedule(matmul_wl()).tile(["C.i", "C.j"], [8, 16])


def s_fuse():
    return Schedule(matmul_wl()).fuse("C.i", "C.j")


def s_reorder():
    return Schedule(matmul_wl()).reorder("C.k", "C.j", "C.i")


def s_unroll():
    return Schedule(matmul_wl()).split("C.k", factor=4).unroll("C.k.1")


def s_vectorize():
    return Schedule(matmul_wl()).split("C.j", factor=8).reorder("C.i", "C.j.0", "C.k", "C.j.1").vectorize("C.j.1")


def s_vector_chunks():
    # 12 lanes are not a power of two: the vector_chunks pass cuts the loop into 8 + 4 lanes (GOLDEN_TARGET)
    return Schedule(matmul_wl()).split("C.j", factor=12).reorder("C.i", "C.j.0", "C.k", "C.j.1").vectorize("C.j.1")


def s_parallel():
    return Schedule(matmul_wl()).fuse("C.i", "C.j").parallel("C.i_j_fused")


def s_compute_at():
    return Schedule(conv_wl()).split("conv.h", factor=4).compute_at("pad", "conv.h.0")


def s_compute_inline():
    return Schedule(conv_wl()).compute_inline("pad")


def s_compute_root():
    return Schedule(chain_wl()).compute_at("y", "z.i").compute_root("y")


def s_cache_write():
    s = Schedule(matmul_wl()).cache_write("C").tile(["C.i", "C.j"], [4, 16]).compute_at("C_local", "C.j.0")
    return (s.reorder("C_local.k", "C_local.i", "C_local.j").unroll("C_local.i").vectorize("C_local.j")
            .vectorize("C.j.1"))


def s_pack():
    s = Schedule(matmul_wl()).pack("B", {1: 16}, order=["1.o", "0", "1.i"])
    return s.split("C.j", factor=16).reorder("C.i", "C.j.0", "C.k", "C.j.1").vectorize("C.j.1")


def s_register_tiled_matmul():
    """Everything together: packing, cache_write register tile, parallel outer loop."""
    s = Schedule(matmul_wl(67, 83, 29)).pack("B", {1: 16}, order=["1.o", "0", "1.i"]).cache_write("C")
    s = s.tile(["C.i", "C.j"], [4, 16]).compute_at("C_local", "C.j.0")
    s = s.split("C_local.k", factor=4).reorder("C_local.k.0", "C_local.k.1", "C_local.i", "C_local.j")
    s = s.unroll("C_local.k.1").unroll("C_local.i").vectorize("C_local.j").vectorize("C.j.1")
    s = s.fuse("C.i.0", "C.j.0").parallel("C.i_j_fused").parallel("B_pack.d1.o")
    return s


def s_rfactor():
    """A vectorized matrix-vector product: 8 partial sums per row, then their sum (K=23: a guarded tail)."""
    s = Schedule(matvec_wl()).rfactor("y", 8)
    s = s.split("y_rf.k_o", factor=2).reorder("y_rf.i", "y_rf.k_o.0", "y_rf.k_o.1", "y_rf.k_v")
    return s.vectorize("y_rf.k_v").unroll("y_rf.k_o.1").compute_at("y_rf", "y.i")


def s_rfactor_max_of_conv():
    """rfactor of a max over one of three reduce axes (the others stay in the partial stage)."""
    from tensorir import te
    x = te.placeholder((4, 5, 7, 9), "float32", "x")
    a, b, c = te.reduce_axis(5, "a"), te.reduce_axis(7, "b"), te.reduce_axis(9, "c")
    m = te.compute((4,), lambda i: te.max(x[i, a, b, c] * 2.0, axis=[a, b, c]), "m")
    s = Schedule([x, m]).rfactor("m", 4, axis="m.b")
    return s.reorder("m_rf.i", "m_rf.a", "m_rf.b_o", "m_rf.c", "m_rf.b_v").vectorize("m_rf.b_v")


def matvec_wl(M=13, K=23):
    from tensorir import te
    A = te.placeholder((M, K), "float32", "A")
    x = te.placeholder((K,), "float32", "x")
    k = te.reduce_axis(K, "k")
    y = te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), "y")
    return [A, x, y]


CASES = {f.__name__[2:]: f for f in [s_split, s_tile, s_fuse, s_reorder, s_unroll, s_vectorize, s_parallel,
                                      s_compute_at, s_compute_inline, s_compute_root, s_cache_write, s_pack,
                                      s_register_tiled_matmul, s_rfactor, s_rfactor_max_of_conv, s_vector_chunks]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_nest_text(name, golden):
    golden(f"primitive_{name}", str(CASES[name]().lower(target=GOLDEN_TARGET)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_numerics_match_numpy(name):
    check_against_evaluator(CASES[name]())


@pytest.mark.parametrize("name", sorted(CASES))
def test_trace_round_trip(name):
    s = CASES[name]()
    text = json.dumps(s.to_json())
    again = Schedule.from_json(list(s.tensors), json.loads(text))
    assert again.to_json() == s.to_json()
    assert again.lower() == s.lower()
    # the Python rendering replays too
    env = {"Schedule": Schedule, "tensors": list(s.tensors)}
    exec(s.to_python(), env)
    assert env["s"].lower() == s.lower()


def test_matmul_direct_numpy():
    s = s_register_tiled_matmul()
    (a, b), (c,) = run_schedule(s)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_split_non_dividing_odd_shapes():
    for f in (1, 2, 3, 5, 7, 36, 37, 100):
        check_against_evaluator(Schedule(matmul_wl()).split("C.i", factor=f).split("C.k", factor=f))


def test_nested_splits_and_fuse_of_split_loops():
    s = Schedule(matmul_wl()).split("C.i", factor=5).split("C.i.1", factor=2).fuse("C.i.1.0", "C.i.1.1")
    check_against_evaluator(s)


@pytest.mark.parametrize("outer, inner", [(16, 5), (8, 3), (10, 4), (7, 2)])
def test_nested_non_dividing_split_of_a_reduction_counts_each_term_once(outer, inner):
    # k.1 = k.1.0 * inner + k.1.1 runs past k.1's extent; those iterations must not run
    s = Schedule(matmul_wl(M=8, N=9, K=31)).split("C.k", factor=outer).split("C.k.1", factor=inner)
    check_against_evaluator(s)
    check_against_evaluator(s.reorder("C.k.0", "C.k.1.0", "C.i", "C.k.1.1", "C.j"))


def test_nested_non_dividing_split_inside_a_local_tile():
    s = Schedule(matmul_wl(M=30, N=45, K=23)).cache_write("C").split("C.i", factor=10).split("C.j", factor=16)
    s = s.reorder("C.i.0", "C.j.0", "C.i.1", "C.j.1").compute_at("C_local", "C.j.0")
    s = s.split("C_local.i", factor=4).split("C_local.k", factor=8).split("C_local.k.1", factor=3)
    check_against_evaluator(s)


# ------------------------------------------- edge tiles of a local tile: computed past the edge

def _register_tile(packs: bool, M=37, N=45, K=29, fused: bool = False):
    """C = A^T B in 6 x 16 register tiles (neither divides M or N), the operands packed or not."""
    from tensorir import te
    A = te.placeholder((K, M), "float32", "A")
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    s = Schedule([A, B, te.compute((M, N), lambda i, j: te.sum(A[k, i] * B[k, j], axis=k), "C")])
    if packs:
        s = s.pack("A", {1: 6}, order=["1.o", "0", "1.i"]).pack("B", {1: 16}, order=["1.o", "0", "1.i"])
    s = s.cache_write("C").tile(["C.i", "C.j"], [6, 16])
    if fused:   # tile starts (f // 3) * 6 and (f % 3) * 16 of one parallel loop, as the space makes them
        s = s.fuse("C.i.0", "C.j.0").parallel("C.i_j_fused").compute_at("C_local", "C.i_j_fused")
    else:
        s = s.compute_at("C_local", "C.j.0")
    s = s.reorder("C_local.k", "C_local.i", "C_local.j").unroll("C_local.i").vectorize("C_local.j")
    return s.vectorize("C.j.1")


def _element_guards(s, loop: str) -> list:
    return [ln for ln in str(s.lower()).splitlines() if ln.strip().startswith("if") and loop in ln]


def test_edge_tile_reading_padded_packs_runs_the_full_tile_code():
    # reads of the zero-padded packs stay in bounds past the edge: no guard inside the tile, only
    # the copy-out (C.j.1) is guarded
    s = _register_tile(packs=True)
    assert not _element_guards(s, "C_local.i") and not _element_guards(s, "C_local.j")
    assert _element_guards(s, "C.i.1")
    check_against_evaluator(s)
    check_against_evaluator(_register_tile(packs=True, M=6, N=16, K=3))       # no edge at all
    check_against_evaluator(_register_tile(packs=True, M=1, N=1, K=1))        # one partial tile
    s = _register_tile(packs=True, fused=True)
    assert not _element_guards(s, "C_local.i") and not _element_guards(s, "C_local.j")
    check_against_evaluator(s)


def test_edge_tile_reading_an_unpadded_input_keeps_its_guards():
    # A[k, i] has no row past M: the edge tile must not read it
    s = _register_tile(packs=False)
    assert _element_guards(s, "C_local.i") and _element_guards(s, "C_local.j")
    check_against_evaluator(s)


def test_edge_tile_with_integer_division_by_a_value_keeps_its_guards():
    # past the edge a padded divisor is 0: integer division there would trap
    from tensorir import te
    X = te.placeholder((13, 21), "int32", "X")
    Y = te.placeholder((13, 21), "int32", "Y")
    Q = te.compute((13, 21), lambda i, j: X[i, j] // Y[i, j], "Q")
    O = te.compute((13, 21), lambda i, j: Q[i, j] + 1, "O")
    s = Schedule([X, Y, O]).pack("X", {1: 8}).pack("Y", {1: 8}).tile(["O.i", "O.j"], [4, 8])
    s = s.compute_at("Q", "O.j.0").vectorize("Q.j").vectorize("O.j.1")
    assert _element_guards(s, "Q.j")
    from tensorir.runtime import build
    rng = np.random.default_rng(0)
    x = rng.integers(-50, 50, (13, 21)).astype(np.int32)
    y = rng.choice(np.array([-7, -3, -1, 1, 2, 5], np.int32), (13, 21))
    o = np.empty((13, 21), np.int32)
    build(s.lower())(x, y, o)
    np.testing.assert_array_equal(o, x // y + 1)


# ------------------------------------------------------------- illegal uses

ILLEGAL = [
    (lambda: Schedule(matmul_wl()).split("C.i", factor=0), E.SplitError, r"split: factor for loop C\.i must be a positive integer, got 0"),
    (lambda: Schedule(matmul_wl()).split("C.i", factor=-3), E.SplitError, r"got -3"),
    (lambda: Schedule(matmul_wl()).split("C.i", factor=2.5), E.SplitError, r"got 2\.5"),
    (lambda: Schedule(matmul_wl()).split("C.i"), E.SplitError, r"exactly one of factor= or nparts="),
    (lambda: Schedule(matmul_wl()).split("C.i", nparts=0), E.SplitError, r"nparts for loop C\.i"),
    (lambda: Schedule(matmul_wl()).split("C.q", factor=2), E.UnknownHandleError, r"loop C\.q does not exist; current loops of C: \['C\.i', 'C\.j', 'C\.k'\]"),
    (lambda: Schedule(matmul_wl()).split("D.i", factor=2), E.UnknownHandleError, r"no stage named 'D'"),
    (lambda: Schedule(matmul_wl()).split("C.i", factor=2).split("C.i", factor=2), E.UnknownHandleError, r"loop C\.i was split or fused away"),
    (lambda: Schedule(matmul_wl()).split("A.i", factor=2), E.UnknownHandleError, r"A is an input placeholder"),
    (lambda: Schedule(matmul_wl()).split("Ci", factor=2), E.UnknownHandleError, r"expected a loop handle like 'C\.i'"),
    (lambda: Schedule(matmul_wl()).fuse("C.i", "C.k"), E.FuseError, r"fuse: loops C\.i and C\.k must be adjacent.*found \['C\.j'\] between them"),
    (lambda: Schedule(matmul_wl()).fuse("C.j", "C.i"), E.FuseError, r"C\.i is outside C\.j"),
    (lambda: Schedule(matmul_wl()).fuse("C.j", "C.k"), E.FuseError, r"cannot fuse spatial loop C\.j with reduce loop C\.k"),
    (lambda: Schedule(chain_wl()).fuse("z.i", "y.j"), E.FuseError, r"belong to different stages"),
    (lambda: Schedule(matmul_wl()).reorder("C.i", "C.i"), E.ReorderError, r"loop C\.i is listed twice"),
    (lambda: Schedule(chain_wl()).reorder("z.j", "y.i"), E.ReorderError, r"loop y\.i belongs to stage y, expected loops of stage z"),
    (lambda: Schedule(matmul_wl()).vectorize("C.k"), E.AnnotationError, r"vectorize: loop C\.k is a reduction loop; expected a spatial loop"),
    (lambda: Schedule(matmul_wl()).parallel("C.k"), E.AnnotationError, r"parallel: loop C\.k is a reduction loop; expected a spatial loop"),
    (lambda: Schedule(matmul_wl()).parallel("C.i").vectorize("C.i"), E.AnnotationError, r"loop C\.i is already parallel"),
    (lambda: Schedule(matmul_wl()).vectorize("C.j").split("C.j", factor=2), E.SplitError, r"loop C\.j is already vectorized; apply split before"),
    (lambda: Schedule(conv_wl()).compute_at("pad", "pad.h"), E.ComputeAtError, r"cannot compute stage pad at its own loop"),
    (lambda: Schedule(conv_wl()).compute_at("conv", "pad.h"), E.ComputeAtError, r"stage conv is an output of the workload"),
    (lambda: Schedule(chain_wl()).compute_at("y", "z.q"), E.UnknownHandleError, r"loop z\.q does not exist"),
    (lambda: Schedule(conv_wl()).compute_at("X", "conv.h"), E.UnknownHandleError, r"X is an input placeholder"),
    (lambda: Schedule(conv_wl()).compute_inline("conv"), E.ComputeInlineError, r"stage conv is an output"),
    (lambda: Schedule(_two_stage_reduction()).compute_inline("rowsum"), E.ComputeInlineError, r"stage rowsum is a reduction \(sum over \['k'\]\)"),
    (lambda: Schedule(matmul_wl()).split("C.i", factor=4).cache_write("C"), E.CacheWriteError, r"stage C has already been scheduled; apply cache_write before"),
    (lambda: Schedule(matmul_wl()).pack("B", {2: 4}), E.PackError, r"tensor B has 2 dimension\(s\); cannot split dimension 2"),
    (lambda: Schedule(matmul_wl()).pack("B", {1: 0}), E.PackError, r"split factor of dimension 1 of B must be a positive integer, got 0"),
    (lambda: Schedule(matmul_wl()).pack("B", {1: 4}, order=["0", "1.o"]), E.PackError, r"order \['0', '1\.o'\] must list each of"),
    (lambda: Schedule(matmul_wl()).pack("Q", {1: 4}), E.UnknownHandleError, r"no tensor named 'Q'"),
    (lambda: Schedule(chain_wl()).rfactor("z", 4), E.RFactorError, r"stage z is not a reduction; nothing to factor"),
    (lambda: Schedule(matmul_wl()).split("C.k", factor=4).rfactor("C", 4), E.RFactorError, r"stage C has already been scheduled; apply rfactor before"),
    (lambda: Schedule(matmul_wl()).rfactor("C", 4, axis="C.i"), E.RFactorError, r"C\.i is not a reduce loop of C; reduce loops: \['C\.k'\]"),
    (lambda: Schedule(_two_stage_reduction()).rfactor("rowsum", 2, axis="out.k"), E.RFactorError, r"loop out\.k belongs to stage out, not rowsum"),
    (lambda: Schedule(matmul_wl()).rfactor("C", 1), E.RFactorError, r"factor of C\.k must be between 2 and its extent 23, got 1"),
    (lambda: Schedule(matmul_wl()).rfactor("C", 24), E.RFactorError, r"factor of C\.k must be between 2 and its extent 23, got 24"),
    (lambda: Schedule(matmul_wl()).rfactor("C", 4, name="A"), E.RFactorError, r"name 'A' is already taken"),
    (lambda: Schedule(matmul_wl()[:2]), E.WorkloadListError, r"the workload has no output"),
    (lambda: Schedule([matmul_wl()[2]]), E.WorkloadListError, r"reads placeholder 'A', which is not in the workload list"),
    (lambda: Schedule([1, 2]), E.WorkloadListError, r"workload entry 0 is int"),
]


def _two_stage_reduction():
    from tensorir import te
    x = te.placeholder((8, 6), "float32", "x")
    k = te.reduce_axis(6, "k")
    r = te.compute((8,), lambda i: te.sum(x[i, k], axis=k), "rowsum")
    o = te.compute((8,), lambda i: r[i] * 2.0, "out")
    return [x, o]


@pytest.mark.parametrize("make,exc,pattern", ILLEGAL, ids=[p for _, _, p in ILLEGAL])
def test_illegal_use_raises(make, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        make()
    assert isinstance(info.value, E.ScheduleError)


def test_compute_at_loop_not_enclosing_consumer():
    from tensorir import te
    x = te.placeholder((16,), "float32", "x")
    y = te.compute((16,), lambda i: x[i] + 1.0, "y")
    a = te.compute((16,), lambda i: y[i] * 2.0, "a")
    b = te.compute((16,), lambda i: y[i] * 3.0 + a[i], "b")
    with pytest.raises(E.ComputeAtError, match=r"loop a\.i does not enclose b, which reads y"):
        Schedule([x, b]).compute_at("y", "a.i")


def test_vectorize_not_innermost_fails_at_lowering_with_detail():
    s = Schedule(matmul_wl()).vectorize("C.j")
    with pytest.raises(E.LoweringError, match=r"vectorize: loop C\.j must be the innermost loop of stage C, but C\.k is inside it") as info:
        s.lower()
    assert "<-- here" in info.value.detail()


def test_vectorize_too_many_lanes():
    from tensorir import te
    x = te.placeholder((4, 100), "float32", "x")
    y = te.compute((4, 100), lambda i, j: x[i, j] + 1.0, "y")
    with pytest.raises(E.LoweringError, match=r"vectorize: loop y\.j has extent 100; expected at most 64"):
        Schedule([x, y]).vectorize("y.j").lower()


def test_error_detail_marks_culprit_loop():
    with pytest.raises(E.FuseError) as info:
        Schedule(matmul_wl()).fuse("C.i", "C.k")
    text = info.value.detail()
    assert "for C.i in range(37)   <-- here" in text


def test_replay_errors():
    A, B, C = matmul_wl()
    with pytest.raises(E.ScheduleError, match="unknown instruction 'spilt'"):
        Schedule.from_json([A, B, C], {"instructions": [["spilt", ["C.i"], {"factor": 2}, []]]})
    with pytest.raises(E.ScheduleError, match="instruction 0 is malformed"):
        Schedule.from_json([A, B, C], {"instructions": [["split", "C.i"]]})
    with pytest.raises(E.DecisionError, match="decision 'ti', which has no value"):
        Schedule.from_json([A, B, C], {"instructions": [["split", ["C.i"], {"factor": {"$decision": "ti"}}, []]]})
    with pytest.raises(E.ScheduleError, match="not valid JSON"):
        Schedule.from_json([A, B, C], "{nope")


def test_decisions_are_resolved_on_replay():
    A, B, C = matmul_wl()
    trace = {"instructions": [["split", ["C.i"], {"factor": {"$decision": "ti"}}, []]], "decisions": {"ti": 8}}
    s = Schedule.from_json([A, B, C], trace)
    assert s.loops("C") == ["C.i.0", "C.i.1", "C.j", "C.k"]
    assert s.extent("C.i.1") == 8
    check_against_evaluator(s)


def test_schedule_is_immutable():
    s0 = Schedule(matmul_wl())
    text = str(s0.lower())
    s1 = s0.split("C.i", factor=4)
    assert str(s0.lower()) == text
    assert s0.loops("C") == ["C.i", "C.j", "C.k"]
    assert s1.loops("C") == ["C.i.0", "C.i.1", "C.j", "C.k"]


def test_nested_unroll_too_large():
    s = Schedule(matmul_wl(64, 64, 64)).split("C.k", factor=32).unroll("C.i").unroll("C.j")
    with pytest.raises(E.LoweringError, match=r"unroll: nested unrolled loops C\.i\(64\) x C\.j\(64\) copy the body "
                       r"4096 times; expected at most 1024"):
        s.lower()
