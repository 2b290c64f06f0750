"""NaN inputs: compiled elementwise min/max (Relu, Clip, Max, Min) give NaN where numpy's ``minimum``/
``maximum`` and onnxruntime do, in scalar and vectorized code, in kernels and in whole models. (Max and
min reductions do not promise it: see ``tensorir.te.max``.)"""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from schedules import Schedule
from schedules.space import FixedDecisions, GeneratedSpace
from tensorir import te
from tensorir.te.evaluate import evaluate
from tuner.model_api import compile_model


def _with_nans(shape, seed=0, every=13):
    """Random values, about one in ``every`` of them NaN; the first row along the first axis of more
    than one row has none."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, shape).astype("float32")
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, max(1, flat.size // every), replace=False)] = np.nan
    lead = next((a for a in range(x.ndim) if x.shape[a] > 1), None)
    if lead is not None:
        x[(slice(None),) * lead + (0,)] = rng.uniform(-2, 2, x.shape[lead + 1:]).astype("float32")
    return x


def _same(got, want):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-6)


def _elementwise():
    A = te.placeholder((5, 37), "float32", "A")
    B = te.placeholder((5, 37), "float32", "B")
    clip = te.compute((5, 37), lambda i, j: te.min(te.max(A[i, j], 0.0), 6.0), "clip")
    ab = te.compute((5, 37), lambda i, j: te.max(A[i, j], B[i, j]), "ab")
    ba = te.compute((5, 37), lambda i, j: te.min(B[i, j], A[i, j]), "ba")
    const_first = te.compute((5, 37), lambda i, j: te.min(0.5, B[i, j]), "const_first")
    return [A, B, clip, ab, ba, const_first]


@pytest.mark.parametrize("make", [_elementwise])
@pytest.mark.parametrize("how", ["naive", "start"])
def test_compiled_min_max_keep_nans(make, how):
    tensors = make()
    ins = [_with_nans(t.shape, seed=n) for n, t in enumerate(tensors) if t.is_placeholder]
    if how == "naive":
        s = Schedule(tensors)
    else:       # the space's start: vectorized rows, reductions in vector accumulators
        space = GeneratedSpace(tensors)
        s = space.apply(FixedDecisions(space.default_decisions()))
    outs = [np.zeros(t.shape, t.dtype) for t in tensors if not t.is_placeholder]
    s.build()(*ins, *outs)
    for got, want in zip(outs, evaluate(tensors, ins)):
        assert np.isnan(want).any() and not np.isnan(want).all()
        _same(got, want)


def test_a_model_keeps_nans_where_the_onnx_reference_and_onnxruntime_do():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
             helper.make_node("Max", ["r", "c"], ["m"]),
             helper.make_node("Min", ["x", "c"], ["n"])]
    x = _with_nans((1, 6, 11, 19), seed=3)
    inits = [helper.make_tensor("lo", TensorProto.FLOAT, [], [-0.5]), helper.make_tensor("hi", TensorProto.FLOAT, [], [1.5])]
    outs = ["r", "c", "m", "n"]
    graph = helper.make_graph(nodes, "nan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    draft = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    want = dict(zip(outs, ReferenceEvaluator(draft).run(None, {"x": x})))
    graph = helper.make_graph(nodes, "nan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, want[o].shape) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    got = compile_model(model, threads=1)(x=x)
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(outs, {"x": x})
    for name, o in zip(outs, theirs):
        _same(o, want[name])
    for name in outs:
        assert np.isnan(want[name]).any() and not np.isnan(want[name]).all(), name
        _same(got[name], want[name])
