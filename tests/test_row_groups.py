"""Row groups (schedules/rows.py): Softmax, LayerNormalization and reductions hosted in an elementwise
output run one parallel loop over their rows, computing each row's reductions (and a shared ``exp``
once) inside it; every heuristic start and random schedule computes what numpy computes, at shapes
the vector width does not divide."""
from __future__ import annotations

import re

import numpy as np
import pytest

from graph.builder import GraphBuilder
from graph.fusion import fuse
from graph.lower import lower_group
from logs.apply import heuristic_schedule
from schedules.rows import row_axes, shared_in_row
from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions, SpaceOptions
from schedules.state import AttachKind
from tensorir.runtime import build
from tensorir.tir.ir import ForKind
from tests.conftest import check_against_evaluator

AVX512 = SpaceOptions(vector_bits=512, cores=2)
RNG = np.random.default_rng(3)


def group_tensors(op, shape, **attrs):
    """The workload of the one fused group of a graph ``op(x)`` (plus scale/bias for LayerNorm)."""
    b = GraphBuilder("t")
    x = b.input("x", shape, "float32")
    ins = [x]
    if op == "LayerNormalization":
        n = int(np.prod(shape[attrs["axis"]:]))
        ins += [b.constant(None, RNG.standard_normal(shape[attrs["axis"]:]).astype(np.float32)),
                b.constant(None, RNG.standard_normal(shape[attrs["axis"]:]).astype(np.float32))]
        assert n
    g = b.build([b.op(op, ins, **attrs)])
    (group,) = fuse(g)
    lw = lower_group(g, group, {})
    return lw.tensors, g


def _row_loops(stage) -> int:
    """Rows the output stage's leading loops cover: the parallel loop over blocks and the rows in a block."""
    first = stage.leaf[0]
    lead = [n for n in stage.leaf if n.split(".")[0] == first.split(".")[0]] if rows_split(first) else [first]
    return int(np.prod([stage.loops[n].extent for n in lead]))


def rows_split(name: str) -> bool:
    return name.endswith(".0")


def numpy_softmax(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("shape, axis, rows", [((2, 3, 5, 37), 3, 3), ((3, 7, 19), 2, 2), ((2, 6, 4, 9), 1, 1),
                                               ((5, 21), 0, 0), ((1, 12, 9, 130), 3, 3),
                                               ((45,), 0, 0)])
def test_softmax_heuristic_runs_rows_in_parallel_and_matches_numpy(shape, axis, rows):
    tensors, _ = group_tensors("Softmax", shape, axis=axis)
    sch = heuristic_schedule(tensors)
    state = sch.stage_graph()
    out = state.stages[-1]
    assert row_axes(state, out.name, [st.name for st in state.stages if st.is_reduction]) == rows
    first = out.leaf[0]
    assert out.ann.get(first) is ForKind.PARALLEL
    for st in state.stages:
        if st.is_reduction and rows:
            # the leading row axes are fused into the parallel loop; the reductions are computed inside it
            assert _row_loops(out) == int(np.prod(shape[:rows]))
            assert st.attach.kind is AttachKind.AT and st.attach.loop == first
        elif st.is_reduction:
            # the outermost loop runs along the reduced axis: computed once, not in every iteration
            assert st.attach.kind is AttachKind.ROOT
    x = RNG.standard_normal(shape).astype(np.float32) * 3
    y = np.full(shape, np.nan, np.float32)
    build(sch.lower())(x, y)
    np.testing.assert_allclose(y, numpy_softmax(x, axis), rtol=1e-5, atol=1e-6)


def test_softmax_exp_is_computed_once_per_row_vectorized():
    tensors, _ = group_tensors("Softmax", (2, 3, 37), axis=2)
    sch = heuristic_schedule(tensors)
    state = sch.stage_graph()
    exp = next(st for st in state.stages if st.name.startswith("exp"))
    assert exp.attach.kind is AttachKind.AT and exp.attach.stage == state.stages[-1].name
    assert exp.ann.get(exp.leaf[-1]) is ForKind.VECTORIZED


@pytest.mark.parametrize("shape, axis", [((3, 7, 100), 2), ((2, 5, 6, 11), 2), ((4, 33), 1)])
def test_layer_norm_heuristic_matches_numpy(shape, axis):
    b = GraphBuilder("t")
    x = b.input("x", shape, "float32")
    scale = RNG.standard_normal(shape[axis:]).astype(np.float32)
    bias = RNG.standard_normal(shape[axis:]).astype(np.float32)
    g = b.build([b.op("LayerNormalization", [x, b.constant(None, scale), b.constant(None, bias)],
                      axis=axis, epsilon=1e-5)])
    (group,) = fuse(g)
    lw = lower_group(g, group, {})
    sch = heuristic_schedule(lw.tensors)
    out = sch.stage_graph().stages[-1]
    assert out.ann.get(out.leaf[0]) is ForKind.PARALLEL
    assert _row_loops(out) == int(np.prod(shape[:axis]))
    args = []
    xv = RNG.standard_normal(shape).astype(np.float32)
    for kind, what in lw.params:
        args.append(xv if kind == "value" and what == "x" else
                    np.ascontiguousarray(g.constants[what] if kind == "value" else what, np.float32))
    y = np.full(shape, np.nan, np.float32)
    build(sch.lower())(*args, y)
    red = tuple(range(axis, len(shape)))
    mean = xv.mean(red, keepdims=True)
    var = ((xv - mean) ** 2).mean(red, keepdims=True)
    np.testing.assert_allclose(y, (xv - mean) / np.sqrt(var + 1e-5) * scale + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op, shape, axis", [("Softmax", (2, 3, 37), 2), ("Softmax", (3, 5, 4), 1),
                                             ("LayerNormalization", (3, 5, 23), 2)])
