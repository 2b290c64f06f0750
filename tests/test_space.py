"""The generated space's rfactor option: offered for reductions that stream an operand along the
reduce axis (matrix-vector products, row norms, the row reductions of softmax and layer_norm inside
their consumer's row loop), never for GEMM-like workloads or reductions down columns, and every
choice computes what numpy computes."""
from __future__ import annotations

import numpy as np
import pytest

from schedules.state import AttachKind
from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions, SpaceOptions
from tensorir import te
from tensorir.tir.ir import ForKind
from tests.conftest import check_against_evaluator, run_schedule
from tuner.spec import WorkloadSpec

AVX2 = SpaceOptions(vector_bits=256, cores=2)


def matvec(M=37, K=203, dtype="float32"):
    A = te.placeholder((M, K), dtype, "A")
    x = te.placeholder((K,), dtype, "x")
    k = te.reduce_axis(K, "k")
    return [A, x, te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), "y")]


def batched_row_max(B=3, M=5, K=45):
    X = te.placeholder((B, M, K), "float32", "X")
    k = te.reduce_axis(K, "k")
    return [X, te.compute((B, M), lambda b, i: te.max(X[b, i, k] * 0.5, axis=k), "m")]


def row_sq_sum_then_scale(M=19, K=77):
    """A streamed reduction feeding an elementwise output (a two-stage workload)."""
    A = te.placeholder((M, K), "float32", "A")
    k = te.reduce_axis(K, "k")
    s = te.compute((M,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), "s")
    return [A, te.compute((M, K), lambda i, j: A[i, j] / (s[i] + 1.0), "out")]


def _offered(tensors, seeds=(0,)) -> dict:
    space = GeneratedSpace(tensors, AVX2)
    out = {}
    for seed in seeds:
        src = RandomDecisions(seed)
        space.apply(src)
        out.update({k: v for k, v in src.choices.items() if k.endswith(".rfactor")})
    return out


def test_rfactor_is_offered_for_streamed_reductions_and_is_the_heuristic_start():
    assert _offered(matvec()) == {"y.rfactor": [0, 8, 16, 32]}
    assert _offered(matvec(K=12)) == {"y.rfactor": [0, 8]}        # no wider split than the axis
    assert _offered(batched_row_max()) == {"m.rfactor": [0, 8, 16, 32]}
    space = GeneratedSpace(matvec(), AVX2)
    start = space.default_decisions()
    assert start["y.rfactor"] == 8
    s = space.apply(FixedDecisions(start))
    rf = s.stage_graph().stage("y_rf")
    vec = [lp for lp, kind in rf.ann.items() if kind is ForKind.VECTORIZED]
    assert vec and vec[0].startswith("k_v")                       # the partial sums are one vector
    assert rf.leaf[-1] == vec[0]


@pytest.mark.parametrize("workload, params", [
    ("matmul", []), ("dense", []), ("batch_matmul", []), ("conv2d", []), ("depthwise_conv2d", []),
    ("max_pool2d", [])])
def test_rfactor_is_not_offered_where_outputs_share_operands(workload, params):
    # GEMM-like reductions reuse each operand across outputs: tiling the spatial axes wins there;
    # windows (pools, depthwise) read along w + s, which the output's vector axis already follows
    assert _offered(WorkloadSpec.parse(workload, params).tensors(), seeds=range(8)) == {}


def column_max_normalized(M=13, N=40):
    """A reduction inside its consumer's row loop that reads down the columns (not contiguous)."""
    X = te.placeholder((M, N), "float32", "X")
    k = te.reduce_axis(M, "k")
    c = te.compute((N,), lambda j: te.max(X[k, j], axis=k), "c")
    return [X, te.compute((M, N), lambda i, j: X[i, j] / c[j], "out")]


@pytest.mark.parametrize("name", ["softmax", "layer_norm"])
def test_row_reductions_inside_their_consumer_are_vector_partials_at_the_heuristic_start(name):
    # softmax / layer_norm rows are reduced inside the output's row loop (hosted): factored into
    # one vector of partial results along the contiguous row, computed in that loop
    space = GeneratedSpace(WorkloadSpec.parse(name, []).tensors(), AVX2)
    start = space.default_decisions()
    factored = [k for k in start if k.endswith(".rfactor")]
    assert len(factored) == 2 and all(start[k] == 8 for k in factored)
    s = space.apply(FixedDecisions(start))
    for k in factored:
        rf = s.stage_graph().stage(k.split(".")[0] + "_rf")
        assert rf.attach.kind is AttachKind.AT and rf.attach.stage == "Y"
        assert rf.ann.get(rf.leaf[-1]) is ForKind.VECTORIZED and rf.leaf[-1].startswith("k_v")


