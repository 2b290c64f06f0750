"""Pooling on NCHW rows (schedules/pool_rows.py) and the subsampled data pack of strided 1x1
convolutions (``pack(..., strides=...)``): numerics against numpy on shapes that fit no tile."""
from __future__ import annotations

import pytest

from schedules import Schedule
from schedules.errors import PackError
from schedules.pool_rows import column_choices, heuristic_columns
from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions, SpaceOptions
from tensorir.codegen import codegen
from tensorir.ops import library as ops
from tensorir.ops.registry import get_workload
from tests.conftest import check_workload

AVX2 = SpaceOptions(vector_bits=256, cores=2)
AVX512 = SpaceOptions(vector_bits=512, cores=2)


def _check(s, workload, params):
    check_workload(s, workload, params, seed=1)


def _pool(workload, N, C, H, W, R, stride, pad):
    return workload, dict(N=N, C=C, H=H, W=W, R=R, S=R, stride=stride, pad=pad, dtype="float32")


POOLS = [
    _pool("max_pool2d", 1, 5, 23, 23, 3, 2, 1),     # ResNet's stem pool, odd size
    _pool("max_pool2d", 2, 3, 9, 10, 2, 2, 0),      # no padding: the rows read in place
    _pool("max_pool2d", 1, 4, 7, 150, 3, 1, 1),     # a row past 4 vectors
    _pool("max_pool2d", 1, 3, 12, 12, 3, 3, 1),     # stride 3: gathers
    _pool("avg_pool2d", 1, 6, 14, 14, 3, 1, 1),
    _pool("avg_pool2d", 1, 7, 7, 7, 7, 1, 0),        # a global window: one output
    _pool("avg_pool2d", 1, 4, 35, 35, 3, 2, 0),
]


def _anchor(workload):
    return "Y" if workload == "max_pool2d" else "window_sum"


@pytest.mark.parametrize("workload,params", POOLS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(POOLS)])
def test_pooling_on_rows_computes_what_numpy_computes(workload, params):
    space = GeneratedSpace(get_workload(workload).make(**params), AVX512)
    for rows in (True, False):      # the channel-blocked form stays in the space
        _check(space.apply(FixedDecisions(space.default_decisions({f"{_anchor(workload)}.pool_rows": rows}))),
               workload, params)


@pytest.mark.parametrize("where", ["task", "row", "inline", "root"])
def test_every_place_of_the_padding_computes_what_numpy_computes(where):
    for workload, params in (POOLS[0], POOLS[4]):
        space = GeneratedSpace(get_workload(workload).make(**params), AVX512)
        a = _anchor(workload)
        _check(space.apply(FixedDecisions(space.default_decisions({f"{a}.pool_rows": True, f"{a}.pad_at": where}))),
               workload, params)


def test_the_start_pools_on_rows_where_a_strided_window_fills_half_a_vector():
    starts = [GeneratedSpace(get_workload(w).make(**p), AVX512).default_decisions()[f"{_anchor(w)}.pool_rows"]
              for w, p in POOLS]
    assert starts == [True, False, False, False, False, False, True]    # (Q: 12, 5, 148, 4, 14, 1, 17)


@pytest.mark.parametrize("options,where", [(AVX2, "inline"), (AVX512, "task")])
def test_with_16_registers_the_start_reads_a_pools_padding_in_place(options, where):
    # the per-task padded copy ran 2.9-4.6x slower than masked reads in place on Zen 3 (decision 063)
    workload, params = _pool("max_pool2d", 1, 6, 29, 29, 3, 2, 1)
    space = GeneratedSpace(get_workload(workload).make(**params), options)
    d = space.default_decisions()
    assert d["Y.pool_rows"] is True and d["Y.pad_at"] == where
    _check(space.apply(FixedDecisions(d)), workload, params)


@pytest.mark.parametrize("seed", range(4))
def test_random_pooling_decisions_compute_what_numpy_computes(seed):
    workload, params = POOLS[seed * 2 % len(POOLS)]
    space = GeneratedSpace(get_workload(workload).make(**params), AVX2 if seed % 2 else AVX512)
    src = _RowsOn(seed)
    _check(space.apply(src), workload, params)
    assert src.decisions[f"{_anchor(workload)}.pool_rows"] is True


class _RowsOn(RandomDecisions):
    def _pick(self, name, choices):
        return True if name.endswith((".blocked", ".pool_rows")) else super()._pick(name, choices)


def test_a_stride_2_pool_reads_its_rows_without_gathers():
    workload, params = POOLS[0]
    space = GeneratedSpace(get_workload(workload).make(**params), AVX512)
    s = space.apply(FixedDecisions(space.default_decisions()))
    text = str(codegen(s.lower()))
    assert "shufflevector" in text and "masked.gather" not in text


def test_row_tiles_fill_whole_vectors_and_divide_the_row():
    assert heuristic_columns(56, 16) == 56 and heuristic_columns(112, 16) == 56
    assert heuristic_columns(7, 16) == 7 and heuristic_columns(97, 16) == 64    # a prime row: 64 + a guarded edge
    assert 56 in column_choices(56, 16) and all(c >= 16 or c == 7 for c in column_choices(7, 16))


# ------------------------------------------------------------- subsampled packs

CONVS_1X1 = [dict(N=1, C=20, H=13, W=13, K=24, R=1, S=1, stride=2, pad=0, dilation=1),
             dict(N=1, C=16, H=12, W=14, K=8, R=1, S=1, stride=3, pad=0, dilation=1),
             dict(N=2, C=40, H=9, W=9, K=36, R=1, S=1, stride=2, pad=0, dilation=1)]


@pytest.mark.parametrize("params", CONVS_1X1)
@pytest.mark.parametrize("subsample", [True, False])
def test_a_strided_1x1_packs_only_the_rows_and_columns_it_reads(params, subsample):
    space = GeneratedSpace(get_workload("conv2d").make(**params), AVX512)
    d = space.default_decisions()
    assert d["Y.data_subsample"] is True
    s = space.apply(FixedDecisions({**d, "Y.data_subsample": subsample}))
    P = (params["H"] - 1) // params["stride"] + 1
    shape = [st.tensor.shape for st in s._state.stages if st.name == "X_pack"][0]
    assert shape[2] == (P if subsample else params["H"])
    _check(s, "conv2d", params)


def test_the_strides_of_a_pack_round_trip_and_print():
    s = Schedule(ops.conv2d(1, 8, 9, 9, 4, 1, 1, stride=2, pad=0))
    s = s.pack("X", {1: 4}, order=["0", "1.o", "2", "3", "1.i"], strides={2: 2, 3: 2})
    back = Schedule.from_json(s.tensors, s.to_json())
    assert str(back.lower()) == str(s.lower())
    assert "strides={2: 2, 3: 2}" in s.to_python()
    _check(back, "conv2d", dict(N=1, C=8, H=9, W=9, K=4, R=1, S=1, stride=2, pad=0, dilation=1))


def test_a_strided_pack_rejects_readers_of_other_rows_and_split_dimensions():
    s = Schedule(ops.conv2d(1, 8, 9, 9, 4, 3, 3, stride=2, pad=0))
    with pytest.raises(PackError, match="not only at multiples of its stride 2"):
        s.pack("X", {1: 4}, strides={2: 2})
    with pytest.raises(PackError, match="a stride needs a dimension"):
        s.pack("X", {1: 4}, strides={1: 2})
    with pytest.raises(PackError, match="strides of X must map"):
        s.pack("X", {1: 4}, strides=[2, 2])