def test_random_row_group_schedules_compute_what_numpy_computes(op, shape, axis):
    tensors, _ = group_tensors(op, shape, axis=axis)
    space = GeneratedSpace(tensors, AVX512)
    seen = set()
    for seed in range(6):
        src = RandomDecisions(seed)
        check_against_evaluator(space.apply(src), rtol=1e-4, atol=1e-5)
        seen |= {(k, v) for k, v in src.decisions.items() if k.endswith(".rows")}
    if axis == len(shape) - 1:
        assert {v for _, v in seen} == {False, True}      # both ways of hosting the rows were drawn


def test_shared_in_row_only_for_an_intermediate_read_twice_by_one_row_group():
    tensors, _ = group_tensors("Softmax", (4, 20), axis=1)
    state = GeneratedSpace(tensors, AVX512).base.stage_graph()
    flags = {st.name: shared_in_row(state, st) for st in state.stages if not st.is_output}
    assert flags["exp0"] is True
    assert not any(v for k, v in flags.items() if k != "exp0")


@pytest.mark.parametrize("shape, axis", [((1, 12, 64, 40), 3), ((2, 6, 24, 33), 3), ((3, 40, 17), 2)])
def test_a_block_of_rows_computes_only_its_rows(shape, axis):
    # the local buffers of the hosted reductions hold the block's rows, not a range of every fused axis
    tensors, _ = group_tensors("Softmax", shape, axis=axis)
    space = GeneratedSpace(tensors, AVX512)
    start = space.default_decisions()
    block = next(v for k, v in start.items() if k.endswith(".row_block"))
    assert block > 1
    sch = space.apply(FixedDecisions(start))
    text = str(sch.lower())
    sizes = {m.group(1): int(np.prod([int(d) for d in m.group(2).split(",")]))
             for m in re.finditer(r"(row_\w+) = alloc_local\(\[([\d, ]+)\]", text)}
    assert sizes["row_max0"] == block and sizes["row_sum0"] == block, sizes
    x = RNG.standard_normal(shape).astype(np.float32)
    y = np.full(shape, np.nan, np.float32)
    build(sch.lower())(x, y)
    np.testing.assert_allclose(y, numpy_softmax(x, axis), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("channels, block", [(96, 32), (48, 16)])
def test_a_layer_norm_over_blocked_channels_factors_its_reductions_into_vectors(channels, block):
    # a ConvNeXt block's LayerNorm over the channels of a depthwise conv's blocked output: its mean and
    # variance read X[k // B, ..., k % B]; factored in partials that divide the block (0.151 -> 0.026 ms)
    from graph.lower.core import blocked, to_storage
    b = GraphBuilder("t")
    x = b.input("x", (1, channels, 5, 7), "float32")
    scale, bias = (RNG.standard_normal(channels).astype(np.float32) for _ in range(2))
    t = b.op("Transpose", [x], perm=[0, 2, 3, 1])
    g = b.build([b.op("LayerNormalization", [t, b.constant(None, scale), b.constant(None, bias)], axis=3,
                      epsilon=1e-5)])
    (group,) = fuse(g)
    lw = lower_group(g, group, {"x": blocked(block)})
    space = GeneratedSpace(list(lw.tensors))
    d = space.default_decisions()
    assert sorted(v for k, v in d.items() if k.endswith(".rfactor")) == [16, 16]
    xv = RNG.standard_normal((1, channels, 5, 7)).astype(np.float32)
    args = [to_storage(xv, blocked(block)) if kind == "value" and what == "x" else
            np.ascontiguousarray(g.constants[what] if kind == "value" else what, np.float32) for kind, what in lw.params]
    y = np.full((1, 5, 7, channels), np.nan, np.float32)
    build(space.apply(FixedDecisions(d)).lower())(*args, y)
    xt = xv.transpose(0, 2, 3, 1)
    mean = xt.mean(-1, keepdims=True)
    var = ((xt - mean) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(y, (xt - mean) / np.sqrt(var + 1e-5) * scale + bias, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels, size, groups", [(64, 32, 8), (32, 16, 4), (32, 5, 4)])
def test_a_group_norm_through_reshapes_factors_its_reductions_into_vectors(channels, size, groups, monkeypatch):
    # GroupNorm as PyTorch exports it: Reshape (N, G, -1), InstanceNormalization. Its mean and variance read the
    # input through the reshape's unravelled indices, ``X[0, (i * R + k) // HW, (i * R + k) // W % H, (i * R + k) % W]``,
    # which are row-contiguous once simplified (decision 094); rows of 5 columns are not, and stay scalar
    import onnxruntime as ort
    from schedules import read_walk
    from tests.onnx_models import groupnorm_block
    from tuner.model_api import compile_model, load
    from tuner.model_compile import plan_graph
    model = groupnorm_block(channels=channels, size=size, groups=groups)
    norm = plan_graph(load(model)).lowered[0]

    def factored():
        d = GeneratedSpace(list(norm.tensors)).default_decisions()
        return sorted(v for k, v in d.items() if k.endswith(".rfactor") and v)
    lanes = GeneratedSpace(list(norm.tensors)).lanes("float32")     # (8 on an AVX2 host)
    assert factored() == ([lanes, lanes] if size % 16 == 0 else [])
    x = RNG.standard_normal((1, channels, size, size)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    got = compile_model(load(model)).run({"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(read_walk, "RESHAPED_ROW_RFACTOR", False)
    assert factored() == []


@pytest.mark.parametrize("channels, height, width", [(32, 64, 64), (16, 12, 48), (8, 9, 7)])
def test_an_instance_norm_over_rows_and_columns_factors_its_reductions_into_vectors(channels, height, width,
                                                                                     monkeypatch):
    # InstanceNormalization of a row-major tensor: its mean and variance reduce over H and W, the innermost (W)
    # contiguous; partial vectors along W (decision 104), not a scalar chain of H * W adds per channel; rows of 7
    # columns hold no vector and stay scalar
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from schedules import space as space_mod
    from tuner.model_api import compile_model, load
    from tuner.model_compile import plan_graph
    scale = RNG.standard_normal(channels).astype(np.float32)
    shift = RNG.standard_normal(channels).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("InstanceNormalization", ["input", "s", "b"], ["output"], epsilon=1e-5)], "inorm",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, channels, height, width])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, channels, height, width])],
        [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(shift, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (norm,) = plan_graph(load(model)).lowered

    def factored():
        d = GeneratedSpace(list(norm.tensors)).default_decisions()
        return sorted(v for k, v in d.items() if k.endswith(".rfactor") and v)
    lanes = GeneratedSpace(list(norm.tensors)).lanes("float32")
    assert factored() == ([lanes, lanes] if width >= lanes else [])
    x = RNG.standard_normal((1, channels, height, width)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    got = compile_model(load(model)).run({"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(space_mod, "ROW_RFACTOR_INNERMOST", False)
    assert factored() == []


@pytest.mark.parametrize("channels, size", [(32, 16), (16, 9)])
def test_an_instance_norm_over_blocked_channels_runs_its_rows_as_lanes(channels, size, monkeypatch):
    # the norm after a conv reads the conv's blocked output (channels innermost): its mean and variance over H and W
    # take the block's channels as vector lanes, the reduce loops around them (decision 105), not a scalar chain each
    import onnxruntime as ort
    from schedules import rows
    from tests.onnx_models import style_block
    from tuner.model_api import compile_model, load
    from tuner.model_compile import plan_graph
    model = style_block(channels=channels, size=size)
    plan = plan_graph(load(model))
    (norm,) = [lw for g, lw in zip(plan.groups, plan.lowered) if "InstanceNormalization" in g.ops
               or "LayerNormalization" in g.ops]

    def lanes_of_reductions():
        space = GeneratedSpace(list(norm.tensors))
        state = space.apply(FixedDecisions(space.default_decisions())).stage_graph()
        return sorted(st.name for st in state.stages if st.is_reduction
                      and ForKind.VECTORIZED in st.ann.values())
    assert lanes_of_reductions() == ["mean0", "var0"]
    x = RNG.standard_normal((1, 3, size, size)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    got = compile_model(load(model)).run({"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(rows, "ROWS_AS_LANES", False)
    assert lanes_of_reductions() == []
