"""The numpy reference evaluator and flop counting on hand-written tensor expressions."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorir import ops
from tensorir import te
from tensorir.te.expr import BinOp, binary
from tensorir.te.evaluate import EvaluateError, count_flops, evaluate, stage_flops, topo_stages


def rand(shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


# ------------------------------------------------------------------ basics

def test_matmul_matches_numpy_on_odd_shape():
    A, B, C = ops.matmul(7, 13, 5)
    a, b = rand((7, 5)), rand((5, 13), seed=1)
    [c] = evaluate([A, B, C], [a, b])
    assert c.dtype == np.float32 and c.shape == (7, 13)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 24), N=st.integers(1, 24), K=st.integers(1, 24), limit=st.sampled_from([1, 7, 100, 1 << 25]))
def test_matmul_property(M, N, K, limit):
    a, b = rand((M, K), seed=M), rand((K, N), seed=N)
    [c] = evaluate(ops.matmul(M, N, K), [a, b], max_elements=limit)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), shift=st.integers(-12, 12), div=st.integers(1, 5), limit=st.sampled_from([1, 3, 1000]))
def test_shifted_window_sum_property(n, shift, div, limit):
    """A guarded, shifted, strided read summed over a window agrees with a plain Python loop."""
    X = te.placeholder((n,), "float32", "X")
    k = te.reduce_axis(3, "k")

    def body(i):
        src = (i + k + shift) // div
        return te.sum(te.if_then_else(te.all(src >= 0, src < n), X[src], 0.0), axis=k)

    Y = te.compute((n,), body, "Y")
    x = rand((n,), seed=n)
    [y] = evaluate([X, Y], [x], max_elements=limit)
    expect = [sum(x[(i + k + shift) // div] for k in range(3) if 0 <= (i + k + shift) // div < n) for i in range(n)]
    np.testing.assert_allclose(y, np.array(expect, np.float32), rtol=1e-6, atol=1e-6)


def test_intermediate_stages_are_computed_in_order():
    X = te.placeholder((6,), "float32", "X")
    a = te.compute((6,), lambda i: X[i] + 1.0, "a")
    b = te.compute((6,), lambda i: a[i] * a[i], "b")
    c = te.compute((6,), lambda i: b[i] - a[i], "c")
    assert [t.name for t in topo_stages([X, c])] == ["X", "a", "b", "c"]
    x = rand((6,))
    [y] = evaluate([X, c], [x])
    np.testing.assert_allclose(y, (x + 1) ** 2 - (x + 1), rtol=1e-6)


def test_several_outputs_in_list_order():
    X = te.placeholder((3, 4), "float32", "X")
    k = te.reduce_axis(4, "k")
    s = te.compute((3,), lambda i: te.sum(X[i, k], axis=k), "s")
    d = te.compute((3, 4), lambda i, j: X[i, j] * 2.0, "d")
    x = rand((3, 4))
    got_d, got_s = evaluate([X, d, s], [x])
    np.testing.assert_allclose(got_d, 2 * x)
    np.testing.assert_allclose(got_s, x.sum(1), rtol=1e-6)


def test_zero_dimensional_tensors():
    X = te.placeholder((5, 4), "float64", "X")
    i, j = te.reduce_axis(5, "i"), te.reduce_axis(4, "j")
    total = te.compute((), lambda: te.sum(X[i, j], axis=[i, j]), "total")
    x = rand((5, 4), "float64")
    [t] = evaluate([X, total], [x])
    assert t.shape == () and t.dtype == np.float64
    assert t == pytest.approx(x.sum())


# ------------------------------------------------------------------ select and bounds

def test_select_untaken_branch_may_read_out_of_range():
    X = te.placeholder((8,), "float32", "X")
    shifted = te.compute((8,), lambda i: te.if_then_else(i >= 1, X[i - 1], -5.0), "shifted")
    tail = te.compute((8,), lambda i: te.if_then_else(i + 3 < 8, X[i + 3] * 2.0, 0.0), "tail")
    x = rand((8,))
    s, t = evaluate([X, shifted, tail], [x])
    np.testing.assert_array_equal(s, np.concatenate([[-5.0], x[:-1]]).astype(np.float32))
    np.testing.assert_array_equal(t, np.concatenate([x[3:] * 2, np.zeros(3)]).astype(np.float32))


def test_nested_select_guards_compose():
    X = te.placeholder((10,), "float32", "X")
    Y = te.compute((10,), lambda i: te.if_then_else(i < 5, te.if_then_else(i >= 2, X[i - 2], X[i + 5]),
                                                    X[i * 2 - 10]), "Y")
    x = rand((10,))
    [y] = evaluate([X, Y], [x])
    expect = [x[i - 2] if 2 <= i < 5 else x[i + 5] if i < 2 else x[2 * i - 10] for i in range(10)]
    np.testing.assert_array_equal(y, np.array(expect, np.float32))


def test_out_of_bounds_in_taken_branch_is_reported():
    X = te.placeholder((4,), "float32", "X")
    Y = te.compute((6,), lambda i: te.if_then_else(i >= 1, X[i - 1], 0.0), "Y")
    msg = r"reads X\[i - 1\] out of bounds: dimension 0 index is 4, outside \[0, 4\), at Y\[5\]"
    with pytest.raises(EvaluateError, match=msg):
        evaluate([X, Y], [rand((4,))])


def test_out_of_bounds_outside_select_is_reported_with_reduce_position():
    A = te.placeholder((3, 3), "float32", "A")
    k = te.reduce_axis(4, "k")
    C = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), "C")
    with pytest.raises(EvaluateError, match=r"dimension 1 index is 3, outside \[0, 3\), at C\[0\] with k=3"):
        evaluate([A, C], [rand((3, 3))])


def test_scalar_condition_select_evaluates_only_the_taken_branch():
    X = te.placeholder((4,), "float32", "X")
    Y = te.compute((4,), lambda i: te.if_then_else(te.const(1) > 0, X[i], X[i + 10]), "Y")
    x = rand((4,))
    np.testing.assert_array_equal(evaluate([X, Y], [x])[0], x)


# ------------------------------------------------------------------ integer semantics

def test_int32_floor_division_and_modulo_follow_python():
    X = te.placeholder((9,), "int32", "X")
    q = te.compute((9,), lambda i: X[i] // 4, "q")
    r = te.compute((9,), lambda i: X[i] % -3, "r")
    idx = te.compute((9,), lambda i: (i - 5) // 2 + (i - 5) % 3, "idx")
    x = np.arange(-4, 5, dtype=np.int32) * 3
    got_q, got_r, got_idx = evaluate([X, q, r, idx], [x])
    assert got_q.dtype == got_r.dtype == got_idx.dtype == np.int32
    assert got_q.tolist() == [v // 4 for v in x.tolist()]
    assert got_r.tolist() == [v % -3 for v in x.tolist()]
    assert got_idx.tolist() == [(i - 5) // 2 + (i - 5) % 3 for i in range(9)]


def test_int32_arithmetic_wraps_and_sums_stay_int32():
    X = te.placeholder((2, 3), "int32", "X")
    k = te.reduce_axis(3, "k")
    S = te.compute((2,), lambda i: te.sum(X[i, k], axis=k), "S")
    x = np.full((2, 3), 2 ** 30, np.int32)
    [s] = evaluate([X, S], [x])
    assert s.dtype == np.int32
    assert s.tolist() == [np.int32(-(2 ** 30))] * 2  # 3 * 2**30 wraps modulo 2**32


def test_casts_truncate_toward_zero():
    X = te.placeholder((4,), "float32", "X")
    Y = te.compute((4,), lambda i: X[i].astype("int32"), "Y")
    Z = te.compute((4,), lambda i: i.astype("float32") * 0.5, "Z")
    y, z = evaluate([X, Y, Z], [np.array([-1.7, -0.2, 0.9, 2.5], np.float32)])
    assert y.tolist() == [-1, 0, 0, 2] and z.dtype == np.float32
    assert z.tolist() == [0.0, 0.5, 1.0, 1.5]


def test_boolean_arithmetic_is_rejected_with_a_hint():
    X = te.placeholder((4,), "int32", "X")
    with pytest.raises(te.TEError, match=r"'\+' on a boolean .*te.if_then_else\(cond, 1, 0\)"):
        te.compute((4,), lambda i: te.if_then_else(binary(BinOp.ADD, X[i] > 0, i > 1), 1, 0), "Y")


# ------------------------------------------------------------------ float semantics and reductions

def test_float32_stays_float32_with_python_constants():
    X = te.placeholder((5,), "float32", "X")
    Y = te.compute((5,), lambda i: X[i] * 0.1 + 1.0 / 3.0, "Y")
    x = rand((5,))
    [y] = evaluate([X, Y], [x])
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, x * np.float32(0.1) + np.float32(1.0 / 3.0))


def test_unary_ops():
    X = te.placeholder((6,), "float32", "X")
    fns = [te.exp, te.log, te.sqrt, te.tanh, te.sigmoid, te.abs]

    def stage(n, f):
        return te.compute((6,), lambda i: f(te.abs(X[i]) + 0.5), f"u{n}")

    outs = [stage(n, f) for n, f in enumerate(fns)]
    x = rand((6,))
    got = evaluate([X] + outs, [x])
    v = np.abs(x) + np.float32(0.5)
    for g, e in zip(got, [np.exp(v), np.log(v), np.sqrt(v), np.tanh(v), 1 / (1 + np.exp(-v)), v]):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=1e-6)


def test_sigmoid_saturates_without_nan():
    X = te.placeholder((3,), "float32", "X")
    Y = te.compute((3,), lambda i: te.sigmoid(X[i]), "Y")
    [y] = evaluate([X, Y], [np.array([-1000.0, 0.0, 1000.0], np.float32)])
    assert y.tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("limit", [1, 5, 1 << 25])
def test_max_min_and_multi_axis_reductions(limit):
    X = te.placeholder((3, 4, 5), "float64", "X")
    j, k = te.reduce_axis(4, "j"), te.reduce_axis(5, "k")
    mx = te.compute((3,), lambda i: te.max(X[i, j, k], axis=[j, k]), "mx")
    j2, k2 = te.reduce_axis(4, "j"), te.reduce_axis(5, "k")
    mn = te.compute((3,), lambda i: te.min(X[i, j2, k2] * 2.0, axis=[k2, j2]), "mn")
    j3, k3 = te.reduce_axis(4, "j"), te.reduce_axis(5, "k")
    sm = te.compute((3,), lambda i: te.sum(te.exp(X[i, j3, k3]), axis=[j3, k3]), "sm")
    x = rand((3, 4, 5), "float64")
    got = evaluate([X, mx, mn, sm], [x], max_elements=limit)
    assert all(g.dtype == np.float64 for g in got)
    np.testing.assert_array_equal(got[0], x.max(axis=(1, 2)))
    np.testing.assert_array_equal(got[1], (2 * x).min(axis=(1, 2)))
    np.testing.assert_allclose(got[2], np.exp(x).sum(axis=(1, 2)), rtol=1e-12)


@pytest.mark.parametrize("limit", [1, 6, 50, 1 << 25])
def test_chunked_evaluation_matches_unchunked(limit):
    params = dict(N=2, C=3, H=7, W=6, K=4, R=3, S=3, stride=2, pad=1, dilation=1)
    tensors = ops.conv2d(**params)
    x, w = rand((2, 3, 7, 6)), rand((4, 3, 3, 3), seed=1)
    [full] = evaluate(tensors, [x, w])
    [chunked] = evaluate(tensors, [x, w], max_elements=limit)
    np.testing.assert_allclose(chunked, full, rtol=1e-5, atol=1e-6)
    A, B, C = ops.matmul(9, 11, 13)
    a, b = rand((9, 13)), rand((13, 11))
    # a body that is not a plain product takes the general (materializing) path
    k = te.reduce_axis(13, "k")
    D = te.compute((9, 11), lambda i, j: te.sum(A[i, k] * B[k, j] + 0.0, axis=k), "D")
    c, d = evaluate([A, B, C, D], [a, b], max_elements=limit)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d, a @ b, rtol=1e-5, atol=1e-6)


def test_sum_of_products_with_unused_and_one_sided_reduce_axes():
    A = te.placeholder((3, 4), "float32", "A")
    B = te.placeholder((4,), "float32", "B")
    k, r, u = te.reduce_axis(4, "k"), te.reduce_axis(4, "r"), te.reduce_axis(2, "u")
    C = te.compute((3, 5), lambda i, j: te.sum(A[i, k] * B[r], axis=[k, r, u]), "C")
    a, b = rand((3, 4)), rand((4,), seed=2)
    [c] = evaluate([A, B, C], [a, b])
    expect = 2 * np.outer(a.sum(1), np.ones(5)) * b.sum()
    np.testing.assert_allclose(c, expect, rtol=1e-5)


def test_large_matmul_stays_within_memory_budget():
    a, b = rand((512, 512)), rand((512, 512), seed=1)
    [c] = evaluate(ops.matmul(512, 512, 512), [a, b], max_elements=1 << 16)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ input validation

def test_wrong_input_count_shape_dtype():
    tensors = ops.matmul(2, 3, 4)
    a, b = rand((2, 4)), rand((4, 3))
    with pytest.raises(EvaluateError, match=r"2 input\(s\) \(A, B\) but 1 array"):
        evaluate(tensors, [a])
    with pytest.raises(EvaluateError, match=r"input 1 \('B'\) must have shape \(4, 3\), got \(3, 4\)"):
        evaluate(tensors, [a, b.T])
    with pytest.raises(EvaluateError, match=r"input 0 \('A'\) must have dtype float32, got float64"):
        evaluate(tensors, [a.astype(np.float64), b])
    with pytest.raises(EvaluateError, match="list of arrays"):
        evaluate(tensors, a)
    with pytest.raises(EvaluateError, match="single tensor"):
        evaluate(tensors[-1], [a, b])
    with pytest.raises(EvaluateError, match="not a te.Tensor"):
        evaluate([tensors[0], "B"], [a])
    with pytest.raises(EvaluateError, match="max_elements"):
        evaluate(tensors, [a, b], max_elements=0)


def test_unlisted_placeholder_is_an_error():
    A, B, C = ops.matmul(2, 3, 4)
    with pytest.raises(EvaluateError, match="reads placeholder 'B', which is not in the workload list"):
        evaluate([A, C], [rand((2, 4))])


# ------------------------------------------------------------------ flops

def test_count_flops_matmul_is_2mnk():
    assert count_flops(ops.matmul(7, 13, 5)) == 2 * 7 * 13 * 5
    assert count_flops(ops.batch_matmul(2, 3, 4, 5)) == 2 * 2 * 3 * 4 * 5


def test_count_flops_conv2d_ignores_padding_and_index_arithmetic():
    tensors = ops.conv2d(1, 3, 8, 8, 4, 3, 3, stride=2, pad=1, dilation=2)
    P = Q = (8 + 2 - 2 * 2 - 1) // 2 + 1
    assert count_flops(tensors) == 2 * 4 * P * Q * 3 * 3 * 3
    pad_stage = [t for t in topo_stages(tensors) if t.name == "Xpad"][0]
    assert stage_flops(pad_stage) == 0


def test_count_flops_user_expression():
    X = te.placeholder((10, 6), "float32", "X")
    k = te.reduce_axis(6, "k")
    # per point: sub, exp, mul (by 0.5) + the sum = 4; index arithmetic (k + 0) // 1 is free
    S = te.compute((10,), lambda i: te.sum(te.exp(X[i, (k + 0) // 1] - 1.0) * 0.5, axis=k), "S")
    # per point: max, add, sqrt = 3; the comparison and select are free; i * 2 is index arithmetic
    Y = te.compute((10,), lambda i: te.if_then_else(S[i] > 0, te.sqrt(te.max(S[i], 0.0) + (i * 2).astype("float32")),
                                                   0.0), "Y")
    assert count_flops([X, S, Y]) == 10 * 6 * 4 + 10 * 3
    # a repeated subexpression counts once
    Z = te.compute((10, 6), lambda i, j: (X[i, j] - 1.0) * (X[i, j] - 1.0), "Z")
    assert count_flops([X, Z]) == 60 * 2
    # int32 data arithmetic counts
    I = te.placeholder((4,), "int32", "I")
    J = te.compute((4,), lambda i: I[i] * 3 + i, "J")
    assert count_flops([I, J]) == 4 * 2
