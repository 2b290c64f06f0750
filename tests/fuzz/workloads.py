"""The fuzzer's workloads: small tensor programs of many shapes, and their random inputs."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tensorir import te


@dataclass(frozen=True)
class Workload:
    """A named workload: ``make()`` returns fresh tensors (inputs first, then outputs)."""
    name: str
    make: Callable[[], list]
    reference: Callable | None = None   # inputs -> outputs (numpy); default: tensorir.evaluate
    huge: bool = False                  # needs gigabytes: only in worker processes with a memory limit
    weight: float = 1.0


def _add1(H=5, W=7):
    X = te.placeholder((H, W), "float32", "X")
    Y = te.compute((H, W), lambda i, j: X[i, j] + 1.0, "Y")
    return [X, Y]


def _exp_rowsum(R=5, C=7):
    X = te.placeholder((R, C), "float32", "X")
    e = te.compute((R, C), lambda i, j: te.exp(X[i, j]), "e")
    k = te.reduce_axis(C, "k")
    r = te.compute((R,), lambda i: te.sum(e[i, k], axis=k), "r")
    return [X, r]


def _stencil2d(H, W):
    """Zero-padded 5-point stencil: a padding stage P and the stencil S."""
    X = te.placeholder((H, W), "float32", "X")
    P = te.compute((H + 2, W + 2), lambda i, j: te.if_then_else(
        te.all(i >= 1, i < H + 1, j >= 1, j < W + 1), X[i - 1, j - 1], 0.0), "P")
    S = te.compute((H, W), lambda i, j: P[i + 1, j + 1] * 0.5 + (P[i, j + 1] + P[i + 2, j + 1]
                                                                 + P[i + 1, j] + P[i + 1, j + 2]) * 0.125, "S")
    return [X, S]


def _stencil3d(D, H, W):
    """7-point Laplacian over the interior, then an elementwise stage reading it and the input."""
    X = te.placeholder((D, H, W), "float32", "X")
    L = te.compute((D - 2, H - 2, W - 2), lambda d, h, w: X[d + 1, h + 1, w + 1] * -6.0
                   + X[d, h + 1, w + 1] + X[d + 2, h + 1, w + 1] + X[d + 1, h, w + 1]
                   + X[d + 1, h + 2, w + 1] + X[d + 1, h + 1, w] + X[d + 1, h + 1, w + 2], "L")
    Z = te.compute((D - 2, H - 2, W - 2), lambda d, h, w: L[d, h, w] * L[d, h, w] + X[d + 1, h + 1, w + 1], "Z")
    return [X, Z]


def _variance(R, C):
    """Row variance in two passes: total -> mean -> sum of squared deviations -> var."""
    X = te.placeholder((R, C), "float32", "X")
    k = te.reduce_axis(C, "k")
    total = te.compute((R,), lambda i: te.sum(X[i, k], axis=k), "total")
    mean = te.compute((R,), lambda i: total[i] * (1.0 / C), "mean")
    c = te.reduce_axis(C, "c")
    sq = te.compute((R,), lambda i: te.sum((X[i, c] - mean[i]) * (X[i, c] - mean[i]), axis=c), "sq")
    var = te.compute((R,), lambda i: sq[i] * (1.0 / C), "var")
    return [X, var]


def _logsumexp(R, C):
    X = te.placeholder((R, C), "float32", "X")
    k = te.reduce_axis(C, "k")
    m = te.compute((R,), lambda i: te.max(X[i, k], axis=k), "m")
    e = te.compute((R, C), lambda i, j: te.exp(X[i, j] - m[i]), "e")
    k2 = te.reduce_axis(C, "k2")
    s = te.compute((R,), lambda i: te.sum(e[i, k2], axis=k2), "s")
    lse = te.compute((R,), lambda i: te.log(s[i]) + m[i], "lse")
    return [X, lse]


def _two_consumers(R, C):
    """One row sum read by two outputs (a centred matrix and the squared sums)."""
    X = te.placeholder((R, C), "float32", "X")
    k = te.reduce_axis(C, "k")
    tot = te.compute((R,), lambda i: te.sum(X[i, k], axis=k), "tot")
    cen = te.compute((R, C), lambda i, j: X[i, j] - tot[i] * (1.0 / C), "cen")
    tot2 = te.compute((R,), lambda i: tot[i] * tot[i], "tot2")
    return [X, cen, tot2]


def _bmm_tt(Bn, M, N, K):
    """C[b] = A[b].T @ Bt[b].T: both operands transposed."""
    A = te.placeholder((Bn, K, M), "float32", "A")
    Bt = te.placeholder((Bn, N, K), "float32", "Bt")
    k = te.reduce_axis(K, "k")
    C = te.compute((Bn, M, N), lambda b, i, j: te.sum(A[b, k, i] * Bt[b, j, k], axis=k), "C")
    return [A, Bt, C]


def _matvec_epilogue(M, K, act):
    A = te.placeholder((M, K), "float32", "A")
    x = te.placeholder((K,), "float32", "x")
    bias = te.placeholder((M,), "float32", "bias")
    k = te.reduce_axis(K, "k")
    y = te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), "y")
    if act == "tanh":
        z = te.compute((M,), lambda i: te.tanh(y[i] + bias[i]), "z")
    else:
        z = te.compute((M,), lambda i: te.max(y[i] + bias[i], 0.0), "z")
    return [A, x, bias, z]


def _int32_matmul_relu(M, N, K):
    A = te.placeholder((M, K), "int32", "A")
    B = te.placeholder((K, N), "int32", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    D = te.compute((M, N), lambda i, j: te.max(C[i, j], 0) * 2 + A[i, 0], "D")
    return [A, B, D]


def _f64_rownorm(R, C):
    X = te.placeholder((R, C), "float64", "X")
    k = te.reduce_axis(C, "k")
    ss = te.compute((R,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), "ss")
    nrm = te.compute((R,), lambda i: te.sqrt(ss[i]) + 0.5, "nrm")
    Y = te.compute((R, C), lambda i, j: X[i, j] / nrm[i], "Yn")
    return [X, Y]


def _size1_reduce(A, B, C):
    """Size-1 dimensions around a reduction over the middle axis."""
    X = te.placeholder((A, B, C), "float32", "X")
    Y = te.compute((A, B, C), lambda i, j, l: X[i, j, l] * 2.0 - 1.0, "T")
    k = te.reduce_axis(B, "k")
    r = te.compute((A, C), lambda i, l: te.sum(Y[i, k, l], axis=k), "R")
    return [X, r]


HUGE_ROWS, HUGE_COLS = 2, 1_100_000_000


def _huge_intermediate():
    """An intermediate of 2 x 1.1e9 floats (8.8 GB) under a small output: allocation must not crash."""
    X = te.placeholder((HUGE_ROWS,), "float32", "X")
    T = te.compute((HUGE_ROWS, HUGE_COLS), lambda i, j: X[i] + 0.5, "T")
    k = te.reduce_axis(HUGE_COLS, "k")
    out = te.compute((HUGE_ROWS,), lambda i: te.max(T[i, k], axis=k), "out")
    return [X, out]


def _w(name, fn, *args, **kw):
    opts = {k: kw.pop(k) for k in ("reference", "huge", "weight") if k in kw}
    return Workload(name, lambda: fn(*args, **kw), **opts)


WORKLOADS: dict = {w.name: w for w in [
    _w("add1_5x7", _add1),
    _w("exp_rowsum_5x7", _exp_rowsum),
    _w("stencil2d_13x31", _stencil2d, 13, 31),
    _w("stencil2d_1x7", _stencil2d, 1, 7),
    _w("stencil3d_3x7x13", _stencil3d, 3, 7, 13),
    _w("stencil3d_4x3x31", _stencil3d, 4, 3, 31),
    _w("variance_7x31", _variance, 7, 31),
    _w("variance_13x1", _variance, 13, 1),
    _w("logsumexp_7x13", _logsumexp, 7, 13),
    _w("logsumexp_1x31", _logsumexp, 1, 31),
    _w("two_consumers_7x13", _two_consumers, 7, 13),
    _w("bmm_tt_3x7x13x5", _bmm_tt, 3, 7, 13, 5),
    _w("bmm_tt_1x1x31x7", _bmm_tt, 1, 1, 31, 7),
    _w("matvec_tanh_31x13", _matvec_epilogue, 31, 13, "tanh"),
    _w("matvec_relu_13x31", _matvec_epilogue, 13, 31, "relu"),
    _w("int32_matmul_relu_7x13x5", _int32_matmul_relu, 7, 13, 5),
    _w("f64_rownorm_7x31", _f64_rownorm, 7, 31),
    _w("size1_reduce_1x7x1", _size1_reduce, 1, 7, 1),
    _w("size1_reduce_1x1x13", _size1_reduce, 1, 1, 13),
    Workload("huge_intermediate", _huge_intermediate, reference=lambda ins: [ins[0] + np.float32(0.5)],
             huge=True, weight=0.3),
]}

NORMAL_WORKLOADS = [n for n, w in WORKLOADS.items() if not w.huge]


def pick_workload(rnd, allow_huge: bool = False) -> str:
    """A workload name drawn from ``rnd`` by weight (the huge ones only with ``allow_huge``)."""
    names = [n for n, w in WORKLOADS.items() if allow_huge or not w.huge]
    weights = [WORKLOADS[n].weight for n in names]
    total = sum(weights)
    x = rnd.random() * total
    for n, wt in zip(names, weights):
        x -= wt
        if x < 0:
            return n
    return names[-1]


def all_tensors(tensors) -> list:
    """Every tensor reachable from the workload's tensors (original stages included)."""
    out, seen, stack = [], set(), list(tensors)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        out.append(t)
        stack.extend(t.inputs)
    return out


def tensor_shapes(tensors) -> dict:
    """Name -> shape of every tensor reachable from ``tensors``."""
    return {t.name: tuple(t.shape) for t in all_tensors(tensors)}


def output_names(tensors) -> set:
    """Names of the workload's outputs (its tensors that are not placeholders)."""
    return {t.name for t in tensors if not t.is_placeholder}


def make_inputs(tensors, seed: int = 0) -> list:
    """Random arrays for the placeholders of ``tensors`` (integers in [-10, 10), floats in [-1, 1))."""
    rng = np.random.default_rng(seed)
    out = []
    for t in tensors:
        if t.is_placeholder:
            if t.dtype == "int32":
                out.append(rng.integers(-10, 10, size=t.shape).astype(np.int32))
            else:
                out.append(rng.uniform(-1, 1, size=t.shape).astype(t.dtype))
    return out
