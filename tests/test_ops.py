"""Built-in operators, the workload registry and workload keys."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorir import ops
from tensorir import te
from tensorir.te.evaluate import count_flops, evaluate, topo_stages
from tensorir.ops.registry import (Param, UnknownWorkloadError, Workload, WorkloadError, get_workload,
                               list_workloads)
from tensorir.te.serialize import FORMAT, canonical_text, workload_key, workload_to_json

ROOT = Path(__file__).resolve().parents[1]

# Small and odd shapes: nothing divides anything, strides, padding and dilation all exercised.
SMALL = {
    "matmul": [dict(M=7, N=13, K=5), dict(M=1, N=1, K=1)],
    "batch_matmul": [dict(B=3, M=5, N=7, K=4)],
    "dense": [dict(batch=3, in_features=17, out_features=9)],
    "conv2d": [dict(N=2, C=3, H=11, W=9, K=4, R=3, S=2, stride=2, pad=1, dilation=2),
               dict(N=1, C=2, H=6, W=5, K=3, R=3, S=3, stride=1, pad=0),
               dict(N=1, C=2, H=7, W=7, K=2, R=1, S=1, stride=3, pad=2)],
    "conv2d_bias_relu": [dict(N=1, C=3, H=9, W=8, K=5, R=3, S=3, stride=2, pad=1),
                         dict(N=2, C=2, H=5, W=6, K=3, R=1, S=1, stride=1, pad=0, residual=1)],
    "conv2d_nchwc": [dict(N=1, C=8, H=7, W=6, K=8, R=3, S=2, stride=2, pad=1, cb=4, kb=2),
                     dict(N=2, C=3, H=5, W=5, K=4, R=1, S=1, stride=1, pad=0, cb=3, kb=4)],
    "conv2d_winograd_nchwc": [dict(N=2, C=6, H=7, W=4, K=4, cb=3, kb=2), dict(N=1, C=4, H=1, W=5, K=8, cb=4, kb=8)],
    "depthwise_conv2d": [dict(N=2, C=3, H=10, W=7, R=3, S=3, stride=2, pad=1),
                         dict(N=1, C=4, H=5, W=6, R=2, S=3, stride=1, pad=0)],
    "depthwise_conv2d_nchwc": [dict(N=2, C=6, H=10, W=7, R=3, S=3, stride=2, pad=1, cb=3),
                               dict(N=1, C=8, H=5, W=6, R=2, S=3, stride=1, pad=0, cb=8)],
    "max_pool2d": [dict(N=1, C=2, H=9, W=8, R=3, S=3, stride=2, pad=1),
                   dict(N=2, C=1, H=5, W=7, R=2, S=3, stride=1, pad=1)],
    "avg_pool2d": [dict(N=1, C=2, H=9, W=8, R=3, S=3, stride=2, pad=1),
                   dict(N=1, C=3, H=4, W=6, R=2, S=2, stride=2, pad=0)],
    "softmax": [dict(rows=5, cols=33)],
    "layer_norm": [dict(rows=4, cols=19), dict(rows=3, cols=7, eps=0.5)],
    "elementwise_chain": [dict(n=37)],
}
CASES = [(name, p) for name, ps in SMALL.items() for p in ps]


def test_every_registered_workload_has_small_cases():
    assert sorted(SMALL) == sorted(w.name for w in list_workloads())


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for n, ps in SMALL.items() for i in range(len(ps))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_evaluator_matches_reference(name, params, dtype):
    w = get_workload(name)
    params = dict(params, dtype=dtype)
    tensors = w.make(**params)
    inputs = w.inputs(3, **params)
    got = evaluate(tensors, inputs)
    expect = w.reference(inputs, **params)
    assert len(got) == len(expect) == sum(not t.is_placeholder for t in tensors)
    for g, e, t in zip(got, expect, [t for t in tensors if not t.is_placeholder]):
        assert g.shape == e.shape == t.shape
        assert g.dtype == e.dtype == np.dtype(dtype)
        tol = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol)


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for n, ps in SMALL.items() for i in range(len(ps))])
def test_analytic_flops_match_count_flops(name, params):
    w = get_workload(name)
    assert w.flops(**params) == count_flops(w.make(**params)) > 0


@pytest.mark.parametrize("w", list_workloads(), ids=lambda w: w.name)
def test_default_parameters_build_and_count(w):
    tensors = w.make()
    assert w.flops() == count_flops(tensors)
    assert [t.shape for t in tensors if t.is_placeholder] == [x.shape for x in w.inputs(0)]
    assert w.description and "\n" not in w.description


def test_inputs_are_reproducible_and_in_range():
    w = get_workload("dense")
    a, b = w.inputs(7, batch=4, in_features=5, out_features=6), w.inputs(7, batch=4, in_features=5, out_features=6)
    c = w.inputs(8, batch=4, in_features=5, out_features=6)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    assert all(x.dtype == np.float32 and np.all(np.abs(x) <= 1) for x in a)


# ------------------------------------------------------------------ operator specifics

def test_conv2d_output_size_and_stages():
    X, Wt, Y = ops.conv2d(1, 3, 11, 9, 4, 3, 2, stride=2, pad=1, dilation=2)
    assert Y.shape == (1, 4, (11 + 2 - 2 * 2 - 1) // 2 + 1, (9 + 2 - 2 * 1 - 1) // 2 + 1) == (1, 4, 5, 5)
    assert [t.name for t in topo_stages([X, Wt, Y])] == ["X", "Wt", "Xpad", "Y"]
    # no padding stage when pad == 0
    X, Wt, Y = ops.conv2d(1, 3, 8, 8, 4, 3, 3)
    assert [t.name for t in topo_stages([X, Wt, Y])] == ["X", "Wt", "Y"]
    assert str(Y.op.body) == "sum(X[n, c, p + r, q + s] * Wt[k, c, r, s], axis=[c, r, s])"


def test_depthwise_weight_layout():
    X, Wt, Y = ops.depthwise_conv2d(1, 5, 8, 8, 3, 3)
    assert Wt.shape == (5, 1, 3, 3) and Y.shape == (1, 5, 6, 6)


def test_max_pool_padding_never_wins():
    w = get_workload("max_pool2d")
    params = dict(N=1, C=2, H=5, W=5, R=3, S=3, stride=2, pad=1)
    x = -1.0 - np.random.default_rng(0).uniform(0, 1, (1, 2, 5, 5)).astype(np.float32)  # all negative
    [y] = evaluate(w.make(**params), [x])
    assert np.all(y < -1.0)
    np.testing.assert_array_equal(y, w.reference([x], **params)[0])


def test_avg_pool_counts_padding():
    [y] = evaluate(ops.avg_pool2d(1, 1, 2, 2, 3, 3, stride=1, pad=1), [np.ones((1, 1, 2, 2), np.float32)])
    np.testing.assert_allclose(y, np.full((1, 1, 2, 2), 4 / 9, np.float32))


def test_softmax_rows_sum_to_one():
    w = get_workload("softmax")
    x = w.inputs(0, rows=6, cols=29)[0] * 50
    [y] = evaluate(w.make(rows=6, cols=29), [x])
    np.testing.assert_allclose(y.sum(axis=1), np.ones(6), rtol=1e-5)
    assert [t.name for t in topo_stages(w.make(rows=6, cols=29))] == ["X", "row_max", "exp", "row_sum", "Y"]


def test_layer_norm_normalizes():
    X, gamma, beta, Y = ops.layer_norm(5, 64)
    x = np.random.default_rng(1).normal(3, 2, (5, 64)).astype(np.float32)
    [y] = evaluate([X, gamma, beta, Y], [x, np.ones(64, np.float32), np.zeros(64, np.float32)])
    np.testing.assert_allclose(y.mean(axis=1), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(axis=1), 1, rtol=1e-3)


def test_matmul_int32():
    A, B, C = ops.matmul(3, 4, 5, dtype="int32")
    a = np.arange(15, dtype=np.int32).reshape(3, 5) - 7
    b = np.arange(20, dtype=np.int32).reshape(5, 4) - 9
    [c] = evaluate([A, B, C], [a, b])
    assert c.dtype == np.int32 and np.array_equal(c, a @ b)


@pytest.mark.parametrize("call,match", [
    (lambda: ops.matmul(0, 2, 2), "matmul: M must be positive, got 0"),
    (lambda: ops.matmul(2.5, 2, 2), "matmul: M must be an int"),
    (lambda: ops.softmax(2, 2, dtype="int32"), "softmax: dtype must be one of float32, float64"),
    (lambda: ops.conv2d(1, 1, 2, 2, 1, 3, 3), r"conv2d: the window does not fit: H=2 .*output H would be 0"),
    (lambda: ops.conv2d(1, 1, 5, 5, 1, 3, 3, dilation=3), r"dilated window R=3 x dilation=3"),
    (lambda: ops.conv2d(1, 1, 5, 5, 1, 3, 3, pad=-1), "pad must be >= 0, got -1"),
    (lambda: ops.max_pool2d(1, 1, 5, 5, 3, 3, pad=2), "pad=2 must be at most half the window"),
    (lambda: ops.layer_norm(2, 2, eps=0.0), "eps must be a positive number"),
])
def test_impossible_operators_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------ registry

def test_get_workload_unknown_name_lists_available():
    with pytest.raises(UnknownWorkloadError, match=r"unknown workload 'matmull' \(did you mean 'matmul'\?\); "
                                                   r"available: matmul, batch_matmul") as info:
        get_workload("matmull")
    assert isinstance(info.value, KeyError) and isinstance(info.value, WorkloadError)
    assert "\n" not in str(info.value) and not str(info.value).startswith('"')


def test_parse_params_defaults_and_order():
    w = get_workload("matmul")
    assert w.parse_params(["M=128", "N=64"]) == {"M": 128, "N": 64, "K": 512, "dtype": "float32"}
    assert w.parse_params("K=3 dtype=float64") == {"M": 512, "N": 512, "K": 3, "dtype": "float64"}
    assert w.parse_params([]) == w.bind() == w.defaults
    assert get_workload("layer_norm").parse_params(["eps=1e-3"])["eps"] == 1e-3
    assert w.label(M=2) == "matmul(M=2, N=512, K=512, dtype=float32)"


@pytest.mark.parametrize("items,match", [
    (["X=3"], r"workload 'matmul': unknown parameter 'X'; valid parameters: M, N, K, dtype"),
    (["M=1.5"], r"parameter M='1.5' is not an integer"),
    (["M=abc"], r"parameter M='abc' is not an integer"),
    (["M=0"], r"parameter 'M' must be positive, got 0"),
    (["M=-4"], r"parameter 'M' must be positive, got -4"),
    (["M"], r"expected NAME=VALUE, got 'M'"),
    (["M="], r"expected NAME=VALUE, got 'M='"),
    (["M=2", "M=3"], r"parameter 'M' given twice"),
    (["dtype=int8"], r"parameter 'dtype' must be one of float32, float64, got 'int8'"),
])
def test_parse_params_errors(items, match):
    with pytest.raises(WorkloadError, match=match) as info:
        get_workload("matmul").parse_params(items)
    assert "\n" not in str(info.value)


def test_bind_errors_and_constraints():
    conv = get_workload("conv2d")
    with pytest.raises(WorkloadError, match="unknown parameter 'padding'; valid parameters: N, C, H, W, K, R, S"):
        conv.bind(padding=1)
    with pytest.raises(WorkloadError, match="parameter 'H' must be an integer, got '56'"):
        conv.bind(H="56")
    with pytest.raises(WorkloadError, match="parameter 'stride' must be an integer, got True"):
        conv.bind(stride=True)
    assert conv.bind(pad=0)["pad"] == 0
    with pytest.raises(WorkloadError, match=r"workload 'conv2d': conv2d: the window does not fit: H=2"):
        conv.bind(H=2, pad=0)
    with pytest.raises(WorkloadError, match="pad=2 must be at most half the window"):
        get_workload("avg_pool2d").parse_params(["pad=2"])
    with pytest.raises(WorkloadError, match="parameter 'eps' must be positive"):
        get_workload("layer_norm").bind(eps=0.0)
    with pytest.raises(WorkloadError, match="unknown parameter"):
        conv.make(T=1)
    assert conv.bind(H=np.int64(20))["H"] == 20 and type(conv.bind(H=np.int64(20))["H"]) is int


def test_missing_required_parameter():
    w = Workload("square", "elementwise square", (Param("n", int),), lambda n: ops.elementwise_chain(n),
                 lambda n: 5 * n, lambda inputs, n: [inputs[0]])
    with pytest.raises(WorkloadError, match="workload 'square': missing required parameter 'n'"):
        w.bind()
    assert w.bind(n=3) == {"n": 3}


# ------------------------------------------------------------------ workload keys

def _matmul_named(a, b, c, i, j, k, M=8, N=6, K=4, dtype="float32"):
    """A matmul with the given tensor and axis names (te.compute names axes after the lambda's parameters)."""
    A = te.placeholder((M, K), dtype, a)
    B = te.placeholder((K, N), dtype, b)
    r = te.reduce_axis(K, k)
    C = te.compute((M, N), eval(f"lambda {i}, {j}: te.sum(A[{i}, r] * B[r, {j}], axis=r)",
                                {"te": te, "A": A, "B": B, "r": r}), c)
    return [A, B, C]


def test_key_ignores_variable_and_tensor_names():
    base = workload_key(_matmul_named("A", "B", "C", "i", "j", "k"))
    assert workload_key(_matmul_named("lhs", "rhs", "out", "row", "col", "red")) == base
    assert workload_key(ops.matmul(8, 6, 4)) == base
    assert len(base) == 24 and int(base, 16) >= 0


def test_key_distinguishes_shape_dtype_structure_and_order():
    base = workload_key(ops.matmul(8, 6, 4))
    assert workload_key(ops.matmul(8, 6, 5)) != base
    assert workload_key(ops.matmul(6, 8, 4)) != base
    assert workload_key(ops.matmul(8, 6, 4, dtype="float64")) != base
    A, B, C = ops.matmul(8, 6, 4)
    assert workload_key([B, A, C]) != base
    k = te.reduce_axis(4, "k")
    D = te.compute((8, 6), lambda i, j: te.sum(A[i, k] + B[k, j], axis=k), "C")
    assert workload_key([A, B, D]) != base
    E = te.compute((8, 6), lambda i, j: te.max(A[i, k] * B[k, j], axis=k), "C")
    assert workload_key([A, B, E]) != base
    keys = {workload_key(get_workload(w.name).make(**p)) for w in list_workloads() for p in SMALL[w.name]}
    assert len(keys) == len(CASES)


def test_key_is_identical_across_processes():
    code = ("from tensorir import ops; from tensorir.te.serialize import workload_key; "
            "print(workload_key(ops.conv2d(1, 3, 9, 9, 4, 3, 3, stride=2, pad=1)), "
            "workload_key(ops.max_pool2d(1, 2, 6, 6, 3, 3, pad=1)))")
    expect = f"{workload_key(ops.conv2d(1, 3, 9, 9, 4, 3, 3, stride=2, pad=1))} " \
             f"{workload_key(ops.max_pool2d(1, 2, 6, 6, 3, 3, pad=1))}"
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True, timeout=60)
        assert out.stdout.strip() == expect


