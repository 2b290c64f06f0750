"""The convolution rule of the generated space (schedules/conv_space.py): which reductions it
recognizes, and that its heuristic start and random decisions compute what numpy computes on
shapes that fit no block (odd channels and widths, strides, padding, 1x1, 7x7 stem, depthwise)."""
from __future__ import annotations

import numpy as np
import pytest

from schedules import Schedule
from schedules.state import AttachKind
from schedules.conv_space import QT_CHOICES, find_convs
from schedules.conv_start import LOCAL_VALUES, heuristic_tile, lane_choices, local_rows, vector_registers
from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions, SpaceOptions
from tensorir import te
from tensorir.ops import library as ops
from tensorir.ops.registry import get_workload

AVX2 = SpaceOptions(vector_bits=256, cores=2)
AVX512 = SpaceOptions(vector_bits=512, cores=2)


def _run(space_or_sched, workload, params, decisions=None):
    if isinstance(space_or_sched, Schedule):
        s = space_or_sched
    else:
        s = space_or_sched.apply(decisions)
    w = get_workload(workload)
    ins = w.inputs(seed=1, **params)
    outs = [np.full(t.shape, np.nan, t.dtype) for t in s.tensors if not t.is_placeholder]
    s.build()(*ins, *outs)
    want = w.reference(ins, **params)
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    return s


# ------------------------------------------------------------------ recognition

def test_convolutions_are_recognized_with_their_padding_stage():
    g = Schedule(ops.conv2d(1, 5, 9, 9, 7, 3, 3, stride=2, pad=1)).stage_graph()
    (info,) = find_convs(g).values()
    assert (info.anchor, info.pad_stage, info.weights, info.depthwise) == ("Y", "Xpad", "Wt", False)
    assert (info.C, info.K, info.P, info.Q, info.R, info.S) == (5, 7, 5, 5, 3, 3)
    g = Schedule(ops.depthwise_conv2d(1, 6, 8, 8, 3, 3, stride=1, pad=0)).stage_graph()
    (info,) = find_convs(g).values()
    assert info.depthwise and info.pad_stage is None and info.data == "X"


def test_pooling_windows_are_recognized_as_windows_without_weights():
    (info,) = find_convs(Schedule(ops.max_pool2d(1, 4, 8, 8, 3, 3, 2, 1)).stage_graph()).values()
    assert info.weights is None and info.depthwise and info.pad_stage == "Xpad" and (info.P, info.Q) == (4, 4)
    (info,) = find_convs(Schedule(ops.avg_pool2d(1, 4, 8, 8, 2, 2, 2, 0)).stage_graph()).values()
    assert info.anchor == "window_sum" and info.pad_stage is None


@pytest.mark.parametrize("make", [
    lambda: ops.matmul(16, 16, 16),
    lambda: ops.batch_matmul(2, 8, 8, 8),
    lambda: ops.softmax(4, 9),
    lambda: ops.layer_norm(4, 9),
])
def test_other_reductions_are_not_convolutions(make):
    assert find_convs(Schedule(make()).stage_graph()) == {}