def test_row_rfactor_is_not_offered_for_reductions_down_the_columns():
    space = GeneratedSpace(column_max_normalized(), AVX2)
    for seed in range(8):
        src = RandomDecisions(seed)
        space.apply(src)
        assert not [k for k in src.choices if k.endswith(".rfactor")]
        check_against_evaluator(space.apply(RandomDecisions(seed)))


@pytest.mark.parametrize("workload, params", [
    ("softmax", ["rows=5", "cols=37"]), ("softmax", ["rows=3", "cols=8"]),
    ("layer_norm", ["rows=4", "cols=100"]), ("layer_norm", ["rows=3", "cols=41", "dtype=float64"])])
def test_every_row_rfactor_choice_computes_what_numpy_computes(workload, params):
    tensors = WorkloadSpec.parse(workload, params).tensors()
    space = GeneratedSpace(tensors, AVX2)
    offered = {}
    for seed in range(6):
        src = RandomDecisions(seed)
        check_against_evaluator(space.apply(src), rtol=1e-4, atol=1e-5)
        offered.update({k: v for k, v in src.choices.items() if k.endswith(".rfactor")})
    assert offered, "a row reduction inside its consumer is offered rfactor"
    start = space.default_decisions()
    for name, choices in offered.items():
        for f in choices:
            check_against_evaluator(space.apply(FixedDecisions({**start, name: f})), rtol=1e-4, atol=1e-5)


def test_rfactor_is_not_offered_when_the_axis_is_shorter_than_a_vector():
    assert _offered(matvec(K=7)) == {}


@pytest.mark.parametrize("make", [matvec, batched_row_max, row_sq_sum_then_scale,
                                  lambda: matvec(M=1, K=9), lambda: matvec(M=23, K=64)])
def test_every_rfactor_choice_computes_what_numpy_computes(make):
    space = GeneratedSpace(make(), AVX2)
    choices = next(iter(_offered(make()).values()), [0])
    start = space.default_decisions()
    name = next((k for k in start if k.endswith(".rfactor")), None)
    for f in choices:
        # the other decisions take their first choice (they depend on the factor)
        check_against_evaluator(space.apply(FixedDecisions({name: f} if name else {})))
    for seed in range(10):
        check_against_evaluator(space.apply(RandomDecisions(seed)))


def test_rfactor_of_an_int32_matvec_is_exact():
    tensors = matvec(M=29, K=301, dtype="int32")
    space = GeneratedSpace(tensors, AVX2)
    for src in [FixedDecisions(space.default_decisions())] + [RandomDecisions(seed) for seed in range(6)]:
        (a, x), (y,) = run_schedule(space.apply(src))
        np.testing.assert_array_equal(y, a.astype(np.int64) @ x.astype(np.int64))


# ------------------------------------------------- packing the register tile's row operand

def gemm_at(M=37, N=45, K=29):
    """C = A^T B with A stored (K, M): the rows of a register tile are A's contiguous axis."""
    A = te.placeholder((K, M), "float32", "A")
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    return [A, B, te.compute((M, N), lambda i, j: te.sum(A[k, i] * B[k, j], axis=k), "C")]


def bmm_bt(Bt=3, M=13, N=21, K=17):
    A = te.placeholder((Bt, M, K), "float32", "A")
    B = te.placeholder((Bt, N, K), "float32", "B")
    k = te.reduce_axis(K, "k")
    return [A, B, te.compute((Bt, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, j, k], axis=k), "C")]


def test_row_operand_pack_is_offered_and_the_heuristic_packs_only_a_transposed_a():
    for tensors, packed_by_default in [(gemm_at(), True), (WorkloadSpec.parse("matmul", []).tensors(), False)]:
        space = GeneratedSpace(tensors, AVX2)
        start = space.default_decisions()
        assert start["C.pack_A"] is packed_by_default
        s = space.apply(FixedDecisions({**start, "C.pack_A": True}))
        pack = s.stage_graph().stage("A_pack")
        assert pack is not None and tuple(pack.tensor.shape)[-1] == start["C.i.t3"]   # panels of tile rows
    # B (read along the vector axis) is never a row operand; a conv2d has no bare row index to pack
    for seed in range(6):
        src = RandomDecisions(seed)
        GeneratedSpace(gemm_at(), AVX2).apply(src)
        assert "C.pack_B" in src.choices and [k for k in src.choices if k.startswith("C.pack_A")] in (
            [], ["C.pack_A"])
        src = RandomDecisions(seed)
        GeneratedSpace(WorkloadSpec.parse("conv2d", ["H=8", "W=8", "C=4", "K=8"]).tensors(), AVX2).apply(src)
        assert not [k for k in src.choices if k.endswith("pack_Data") or k.endswith("pack_X")]