def test_workload_json_is_strict_json_with_format_version():
    tensors = ops.max_pool2d(1, 2, 6, 6, 3, 3, stride=2, pad=1)
    doc = workload_to_json(tensors)
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc
    assert doc["format"] == FORMAT and FORMAT in canonical_text(tensors)
    assert [s["name"] for s in doc["stages"]] == ["X", "Xpad", "Y"] and doc["tensors"] == [0, 2]
    assert "name" not in canonical_text(tensors)
    assert doc["stages"][2]["body"][:3] == ["reduce", "max", [["r0", 3], ["r1", 3]]]
    inf_pad = te.compute((3,), lambda i: te.if_then_else(i > 0, float("-inf"), 1.0), "inf")
    assert workload_to_json([inf_pad])["stages"][0]["body"][2] == ["const", "float32", "-inf"]


@settings(max_examples=20, deadline=None)
@given(M=st.integers(1, 64), N=st.integers(1, 64), K=st.integers(1, 64))
def test_key_depends_exactly_on_shape(M, N, K):
    assert workload_key(ops.matmul(M, N, K)) == workload_key(_matmul_named("P", "Q", "R", "a", "b", "c", M, N, K))
    assert (workload_key(ops.matmul(M, N, K)) == workload_key(ops.matmul(M, N, K + 1))) is False