def test_the_space_packs_data_and_weights_into_blocked_layouts():
    space = GeneratedSpace(ops.conv2d(1, 32, 14, 14, 64, 3, 3, pad=1), AVX512)
    s = space.apply(FixedDecisions(space.default_decisions()))
    g = s.stage_graph()
    pack_x, pack_w = g.stage("Xpad_pack"), g.stage("Wt_pack")
    cb, kb = space.default_decisions()["Y.cb"], space.default_decisions()["Y.kb"]
    assert pack_x.shape == (1, 32 // cb, 16, 16, cb)            # padding and blocking in one pass
    assert pack_w.shape == (64 // kb, 32 // cb, 3, 3, cb, kb)
    assert g.stage("Xpad").attach.kind.value == "inline"


# ---------------------------------------------------------------- heuristic

def test_avx2_one_vector_tiles_are_scored_by_the_loads_that_feed_their_fmas():
    from schedules.conv_start import fma_rate
    # 32 registers, or several vectors: the accumulators, as before
    assert fma_rate(28, 1, 32) == 28.0 and fma_rate(12, 2, 16) == 12.0 and fma_rate(6, 2, 16) == 6.0
    # 16 registers, one vector: a broadcast loaded per FMA, so 14 columns rate below 6 accumulators of
    # two vectors, and no higher than 8 columns; 7 columns (a row of 7) still rate above 2 x 6 + an edge
    assert fma_rate(8, 1, 16) == pytest.approx(fma_rate(14, 1, 16) * (1 + 1 / 14) / (1 + 1 / 8))
    assert fma_rate(7, 1, 16) < fma_rate(14, 1, 16) < 6 and fma_rate(7, 1, 16) > 12 * 0.25
    # the user's NCHW 3x3 64@56 on AVX2 starts with a two-vector tile (it started with 14 x 1)
    space = GeneratedSpace(ops.conv2d(1, 64, 56, 56, 64, 3, 3, pad=1), AVX2)
    (info,) = find_convs(space.base.stage_graph()).values()
    kb, qt, pt = heuristic_tile(info, 8, 16)
    assert kb == 16 and kb // 8 * qt * pt + kb // 8 + 1 <= 16
    assert space.default_decisions()["Y.kb"] == 16


def test_the_heuristic_tile_fills_the_registers_and_fits_the_row():
    space = GeneratedSpace(ops.conv2d(1, 64, 56, 56, 64, 3, 3, pad=1), AVX512)
    (info,) = find_convs(space.base.stage_graph()).values()
    kb, qt, pt = heuristic_tile(info, 16, 32)
    assert (kb, qt, pt) == (32, 14, 1)      # 28 accumulators + 2 weight vectors + 1 broadcast
    kb, qt, pt = heuristic_tile(info, 8, 16)
    assert kb // 8 * qt * pt + kb // 8 + 1 <= 16 and kb == 16     # two vectors: see the test above
    assert lane_choices(3, 16) == [4, 16] and lane_choices(64, 16) == [16, 32, 48, 64]
    # 7 rows of 7 columns: no tile of 2 rows (its last row would run guarded, without registers)
    (info,) = find_convs(GeneratedSpace(ops.conv2d(1, 512, 7, 7, 512, 3, 3, pad=1), AVX512).base.stage_graph()).values()
    kb, qt, pt = heuristic_tile(info, 16, 32)
    assert (qt, pt) == (7, 1) and kb // 16 * 8 + 1 <= 32
    # one weight vector: the broadcast is the FMA's memory operand, no register of its own
    (info,) = find_convs(GeneratedSpace(ops.conv2d(1, 16, 8, 31, 16, 1, 1), AVX512).base.stage_graph()).values()
    assert heuristic_tile(info, 16, 32) == (16, 31, 1)


def test_a_partial_vector_of_output_channels_counts_its_pieces_as_registers():
    # 12 channels of 16 lanes lower as an 8- and a 4-lane vector: two registers per accumulator.  Counted as
    # one, DenseNet's 3x3 48->12 at 36x36 started with 3 x 9 accumulators (54 registers, spilling) and ran
    # 0.27 ms against 0.20 (decision 085)
    assert [vector_registers(k, 16) for k in (8, 12, 16, 20, 28, 32, 48)] == [1, 2, 1, 2, 3, 2, 3]
    assert [vector_registers(k, 8) for k in (6, 8, 12, 16)] == [2, 1, 2, 2]
    params = dict(N=1, C=48, H=18, W=18, K=12, R=3, S=3, stride=1, pad=1, cb=16, kb=12, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX512)
    (info,) = find_convs(space.base.stage_graph()).values()
    kb, qt, pt = heuristic_tile(info, 16, 32)
    assert kb == 12 and 2 * qt * pt + 2 + 1 <= 32 and qt * pt >= 9
    d = space.default_decisions()
    assert 2 * d["Y.qt"] * d["Y.pt"] + 2 + 1 <= 32
    _run(space, "conv2d_nchwc", params, FixedDecisions(d))


@pytest.mark.parametrize("C,K,H,R,stride", [(20, 16, 17, 1, 1), (12, 16, 23, 1, 1), (24, 16, 37, 3, 2)])
def test_the_start_takes_the_heuristic_row_width_even_off_the_listed_widths(C, K, H, R, stride):
    # 17, 23 and 19 columns are none of QT_CHOICES: the row is one register tile, not 16 + a guarded edge
    params = dict(N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=stride, pad=R // 2, dilation=1)
    space = GeneratedSpace(get_workload("conv2d").make(**params), AVX512)
    (info,) = find_convs(space.base.stage_graph()).values()
    d = space.default_decisions()
    assert d["Y.qt"] == heuristic_tile(info, 16, 32)[1] == info.Q and info.Q not in QT_CHOICES
    _run(space, "conv2d", params, FixedDecisions(d))


@pytest.mark.parametrize("C,K,H,R,order", [
    (144, 32, 28, 1, "|crs"),    # 1x1, the task's weights (32 x 144) in L1: the whole reduction in the tile
    (72, 20, 31, 1, "|crs"),
    (576, 96, 14, 1, "c|rs"),    # 1x1, 32 x 576 weights per task: one channel block's in L1 while the tile sweeps
    (16, 32, 20, 3, "c|rs"),     # a window: the local's sweep reuses the block's weights over the taps
])
def test_a_1x1_whose_weights_fit_l1_starts_with_the_reduction_inside_the_tile(C, K, H, R, order):
    params = dict(N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=1, pad=R // 2, dilation=1)
    space = GeneratedSpace(get_workload("conv2d").make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.order"] == order
    if H < 30:
        _run(space, "conv2d", params, FixedDecisions(d))


@pytest.mark.parametrize("C,K,H,stride,order", [
    (160, 160, 7, 1, "|crs"),    # the plane in one register tile: no block's weights to reuse across tiles
    (64, 32, 14, 2, "|crs"),
    (256, 256, 7, 1, "c|rs"),    # a local tile of 7 rows: a channel block's weights reused across them
])
def test_a_window_whose_local_tile_is_one_register_tile_starts_with_its_whole_reduction_inside(C, K, H, stride, order):
    # with channel blocks outside, that tile passed its accumulators through a copy per block and tap row:
    # 3x3 160@7 ran 0.41 ms against 0.24 (decision 082)
    params = dict(N=1, C=C, H=H, W=H, K=K, R=3, S=3, stride=stride, pad=1, dilation=1)
    space = GeneratedSpace(get_workload("conv2d").make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.order"] == order
    assert (d["Y.p2"] * d["Y.q2"] * d["Y.k2"] == 1) == (order == "|crs")
    if C < 200:
        _run(space, "conv2d", params, FixedDecisions(d))


@pytest.mark.parametrize("C,K,H", [(16, 96, 28), (144, 32, 28), (32, 192, 56)])
def test_a_1x1_whose_weights_fit_l1_takes_one_register_tile_per_task_walking_the_rows(C, K, H):
    # rows of several register tiles: no local tile beyond the register tile (it would reuse no weights
    # and pass the accumulators through memory once more), the whole reduction in it, tasks along each row
    params = dict(N=1, C=C, H=H, W=H, K=K, R=1, S=1, stride=1, pad=0, cb=16, kb=16, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.q2"] == 1 and d["Y.p2"] == 1 and d["Y.order"] == "|crs"
    s = _run(space, "conv2d_nchwc", params, FixedDecisions(d))
    (tasks,) = [line for line in str(s.lower()).splitlines() if "# parallel" in line]
    assert "for Y.p_" in tasks


@pytest.mark.parametrize("C,K,H,R,stride,rows", [
    (512, 512, 7, 3, 1, 7),      # 9 MiB of weights for 49 positions: one local tile over the plane
    (256, 512, 14, 3, 2, 7),
    (256, 256, 14, 3, 1, 14),
    (64, 64, 56, 3, 1, 4),       # the local tile's accumulators stay within LOCAL_VALUES
    (256, 512, 14, 1, 2, 1),     # 1x1: a channel block's reduction is too short for a larger local
    (3, 32, 224, 3, 2, 1),       # a stem's weights fit L1: one row
])
def test_the_local_tile_covers_more_rows_where_the_weights_pass_l1(C, K, H, R, stride, rows):
    space = GeneratedSpace(ops.conv2d(1, C, H, H, K, R, R, stride=stride, pad=R // 2), AVX512)
    d = space.default_decisions({"Y.columns": False})      # (the stem starts in the columns form: decision 088)
    assert d["Y.p2"] * d["Y.pt"] == rows
    assert d["Y.q2"] * d["Y.qt"] * d["Y.p2"] * d["Y.pt"] * d["Y.kb"] <= LOCAL_VALUES
    assert local_rows([1, 2, 4, 8], 1000, 1, 8, 2) == 4                 # 2 tasks left for 2 cores
    assert local_rows([1, 2, 4, 8], 3000, 4, 8, 2) == 2                 # 8192 values at most
    assert local_rows([1, 2, 3, 4, 6, 8, 12], 768, 1, 24, 2) == 6      # 4 tasks, not 3 for 2 cores
    assert local_rows([1, 2, 3, 4, 6, 8, 12], 768, 1, 24, 1) == 8      # one core: the most rows
    assert local_rows([1, 3], 10, 1, 3, 2) == 1                         # none even: the most that fit


def test_a_stem_packs_its_few_channels_as_rows_of_columns():
    space = GeneratedSpace(ops.conv2d(1, 3, 20, 19, 16, 7, 7, stride=2, pad=3), AVX512)
    s = space.apply(FixedDecisions(space.default_decisions()))
    assert s.stage_graph().stage("Xpad_pack").shape == (1, 1, 3, 26, 25)   # a padded copy, channels outside


SHAPES = [   # (workload, params): none of them fits a block
    ("conv2d", dict(N=1, C=5, H=9, W=11, K=19, R=3, S=3, stride=1, pad=1, dilation=1)),
    ("conv2d", dict(N=2, C=6, H=10, W=9, K=10, R=3, S=3, stride=2, pad=1, dilation=1)),
    ("conv2d", dict(N=1, C=20, H=7, W=7, K=24, R=1, S=1, stride=1, pad=0, dilation=1)),
    ("conv2d", dict(N=1, C=9, H=8, W=8, K=17, R=1, S=1, stride=2, pad=0, dilation=1)),
    ("conv2d", dict(N=1, C=3, H=20, W=19, K=16, R=7, S=7, stride=2, pad=3, dilation=1)),
    ("conv2d", dict(N=1, C=4, H=9, W=9, K=8, R=3, S=3, stride=1, pad=2, dilation=2)),
    ("conv2d", dict(N=1, C=40, H=7, W=7, K=72, R=3, S=3, stride=1, pad=1, dilation=1)),   # plane-wide local
    ("conv2d", dict(N=1, C=36, H=13, W=13, K=40, R=3, S=3, stride=2, pad=1, dilation=1)),
    ("conv2d", dict(N=1, C=3, H=3, W=140, K=8, R=3, S=3, stride=1, pad=1, dilation=1)),   # copy-out in chunks
    ("depthwise_conv2d", dict(N=1, C=19, H=9, W=10, R=3, S=3, stride=1, pad=1)),
    ("depthwise_conv2d", dict(N=1, C=24, H=11, W=11, R=3, S=3, stride=2, pad=1)),
]


@pytest.mark.parametrize("workload,params", SHAPES, ids=[f"{w}-{i}" for i, (w, _) in enumerate(SHAPES)])
def test_the_heuristic_start_computes_what_numpy_computes(workload, params):
    space = GeneratedSpace(get_workload(workload).make(**params), AVX512)
    _run(space, workload, params, FixedDecisions(space.default_decisions()))


class _Blocked(RandomDecisions):
    """Random decisions, the blocked-layout rule on."""

    def _pick(self, name, choices):
        return True if name.endswith(".blocked") else super()._pick(name, choices)


@pytest.mark.parametrize("seed", range(6))
def test_random_decisions_compute_what_numpy_computes(seed):
    workload, params = SHAPES[(seed * 2 + 1) % len(SHAPES)]
    space = GeneratedSpace(get_workload(workload).make(**params), AVX2 if seed % 2 else AVX512)
    src = _Blocked(seed)
    s = space.apply(src)
    assert any(k.endswith(".order") for k in src.decisions)     # the conv rule made the schedule
    _run(s, workload, params)


def test_the_nchw_nest_stays_in_the_space():
    workload, params = SHAPES[0]
    space = GeneratedSpace(get_workload(workload).make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.blocked"] is True
    src = FixedDecisions({**d, "Y.blocked": False})
    s = space.apply(src)
    assert not any(k.endswith(".order") for k in src.decisions) and "Xpad.inline" in src.decisions
    _run(s, workload, params)


# ------------------------------------------------------- local storage order

def test_a_local_tile_vectorized_along_a_middle_dim_stores_that_dim_innermost():
    """The accumulators of a tile vectorized along output channels (NCHW's dim 1) are stored
    channel-innermost, so they load and store as vectors (no gather/scatter)."""
    X = te.placeholder((6, 5), "float32", "X")
    Y = te.compute((6, 5), lambda i, j: X[i, j] * 2.0, "Y")
    Z = te.compute((6, 5), lambda i, j: Y[i, j] + 1.0, "Z")
    s = Schedule([X, Z]).split("Z.i", factor=6)
    s = s.compute_at("Y", "Z.i.0").reorder("Y.j", "Y.i").vectorize("Y.i")
    text = str(s.lower())
    assert "Y = alloc_local([5, 6], float32)" in text
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    z = np.zeros((6, 5), np.float32)
    s.build()(x, z)
    np.testing.assert_allclose(z, x * 2 + 1, rtol=1e-6)


# ------------------------------------------------------------ epilogues, pooling, blocked built-in

POOLS = [("max_pool2d", dict(N=1, C=19, H=11, W=12, R=3, S=3, stride=2, pad=1, dtype="float32")),
         ("avg_pool2d", dict(N=2, C=5, H=9, W=8, R=3, S=3, stride=2, pad=1, dtype="float32"))]


@pytest.mark.parametrize("workload,params", POOLS, ids=[w for w, _ in POOLS])
def test_pooling_is_vectorized_over_channel_blocks(workload, params):
    space = GeneratedSpace(get_workload(workload).make(**params), AVX512)
    anchor = "Y" if workload == "max_pool2d" else "window_sum"
    d = space.default_decisions({f"{anchor}.pool_rows": False})     # (the NCHW rows form: test_pool_rows.py)
    assert d[f"{anchor}.blocked"] is True and d[f"{anchor}.kb"] in lane_choices(params["C"], 16)
    _run(space, workload, params, FixedDecisions(d))
    _run(space, workload, params, _Blocked(5))


@pytest.mark.parametrize("residual", [0, 1])
def test_bias_relu_and_residual_run_on_the_convolution_tile(residual):
    params = dict(N=1, C=6, H=9, W=10, K=20, R=3, S=3, stride=1, pad=1, residual=residual, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_bias_relu").make(**params), AVX512)
    s = _run(space, "conv2d_bias_relu", params, FixedDecisions(space.default_decisions()))
    conv = s.stage_graph().stage("conv")
    assert conv.attach.kind.value == "at" and conv.attach.stage == "Y"     # no full-size conv buffer
    assert "Y_local" not in s.stages


NCHWC = [dict(N=1, C=24, H=9, W=7, K=40, R=3, S=3, stride=2, pad=1, cb=8, kb=8, dtype="float32"),
         dict(N=2, C=32, H=6, W=6, K=32, R=1, S=1, stride=1, pad=0, cb=16, kb=16, dtype="float32")]


@pytest.mark.parametrize("params", NCHWC)
def test_the_blocked_builtin_tiles_its_given_layout(params):
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.kb"] % params["kb"] == 0 and "Wt_pack.vector" not in d      # nothing packed
    _run(space, "conv2d_nchwc", params, FixedDecisions(d))
    _run(space, "conv2d_nchwc", params, _Blocked(3))


@pytest.mark.parametrize("K,kb", [(512, 32), (384, 48), (80, 16)])
def test_a_blocked_conv_tile_shares_out_the_channel_blocks(K, kb):
    # 32 blocks of 16 in tiles of 3 would leave 2 to a last, guarded tile (decision 048); 24 blocks do not
    params = dict(N=1, C=64, H=7, W=7, K=K, R=3, S=3, stride=1, pad=1, cb=16, kb=16, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX512)
    (info,) = find_convs(space.base.stage_graph()).values()
    assert heuristic_tile(info, 16, 32)[0] == kb == space.default_decisions()["Y.kb"]
    if K == 80:
        _run(space, "conv2d_nchwc", params, FixedDecisions(space.default_decisions()))


@pytest.mark.parametrize("pad_at_rows", [False, True])
def test_a_blocked_conv_pads_its_data_per_row_task_or_at_root(pad_at_rows):
    params = dict(N=1, C=16, H=13, W=11, K=32, R=3, S=3, stride=1, pad=1, cb=16, kb=16, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX512)
    assert space.default_decisions()["Y.pad_at_rows"] is True       # 4608 weights: per row task
    s = space.apply(FixedDecisions(space.default_decisions({"Y.pad_at_rows": pad_at_rows})))
    pad = [st for st in s.stage_graph().stages if st.name.startswith("Xp")]
    assert len(pad) == 1 and (pad[0].attach.kind is AttachKind.AT) == pad_at_rows
    _run(s, "conv2d_nchwc", params)


DEPTHWISE_NCHWC = [dict(N=1, C=48, H=13, W=11, R=3, S=3, stride=2, pad=1, cb=16, dtype="float32"),
                   dict(N=2, C=24, H=9, W=10, R=3, S=3, stride=1, pad=1, cb=8, dtype="float32"),
                   dict(N=1, C=32, H=7, W=9, R=5, S=3, stride=1, pad=0, cb=32, dtype="float32")]


@pytest.mark.parametrize("params", DEPTHWISE_NCHWC)
def test_the_blocked_depthwise_builtin_is_scheduled_as_a_model_build_schedules_it(params):
    tensors = get_workload("depthwise_conv2d_nchwc").make(**params)
    (info,) = find_convs(Schedule(tensors).stage_graph()).values()
    assert info.blocked and info.depthwise and info.kb == params["cb"]
    space = GeneratedSpace(tensors, AVX512)
    d = space.default_decisions()
    assert d["Y.kb"] == params["cb"] and "Xpad_pack.vector" not in d        # the given layout, nothing packed
    assert ("Y.pad_at" in d) == bool(params["pad"])
    _run(space, "depthwise_conv2d_nchwc", params, FixedDecisions(d))
    for seed in range(3):
        _run(space, "depthwise_conv2d_nchwc", params, _Blocked(seed))


@pytest.mark.parametrize("C, outer", [(32, 1), (96, 3)])
def test_a_blocked_depthwise_start_walks_along_the_rows(C, outer):
    # one channel block: the tasks walk along each row (rows outermost, not columns); more blocks: each
    # block's rows in turn
    params = dict(N=1, C=C, H=20, W=20, R=3, S=3, stride=1, pad=1, cb=32, dtype="float32")
    space = GeneratedSpace(get_workload("depthwise_conv2d_nchwc").make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.outer"] == outer
    s = _run(space, "depthwise_conv2d_nchwc", params, FixedDecisions(d))
    (tasks,) = [line for line in str(s.lower()).splitlines() if "# parallel" in line]
    assert ("Y.p_n_q_c_ci_fused" if C == 32 else "Y.c_n_p_q_ci_fused") in tasks


def test_numpy_packing_helpers_round_trip():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 24, 5, 3)).astype(np.float32)
    xb = ops.pack_nchwc(x, 8)
    assert xb.shape == (2, 3, 5, 3, 8) and xb[1, 2, 4, 1, 5] == x[1, 2 * 8 + 5, 4, 1]
    np.testing.assert_array_equal(ops.unpack_nchwc(xb), x)
    w = rng.standard_normal((32, 24, 3, 1)).astype(np.float32)
    wb = ops.pack_weights_oihwio(w, 8, 16)
    assert wb.shape == (2, 3, 3, 1, 8, 16) and wb[1, 2, 0, 0, 3, 7] == w[16 + 7, 16 + 3, 0, 0]
    d = rng.standard_normal((24, 1, 3, 2)).astype(np.float32)
    db = ops.pack_depthwise_weights(d, 8)
    assert db.shape == (3, 3, 2, 8) and db[2, 1, 0, 5] == d[16 + 5, 0, 1, 0]


def test_weights_packed_per_task_are_copied_one_vector_chunk_at_a_time():
    space = GeneratedSpace(ops.conv2d(1, 32, 7, 7, 128, 3, 3, pad=1), AVX512)
    d = space.default_decisions()
    assert d["Y.pack_in_task"] is True and d["Y.kb"] >= 32
    s = space.apply(FixedDecisions(d))
    loops = s.loops("Wt_pack")
    assert loops[-6:-1] == ["Wt_pack.d0.i.0", "Wt_pack.d1.o", "Wt_pack.d1.i", "Wt_pack.d2", "Wt_pack.d3"]
    _run(s, "conv2d", dict(N=1, C=32, H=7, W=7, K=128, R=3, S=3, stride=1, pad=1, dilation=1))


@pytest.mark.parametrize("distance", [0, 1024, 8192])
def test_the_weight_block_is_prefetched_as_decided(distance):
    workload, params = "conv2d", dict(N=1, C=36, H=13, W=13, K=40, R=3, S=3, stride=2, pad=1, dilation=1)
    space = GeneratedSpace(get_workload(workload).make(**params), AVX512)
    start = space.default_decisions()
    name = next(k for k in start if ".prefetch_" in k)
    assert start[name] == 4096          # the start prefetches (docs/decisions/032-conv-weight-prefetch.md)
    s = space.apply(FixedDecisions({**start, name: distance}))
    assert ("prefetch(" in str(s.lower())) == (distance > 0)
    _run(s, workload, params)


@pytest.mark.parametrize("C,K,H,R", [(576, 96, 14, 1), (512, 512, 7, 3), (64, 128, 28, 3), (48, 48, 13, 3)])
def test_a_blocked_start_on_avx2_scores_the_tiles_of_whole_blocks_it_builds(C, K, H, R):
    # blocks of 16 channels are two AVX2 vectors: the start is scored as such a tile (within the 16
    # registers, no column edge the score did not count), not as a one-vector tile rounded up afterwards
    # (1x1 576->96 at 14x14: 7 columns of 1 vector became 6 of 2 and a guarded edge: 0.2x onnxruntime)
    params = dict(N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=1, pad=R // 2, cb=16, kb=16, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX2)
    d = space.default_decisions()
    (info,) = find_convs(Schedule(get_workload("conv2d_nchwc").make(**params)).stage_graph()).values()
    assert (d["Y.kb"], d["Y.qt"], d["Y.pt"]) == heuristic_tile(info, 8, 16)
    m = d["Y.kb"] // 8
    assert d["Y.kb"] % 16 == 0 and d["Y.qt"] * d["Y.pt"] * m + m + 1 <= 16
    if H < 14:
        _run(space, "conv2d_nchwc", params, FixedDecisions(d))


@pytest.mark.parametrize("cb,order", [(8, "|crs"), (16, "c|rs")])
def test_a_1x1_in_blocks_of_8_keeps_its_reduction_in_the_tile_past_l1_weights(cb, order):
    # 960 -> 320 at 7x7 as one row of 49 (decision 061): 16 x 960 weights per task, past L1; in blocks of 8
    # channels the other order would pass the accumulators through memory every 8 channels (62 against
    # 80 GFLOP/s on Zen 3); in blocks of 16 it keeps one block's weights in L1 as before
    params = dict(N=1, C=960, H=1, W=49, K=320, R=1, S=1, stride=1, pad=0, cb=cb, kb=8, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX2)
    d = space.default_decisions()
    assert (d["Y.kb"], d["Y.qt"], d["Y.order"]) == (16, 6, order)
    if cb == 8:
        _run(space, "conv2d_nchwc", params, FixedDecisions(d))


@pytest.mark.parametrize("options,R,prefetch", [(AVX2, 1, 0), (AVX512, 1, 4096), (AVX2, 3, 4096)])
def test_an_avx2_1x1_whose_tasks_reuse_their_weights_starts_without_a_prefetch(options, R, prefetch):
    # 16 registers: such a 1x1 is load-bound and its task's weights stay in cache from tile to tile, so a
    # prefetch per weight line only takes load slots (decision 062); a window, or 32 registers, as before
    params = dict(N=1, C=96, H=1, W=196, K=64, R=R, S=R, stride=1, pad=R // 2, cb=16, kb=16, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), options)
    d = space.default_decisions()
    assert d["Y.prefetch_Wt"] == prefetch
    s = space.apply(FixedDecisions(d))
    assert ("prefetch(" in str(s.lower())) == (prefetch > 0)
    if options is AVX2 and R == 1:
        assert d["Y.order"] == "|crs" and d["Y.q2"] == 1
        _run(s, "conv2d_nchwc", params)


@pytest.mark.parametrize("per_line", [True, False])
def test_avx2_blocks_of_8_prefetch_their_weights_once_per_line(per_line, monkeypatch):
    # one input channel of a block of 8 output channels is 32 bytes of weights: prefetched per channel, the
    # unrolled channels issued two prefetches per line; at the tap loop around them, one per line (decision 071)
    import schedules.conv_space as cs
    monkeypatch.setattr(cs, "PREFETCH_PER_LINE", per_line)
    monkeypatch.setattr(cs, "PREFETCH_FIRST_TILE", False)    # (which moves it to the tap loop anyway: decision 073)
    params = dict(N=1, C=64, H=7, W=7, K=64, R=3, S=3, stride=1, pad=1, cb=8, kb=8, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), AVX2)
    d = space.default_decisions()
    assert d["Y.prefetch_Wt"] == 4096 and d["Y.unroll_inner"]
    s = space.apply(FixedDecisions(d))
    lines = str(s.lower()).splitlines()
    first = next(i for i, ln in enumerate(lines) if "prefetch(" in ln)
    loop = next(ln for ln in reversed(lines[:first]) if ln.lstrip().startswith("for "))
    assert ("for Y_local.s in" in loop) == per_line
    blocks = d["Y.kb"] // 8
    # unrolled, per tile (the full tiles and the edge): 8 x 8 floats per tap and block, 4 lines of 64 bytes
    prefetches = s.build().llvm_ir.count("call void @llvm.prefetch")
    tiles = sum(1 for ln in lines if "for Y_local.r in" in ln)
    assert prefetches == tiles * blocks * (4 if per_line else 8)
    _run(s, "conv2d_nchwc", params)


@pytest.mark.parametrize("options,tile", [(AVX2, (24, 4, 1)), (AVX512, None)])
def test_avx2_tiles_take_3_blocks_where_they_leave_a_smaller_last_task(options, tile, monkeypatch):
    # 16 registers: 3 blocks x 4 columns (12 accumulators) over 8 blocks of 8 channels, the last task's 2
    # blocks a smaller register tile, against 2 blocks x 4 columns (8); 32 registers: as before (decision 074)
    import schedules.conv_start as cs
    params = dict(N=1, C=64, H=7, W=7, K=64, R=3, S=3, stride=1, pad=1, cb=8, kb=8, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), options)
    d = space.default_decisions()
    got = (d["Y.kb"], d["Y.qt"], d["Y.pt"])
    monkeypatch.setattr(cs, "AVX2_RAGGED_BLOCKS", False)
    before = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), options).default_decisions()
    if tile is None:
        assert got == (before["Y.kb"], before["Y.qt"], before["Y.pt"])
        return
    assert got == tile and (before["Y.kb"], before["Y.qt"]) == (16, 4)
    s = space.apply(FixedDecisions(d))
    text = str(s.lower())
    # the tasks of 3 blocks, and the last one's 2 blocks in registers of their own
    assert "for Y_local.ko.1 in range(3):" in text and "for Y_local.ko.1 in range(2):" in text
    _run(s, "conv2d_nchwc", params)


@pytest.mark.parametrize("first_tile", [True, False])
@pytest.mark.parametrize("options", [AVX2, AVX512])
def test_a_local_tile_prefetches_its_weights_in_its_first_register_tile_only(options, first_tile, monkeypatch):
    # the register tiles of a local tile inside a channel block's loop reuse that block's weights: the first
    # streams them in, the others issued the same prefetches again, taking load slots (decision 073)
    import schedules.conv_space as cs
    monkeypatch.setattr(cs, "PREFETCH_FIRST_TILE", first_tile)
    params = dict(N=1, C=64, H=14, W=14, K=32, R=3, S=3, stride=2, pad=1, cb=16, kb=8, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), options)
    d = space.default_decisions()
    assert d["Y.prefetch_Wt"] and (d["Y.p2"] * d["Y.q2"] > 1 or options is AVX512)
    # (AVX-512's start fits the plane in one register tile, its whole reduction inside (decision 082): a local of rows)
    assert d["Y.order"] == ("c|rs" if d["Y.p2"] * d["Y.q2"] > 1 else "|crs")
    d.update({"Y.pt": 1, "Y.p2": 7})
    for order in ("c|rs", "|crs"):
        s = space.apply(FixedDecisions({**d, "Y.order": order}))
        lines = str(s.lower()).splitlines()
        above = lines[next(i for i, ln in enumerate(lines) if "prefetch(" in ln) - 1].strip()
        guarded = above.startswith("if ") and all(f"{v} == 0" in above for v in ("Y_local.p.0", "Y_local.q.0")
                                                  if f"for {v} in" in "\n".join(lines))
        # (a local tile outside every reduction loop reads all its weights per register tile: each prefetches)
        assert guarded == (first_tile and order == "c|rs"), above
        _run(s, "conv2d_nchwc", params)


@pytest.mark.parametrize("options,tile", [(AVX2, (16, 4, 1)), (AVX512, None)])
def test_avx2_rows_of_7_take_two_vectors_by_4_columns_and_a_pinned_edge(options, tile, monkeypatch):
    # 16 registers: 4 + 3 columns of 2 vectors (the 3 a smaller register tile, decision 058) ran 1.09-1.30x as
    # fast as 7 columns of 1 vector, which loads a broadcast per FMA (decision 072); 32 registers: as before
    import schedules.conv_start as cs
    monkeypatch.setattr(cs, "AVX2_RAGGED_BLOCKS", False)   # (3 blocks of 64 channels' 8 and a smaller last: 074)
    params = dict(N=1, C=64, H=7, W=7, K=64, R=3, S=3, stride=1, pad=1, cb=8, kb=8, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), options)
    d = space.default_decisions()
    (info,) = find_convs(Schedule(get_workload("conv2d_nchwc").make(**params)).stage_graph()).values()
    lanes, registers = options.vector_bits // 32, 16 if options is AVX2 else 32
    got = (d["Y.kb"], d["Y.qt"], d["Y.pt"])
    assert got == heuristic_tile(info, lanes, registers)
    monkeypatch.setattr(cs, "PINNED_EDGE_COST", cs.GUARDED_COST)
    before = heuristic_tile(info, lanes, registers)
    if tile is None:
        assert got == before
    else:
        assert got == tile and before == (8, 7, 1)
        _run(space, "conv2d_nchwc", params, FixedDecisions(d))


@pytest.mark.parametrize("options,order", [(AVX512, "|crs"), (AVX2, "c|rs")])
def test_an_avx512_1x1_keeps_its_reduction_in_the_tile_up_to_l2_weights(options, order):
    # ResNet-50's 1024 -> 256 at 14x14 as one row of 196: a task's weights (its tile's channels x 1024) past
    # L1 (decision 077): with 32 registers the whole reduction in the register tile, each tile a task (1.11x /
    # 1.23x at 1 / 2 threads on Zen 4); with 16 registers (not measured) a block's weights sweep the row as before
    params = dict(N=1, C=1024, H=1, W=196, K=256, R=1, S=1, stride=1, pad=0, cb=16, kb=16, dtype="float32")
    space = GeneratedSpace(get_workload("conv2d_nchwc").make(**params), options)
    d = space.default_decisions()
    assert d["Y.order"] == order and (d["Y.q2"] == 1) == (order == "|crs")


@pytest.mark.parametrize("C,K,H,R,small", [
    (1, 32, 24, 5, True),        # LeNet's first conv: 32 x 25 weights per task
    (3, 32, 57, 3, True),        # an RGB stem in blocks of 3
    (16, 64, 20, 3, False),      # 64 x 16 x 9 weights per task: a row's local tile reuses them
])
def test_a_window_over_few_channels_starts_with_its_register_tile_as_its_local_tile(C, K, H, R, small, monkeypatch):
    # a row's local tile passed the accumulators through memory before the epilogue and reused a few weight
    # vectors; LeNet's 5x5 1 -> 32 at 24x24 ran 0.57 ms against 0.73 (decision 098)
    from schedules import conv_space
    params = dict(N=2, C=C, H=H, W=H, K=K, R=R, S=R, stride=1, pad=R // 2, cb=C if C < 16 else 16, kb=16,
                  dtype="float32")
    tensors = get_workload("conv2d_nchwc").make(**params)
    d = GeneratedSpace(tensors, AVX512).default_decisions()
    assert (d["Y.q2"] == 1 and d["Y.order"] == "|crs") == small
    if small:
        _run(GeneratedSpace(tensors, AVX512), "conv2d_nchwc", params, FixedDecisions(d))
        monkeypatch.setattr(conv_space, "SMALL_WINDOW_WEIGHTS", 0)
        assert GeneratedSpace(tensors, AVX512).default_decisions()["Y.q2"] > 1