@pytest.mark.parametrize("make", [gemm_at, lambda: gemm_at(M=64, N=16, K=8), bmm_bt])
def test_row_operand_pack_computes_what_numpy_computes(make):
    space = GeneratedSpace(make(), AVX2)
    check_against_evaluator(space.apply(FixedDecisions(space.default_decisions())))
    for rows in (2, 3, 6):   # tile rows that divide the row axis or leave a guarded (zero-padded) edge
        # (the decisions not given take their first choice: they depend on the tile)
        s = space.apply(FixedDecisions({"C.pack_A": True, "C.i.t3": rows, "C.k.r1": 2}))
        assert s.stage_graph().stage("A_pack") is not None
        check_against_evaluator(s)
    hits = 0
    for seed in range(12):
        src = RandomDecisions(seed)
        s = space.apply(src)
        hits += bool(src.decisions.get("C.pack_A"))
        check_against_evaluator(s)
    assert hits > 0


@pytest.mark.parametrize("n, width", [(1024, 256), (512, 256), (257, 16), (136, 16), (999, 32)])
def test_heuristic_tasks_share_two_cores_evenly(n, width):
    # in-task packing makes the vector axis's blocks the whole parallel loop: 257 columns cut in
    # blocks of 256 would leave one core a block of 1 column (K=512: a row operand too large for the
    # narrow tasks of decision 053)
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=333", f"N={n}", "K=512"]).tensors(), AVX2)
    d = space.default_decisions()
    got = d["C.j.t1"] * d["C.j.t2"] * d["C.j.t3"]
    assert got == width
    tasks = -(-n // got)
    busiest = -(-tasks // 2) * got
    assert n / 2 / busiest >= 0.85 and d["C.pack_in_task"] is True


AVX512 = SpaceOptions(vector_bits=512, cores=2)


@pytest.mark.parametrize("options", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("workload, params, narrow", [
    ("dense", ["batch=32", "in_features=2048", "out_features=2048"], True),     # an MLP's layer
    ("dense", ["batch=128", "in_features=768", "out_features=3072"], True),     # BERT's FFN1
    ("matmul", ["M=1", "N=4096", "K=1024"], True),
    ("dense", ["batch=128", "in_features=3072", "out_features=768"], False),    # 1.5 MiB of rows
    ("matmul", ["M=1024", "N=1024", "K=1024"], False)])
def test_few_row_products_start_with_narrow_tasks(options, workload, params, narrow):
    # decision 053: where the row operand fits half an L2, a task spans ~64 columns, not ~256
    space = GeneratedSpace(WorkloadSpec.parse(workload, params).tensors(), options)
    d = space.default_decisions()
    a = "D" if workload == "dense" else "C"
    width = d[f"{a}.j.t1"] * d[f"{a}.j.t2"] * d[f"{a}.j.t3"]
    assert (width <= 96) == narrow, width
    if not narrow:
        assert width >= 192


@pytest.mark.parametrize("rows, tile, vectors", [(128, 8, 3), (40, 8, 3), (96, 6, 4), (20, 4, 4)])
def test_few_row_long_products_start_with_a_row_tile_that_divides_the_rows(rows, tile, vectors):
    # 24 accumulators where a 6- or 8-row tile divides the rows (decision 038), else 4 x 4
    space = GeneratedSpace(WorkloadSpec.parse("matmul", [f"M={rows}", "N=768", "K=2048"]).tensors(), AVX512)
    d = space.default_decisions()
    assert (d["C.i.t3"], d["C.j.t3"]) == (tile, vectors * 16)
    assert rows % d["C.i.t3"] == 0 and 2048 % d["C.k.r1"] == 0


@pytest.mark.parametrize("options, n, packs", [(AVX512, 16, False), (AVX512, 64, False), (AVX2, 16, False),
                                               (AVX2, 64, True)])
def test_the_start_does_not_pack_a_panel_as_wide_as_its_source(options, n, packs):
    # a B panel of all N columns is B's own layout: packing it only copies it (the start's column tile
    # is 16 with 8 lanes, all 16 or 64 columns with 16)
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=64", f"N={n}", "K=64"]).tensors(), options)
    d = space.default_decisions()
    assert d["C.pack_B"] is packs and (d["C.j.t3"] == n) is not packs
    check_against_evaluator(space.apply(FixedDecisions(d)))


@pytest.mark.parametrize("rows, n, tile, vectors", [(32, 2048, 4, 3), (100, 1000, 4, 3), (96, 768, 6, 2),
                                                    (32, 112, 4, 2)])
def test_with_16_registers_few_rows_not_in_6s_start_with_4_rows_by_3_vectors(rows, n, tile, vectors):
    # decision 064: 12 accumulators as 4 x 3 rather than 4 x 2 where 6 rows do not divide the rows
    # (112 columns are 14 vectors: 3-vector tiles would leave a ragged edge, so 4 x 2)
    space = GeneratedSpace(WorkloadSpec.parse("matmul", [f"M={rows}", f"N={n}", "K=1024"]).tensors(), AVX2)
    d = space.default_decisions()
    assert (d["C.i.t3"], d["C.j.t3"] // 8) == (tile, vectors)


def test_the_4x3_start_computes_what_numpy_computes_with_ragged_columns():
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=20", "N=140", "K=1024"]).tensors(), AVX2)
    d = space.default_decisions()
    assert (d["C.i.t3"], d["C.j.t3"]) == (4, 24)
    check_against_evaluator(space.apply(FixedDecisions(d)))


@pytest.mark.parametrize("rows, k, tile, vectors", [(49, 2048, 7, 3), (49, 256, 7, 3), (25, 1024, 5, 4),
                                                    (91, 64, 13, 2)])
def test_row_counts_no_offered_tile_divides_get_a_dividing_tile(rows, k, tile, vectors):
    # decision 043: 49 rows (a 7 x 7 map or attention window) are not cut into 6-row tiles and a
    # guarded 1-row edge; the divisor is offered to the search too
    space = GeneratedSpace(WorkloadSpec.parse("matmul", [f"M={rows}", "N=768", f"K={k}"]).tensors(), AVX512)
    d = space.default_decisions()
    assert (d["C.i.t3"], d["C.j.t3"] // 16) == (tile, vectors)
    src = FixedDecisions(d)
    space.apply(src)
    assert tile in src.choices["C.i.t3"] and 6 in src.choices["C.i.t3"]


def test_a_7_row_tile_computes_what_numpy_computes():
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=49", "N=96", "K=1024"]).tensors(), AVX512)
    d = space.default_decisions()
    assert d["C.i.t3"] == 7
    check_against_evaluator(space.apply(FixedDecisions(d)))


def test_the_8x3_start_computes_what_numpy_computes_with_ragged_columns():
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=16", "N=100", "K=1024"]).tensors(), AVX512)
    d = space.default_decisions()
    assert (d["C.i.t3"], d["C.j.t3"]) == (8, 48)
    check_against_evaluator(space.apply(FixedDecisions(d)))


@pytest.mark.parametrize("n, tile", [(1024, (6, 4)), (1000, (6, 4)), (96, (8, 3)), (112, (8, 3)), (80, (8, 3)),
                                     (160, (12, 2)), (32, (12, 2)), (24, (6, 1))])
def test_the_start_tile_avoids_a_ragged_column_tile_on_few_columns(n, tile):
    # decision 040: 4-vector tiles over 96 columns leave a guarded tile of 2 vectors in 4
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=200", f"N={n}", "K=64"]).tensors(), AVX512)
    d = space.default_decisions()
    assert (d["C.i.t3"], d["C.j.t3"] // 16) == tile


def test_the_3_vector_start_computes_what_numpy_computes():
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=37", "N=80", "K=29"]).tensors(), AVX512)
    d = space.default_decisions()
    assert d["C.j.t3"] == 48
    check_against_evaluator(space.apply(FixedDecisions(d)))


def _channel_scale(shape):
    x = te.placeholder(shape, "float32", "x")
    g = te.placeholder(shape[:2] + (1,) * (len(shape) - 2), "float32", "g")
    y = te.compute(shape, lambda n, c, *rest: x[(n, c, *rest)] * g[(n, c) + (0,) * len(rest)], "y")
    return [x, g, y]


@pytest.mark.parametrize("shape, extents", [((1, 6, 40, 40), [240, 5, 8]), ((2, 96, 7, 7), [192, 7, 1, 7]),
                                            ((1, 4, 3, 5), [12, 5])])
def test_an_elementwise_stage_fuses_its_outer_loops_until_the_parallel_loop_is_long_enough(shape, extents):
    # decision 066: (1, 6, 40, 40) runs 240 parallel rows of a nested loop over the columns, where
    # a loop of all 1200 vectors divided its index back into four axes at every vector
    space = GeneratedSpace(_channel_scale(shape), AVX2)
    s = space.apply(FixedDecisions(space.default_decisions()))
    assert [s.extent(lp) for lp in s.loops("y")] == extents
    check_against_evaluator(s)


@pytest.mark.parametrize("n, fn, avx2, avx512", [(153600, "exp", 32, 64), (4800, "swish", 32, 64),
                                                (48, "tanh", 24, 48), (80, "log", 16, 16), (40, "exp", 8, 16),
                                                (153600, "scale", 8, 16)])
def test_a_stage_evaluating_simd_math_starts_with_the_most_vectors_that_divide_it(n, fn, avx2, avx512):
    # decision 068: each exp is a chain of ~20 dependent operations; up to 4 vectors side by side kept
    # the FMA units busy (exp 1.5x, elementwise_chain 1.3-1.4x on znver3); a multiply is memory-bound
    exprs = {"exp": te.exp, "swish": lambda v: v * te.sigmoid(v), "tanh": te.tanh,
             "log": lambda v: te.log(te.abs(v) + 1.0), "scale": lambda v: v * 2.0}
    for options, want in ((AVX2, avx2), (AVX512, avx512)):
        x = te.placeholder((n,), "float32", "x")
        y = te.compute((n,), lambda i: exprs[fn](x[i]), "y")
        space = GeneratedSpace([x, y], options)
        dec = space.default_decisions()
        assert dec["y.vector"] == want, options
        check_against_evaluator(space.apply(FixedDecisions(dec)), rtol=1e-5, atol=1e-6)


def test_a_product_with_a_partial_vector_of_columns_offers_only_rows_its_pieces_fit():
    # 12 columns with 16 lanes are an 8- and a 4-lane vector: two registers per row of accumulators, so
    # 16 rows (32 registers, spilling) are not offered; 12 rows (24 + the row of B's 2 + a broadcast) are
    space = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=64", "N=12", "K=32"]).tensors(), AVX512)
    src = FixedDecisions(space.default_decisions())
    space.apply(src)
    assert src.choices["C.j.t3"] == [1, 2, 4, 8, 12] and max(src.choices["C.i.t3"]) == 12
    d = space.default_decisions({"C.i.t3": 12})
    assert d["C.i.t3"] == 12
    check_against_evaluator(space.apply(FixedDecisions(d)))


def blocked_channel_sums(C=3, H=7, W=9, B=40):
    """A global pool over a blocked layout whose block is not whole vectors (40 = 16 + 16 + 8 lanes)."""
    X = te.placeholder((1, C, H, W, B), "float32", "X")
    h, w = te.reduce_axis(H, "h"), te.reduce_axis(W, "w")
    return [X, te.compute((1, C, 1, 1, B), lambda n, c, i, j, b: te.sum(X[n, c, h, w, b], axis=[h, w]), "S")]


@pytest.mark.parametrize("block", [40, 24, 56])
def test_a_pool_over_odd_blocks_takes_the_block_as_its_tile_and_packs_nothing(block, monkeypatch):
    # decision 092: a 32-lane tile over 40-lane blocks packed the whole input into padded panels first
    # (MobileNet-V3's pool over 120 channels: 0.069 ms, 0.005 with the block as its tile)
    from schedules import read_walk
    tensors = blocked_channel_sums(B=block)
    d = GeneratedSpace(tensors, AVX512).default_decisions()
    assert d["S.b.t3"] == block and d["S.pack_X"] is False
    s = GeneratedSpace(tensors, AVX512).apply(FixedDecisions(d))
    assert "X_pack" not in str(s.lower())
    (x,), (out,) = run_schedule(s)
    np.testing.assert_allclose(out, x.sum(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(read_walk, "WHOLE_BLOCK_TILES", False)
    old = GeneratedSpace(tensors, AVX512).default_decisions()
    assert old["S.b.t3"] % 16 == 0 and old["S.pack_X"] is True


def test_a_product_over_odd_columns_keeps_whole_vector_tiles():
    # the rule is for stages that read every operand along the vector axis: a product's row operand is
    # reused by its columns, and its start keeps decision 040's tiles
    d = GeneratedSpace(WorkloadSpec.parse("matmul", ["M=64", "N=40", "K=64"]).tensors(), AVX512).default_decisions()
    assert d["C.j.t3"] % 16 == 0
