"""R4's transposing tiles (schedules/transpose_tiles.py): a layout stage whose vector axis strides through
its input is tiled with one cache line of the axis the input reads contiguously, and computes what
numpy computes at shapes neither the tile nor the vector width divides."""
from __future__ import annotations

import numpy as np
import pytest

from graph.builder import GraphBuilder
from graph.fusion import fuse
from graph.lower import lower_group
from logs.apply import heuristic_schedule
from schedules.space import GeneratedSpace, RandomDecisions, SpaceOptions
from schedules.transpose_tiles import transposed_axis
from tensorir.runtime import build
from tensorir.tir.ir import ForKind
from tests.conftest import check_against_evaluator

RNG = np.random.default_rng(5)


def transpose_group(shape, perm, dtype="float32", reshape=None):
    b = GraphBuilder("t")
    x = b.input("x", shape, dtype)
    y = b.op("Reshape", [x], shape=reshape) if reshape else x
    g = b.build([b.op("Transpose", [y], perm=perm)])
    (group,) = fuse(g)
    return lower_group(g, group, {}).tensors


@pytest.mark.parametrize("shape, perm, reshape, dtype", [
    ((37, 45), (1, 0), None, "float32"),
    ((3, 37, 45), (0, 2, 1), None, "float32"),
    ((1, 33, 96), (0, 2, 3, 1), (1, 33, 3, 32), "float32"),      # the key heads of attention
    ((2, 7, 33, 9), (0, 2, 3, 1), None, "float32"),
    ((19, 21), (1, 0), None, "float64"),
    ((23, 40), (1, 0), None, "int32"),
])
def test_transposes_are_tiled_and_match_numpy(shape, perm, reshape, dtype):
    tensors = transpose_group(shape, perm, dtype, reshape)
    sch = heuristic_schedule(tensors)
    out = sch.stage_graph().stages[-1]
    assert transposed_axis(out) is not None
    # the tile's inner loop sits right outside the vector loop
    assert out.ann.get(out.leaf[-1]) is ForKind.VECTORIZED and out.leaf[-2].endswith(".1")
    assert out.ann.get(out.leaf[0]) is ForKind.PARALLEL
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    want = np.transpose(x.reshape(reshape) if reshape else x, perm)
    y = np.zeros(want.shape, dtype)
    build(sch.lower())(x, y)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("shape, perm", [((1, 33, 96), (0, 2, 1)), ((4, 6, 5), (2, 1, 0))])
def test_random_transpose_schedules_compute_what_numpy_computes(shape, perm):
    space = GeneratedSpace(transpose_group(shape, perm), SpaceOptions(vector_bits=512, cores=2))
    for seed in range(6):
        check_against_evaluator(space.apply(RandomDecisions(seed)), rtol=0, atol=0)


def test_a_transpose_that_keeps_the_last_axis_is_not_tiled():
    # (1, 0, 2): the vector axis reads the input contiguously; the gather-free nest stays as it was
    tensors = transpose_group((5, 6, 40), (1, 0, 2))
    sch = heuristic_schedule(tensors)
    out = sch.stage_graph().stages[-1]
    assert transposed_axis(out) is None
    assert not any(k.endswith(".transpose_tile") for k in GeneratedSpace(tensors).default_decisions())
