"""Built-in operators as tensor expressions.

Every function returns a workload: a list of tensors, the input placeholders
first, then the output.  Intermediate stages (padding, row maxima, ...) are
reachable from the output and are not listed.  Sizes are static Python ints;
an impossible shape raises ``ValueError`` naming the parameter.

Layouts and conventions:

- ``conv2d``: data NCHW, weights KCRS, output ``(N, K, P, Q)`` with
  ``P = (H + 2*pad - dilation*(R - 1) - 1) // stride + 1`` (same for ``Q``).
  Zero padding is its own stage (``te.if_then_else``), absent when ``pad == 0``.
- ``depthwise_conv2d``: channel multiplier 1, weights ``(C, 1, R, S)`` as in
  PyTorch (``groups=C``) and TVM.
- pooling: ``pad`` may be at most half the window (``pad <= R // 2``, PyTorch's
  rule), so every window holds at least one real element.  ``max_pool2d`` pads
  with the lowest finite value of the dtype (finite rather than ``-inf`` so
  fast-math code generation stays valid), so padding never wins;
  ``avg_pool2d`` pads with zeros and divides by ``R*S`` (``count_include_pad=True``).
"""
from __future__ import annotations

import numpy as np

from tensorir import te

FLOAT_DTYPES = ("float32", "float64")
NUMERIC_DTYPES = ("float32", "float64", "int32")


# ------------------------------------------------------------------- checking

def check_sizes(op: str, minimum: int = 1, **sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{op}: {name} must be an int, got {value!r}")
        if value < minimum:
            kind = "positive" if minimum == 1 else f">= {minimum}"
            raise ValueError(f"{op}: {name} must be {kind}, got {value}")


def check_dtype(op: str, dtype: str, allowed=FLOAT_DTYPES) -> str:
    if dtype not in allowed:
        raise ValueError(f"{op}: dtype must be one of {', '.join(allowed)}, got {dtype!r}")
    return dtype


def conv_output_size(size: int, kernel: int, stride: int = 1, pad: int = 0, dilation: int = 1) -> int:
    """Output extent of a convolution or pooling window along one dimension (may be <= 0)."""
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _output_size(op: str, dim: str, size: int, kernel: int, kdim: str, stride: int, pad: int,
                 dilation: int = 1) -> int:
    out = conv_output_size(size, kernel, stride, pad, dilation)
    if out <= 0:
        raise ValueError(f"{op}: the window does not fit: {dim}={size} with pad={pad} is smaller than the "
                         f"{'dilated ' if dilation > 1 else ''}window {kdim}={kernel}"
                         f"{f' x dilation={dilation}' if dilation > 1 else ''} (output {dim} would be {out})")
    return out


def _lowest(dtype: str):
    return float(np.finfo(dtype).min) if dtype in FLOAT_DTYPES else int(np.iinfo(dtype).min)


# ------------------------------------------------------------------- helpers

def _window(base, stride: int, offset, dilation: int = 1):
    """``base*stride + offset*dilation`` without multiplying by 1 (keeps printed indices readable)."""
    base = base * stride if stride != 1 else base
    offset = offset * dilation if dilation != 1 else offset
    return base + offset


def pad2d(X: te.Tensor, pad: int, value=0.0, name: str = "Xpad") -> te.Tensor:
    """A stage padding the last two dimensions of a 4-d tensor by ``pad`` on each side with ``value``."""
    N, C, H, W = X.shape
    return te.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, h, w: te.if_then_else(te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
                                           X[n, c, h - pad, w - pad], value),
        name)


# ----------------------------------------------------------------- operators

def matmul(M: int, N: int, K: int, dtype: str = "float32") -> list:
    """Matrix product ``C[i, j] = sum_k A[i, k] * B[k, j]``.

    Returns
    -------
    list of te.Tensor
        ``[A (M, K), B (K, N), C (M, N)]``.
    """
    check_sizes("matmul", M=M, N=N, K=K)
    check_dtype("matmul", dtype, NUMERIC_DTYPES)
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return [A, B, C]


def batch_matmul(B: int, M: int, N: int, K: int, dtype: str = "float32") -> list:
    """Batched matrix product ``C[b, i, j] = sum_k A[b, i, k] * Bm[b, k, j]``.

    Returns
    -------
    list of te.Tensor
        ``[A (B, M, K), Bm (B, K, N), C (B, M, N)]``.
    """
    check_sizes("batch_matmul", B=B, M=M, N=N, K=K)
    check_dtype("batch_matmul", dtype, NUMERIC_DTYPES)
    A = te.placeholder((B, M, K), dtype, "A")
    Bm = te.placeholder((B, K, N), dtype, "Bm")
    k = te.reduce_axis(K, "k")
    C = te.compute((B, M, N), lambda b, i, j: te.sum(A[b, i, k] * Bm[b, k, j], axis=k), "C")
    return [A, Bm, C]


def dense(batch: int, in_features: int, out_features: int, dtype: str = "float32") -> list:
    """Fully connected layer with bias and ReLU: ``max(X @ W.T + bias, 0)``.

    Two stages: the reduction ``D = X @ W.T``, then ``max(D + bias, 0)``.

    Returns
    -------
    list of te.Tensor
        ``[X (batch, in), W (out, in), bias (out,), Y (batch, out)]``.
    """
    check_sizes("dense", batch=batch, in_features=in_features, out_features=out_features)
    check_dtype("dense", dtype)
    X = te.placeholder((batch, in_features), dtype, "X")
    W = te.placeholder((out_features, in_features), dtype, "W")
    bias = te.placeholder((out_features,), dtype, "bias")
    k = te.reduce_axis(in_features, "k")
    D = te.compute((batch, out_features), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), "D")
    Y = te.compute((batch, out_features), lambda i, j: te.max(D[i, j] + bias[j], 0.0), "Y")
    return [X, W, bias, Y]


def conv2d(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride: int = 1, pad: int = 0,
           dilation: int = 1, dtype: str = "float32") -> list:
    """2-d convolution, NCHW data and KCRS weights, zero padding, stride and dilation.

    ``Y[n, k, p, q] = sum_{c, r, s} Xpad[n, c, p*stride + r*dilation, q*stride + s*dilation] * Wt[k, c, r, s]``
    where ``Xpad`` is a padding stage (omitted when ``pad == 0``).

    Returns
    -------
    list of te.Tensor
        ``[X (N, C, H, W), Wt (K, C, R, S), Y (N, K, P, Q)]``.
    """
    op = "conv2d"
    check_sizes(op, N=N, C=C, H=H, W=W, K=K, R=R, S=S, stride=stride, dilation=dilation)
    check_sizes(op, 0, pad=pad)
    check_dtype(op, dtype, NUMERIC_DTYPES)
    P = _output_size(op, "H", H, R, "R", stride, pad, dilation)
    Q = _output_size(op, "W", W, S, "S", stride, pad, dilation)
    return _conv2d_stages(N, C, H, W, K, R, S, stride, pad, dilation, dtype, P, Q, "Y")


def _conv2d_stages(N, C, H, W, K, R, S, stride, pad, dilation, dtype, P, Q, name):
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder((K, C, R, S), dtype, "Wt")
    Xp = pad2d(X, pad, 0.0 if dtype in FLOAT_DTYPES else 0) if pad else X
    c, r, s = te.reduce_axis(C, "c"), te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    Y = te.compute(
        (N, K, P, Q),
        lambda n, k, p, q: te.sum(Xp[n, c, _window(p, stride, r, dilation), _window(q, stride, s, dilation)]
                                  * Wt[k, c, r, s], axis=[c, r, s]),
        name)
    return [X, Wt, Y]


def conv2d_bias_relu(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride: int = 1, pad: int = 0,
                     residual: int = 0, dtype: str = "float32") -> list:
    """A convolution with its epilogue: ``Y = max(conv2d(X, Wt) + bias[k] (+ Z), 0)``, NCHW.

    Two stages after the padding: the convolution ``conv`` (as :func:`conv2d`) and the elementwise
    output, which a schedule computes on each output tile while it is in cache.  ``residual=1``
    adds a residual input ``Z`` of the output's shape (the end of a ResNet block).

    Returns
    -------
    list of te.Tensor
        ``[X, Wt, bias (K,), Y]``, or ``[X, Wt, bias, Z, Y]`` with ``residual=1``.
    """
    op = "conv2d_bias_relu"
    check_sizes(op, N=N, C=C, H=H, W=W, K=K, R=R, S=S, stride=stride)
    check_sizes(op, 0, pad=pad)
    check_dtype(op, dtype)
    if residual not in (0, 1):
        raise ValueError(f"{op}: residual must be 0 or 1, got {residual!r}")
    P = _output_size(op, "H", H, R, "R", stride, pad)
    Q = _output_size(op, "W", W, S, "S", stride, pad)
    X, Wt, conv = _conv2d_stages(N, C, H, W, K, R, S, stride, pad, 1, dtype, P, Q, "conv")
    bias = te.placeholder((K,), dtype, "bias")
    if residual:
        Z = te.placeholder(conv.shape, dtype, "Z")
        Y = te.compute(conv.shape, lambda n, k, p, q: te.max(conv[n, k, p, q] + bias[k] + Z[n, k, p, q], 0.0), "Y")
        return [X, Wt, bias, Z, Y]
    Y = te.compute(conv.shape, lambda n, k, p, q: te.max(conv[n, k, p, q] + bias[k], 0.0), "Y")
    return [X, Wt, bias, Y]


def conv2d_nchwc(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride: int = 1, pad: int = 0,
                 cb: int = 16, kb: int = 16, dtype: str = "float32") -> list:
    """2-d convolution on blocked layouts (TVM's NCHW[x]c / OIHW[x]i[y]o, oneDNN's nChw16c).

    Data ``(N, C//cb, H, W, cb)``, weights ``(K//kb, C//cb, R, S, cb, kb)``, output
    ``(N, K//kb, P, Q, kb)``: channel ``c`` of the NCHW tensor is ``[c // cb, ..., c % cb]``.
    ``Y[n, ko, p, q, ki] = sum_{co, r, s, ci} Xpad[n, co, p*stride + r, q*stride + s, ci] * Wt[ko, co, r, s, ci, ki]``.
    The form the graph level keeps between convolutions (constant weights packed once at build
    time, :func:`pack_weights_oihwio`); ``C`` and ``K`` must be multiples of ``cb`` and ``kb``.

    Returns
    -------
    list of te.Tensor
        ``[X, Wt, Y]``.
    """
    op = "conv2d_nchwc"
    check_sizes(op, N=N, C=C, H=H, W=W, K=K, R=R, S=S, stride=stride, cb=cb, kb=kb)
    check_sizes(op, 0, pad=pad)
    check_dtype(op, dtype)
    for name, total, block in (("C", C, cb), ("K", K, kb)):
        if total % block:
            raise ValueError(f"{op}: {name}={total} must be a multiple of its block "
                             f"{'cb' if name == 'C' else 'kb'}={block}")
    P = _output_size(op, "H", H, R, "R", stride, pad)
    Q = _output_size(op, "W", W, S, "S", stride, pad)
    X = te.placeholder((N, C // cb, H, W, cb), dtype, "X")
    Wt = te.placeholder((K // kb, C // cb, R, S, cb, kb), dtype, "Wt")
    Xp = _pad_blocked(X, H, W, pad) if pad else X
    co, ci = te.reduce_axis(C // cb, "co"), te.reduce_axis(cb, "ci")
    r, s = te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    Y = te.compute(
        (N, K // kb, P, Q, kb),
        lambda n, ko, p, q, ki: te.sum(Xp[n, co, _window(p, stride, r), _window(q, stride, s), ci]
                                       * Wt[ko, co, r, s, ci, ki], axis=[co, r, s, ci]),
        "Y")
    return [X, Wt, Y]


def _pad_blocked(X, H: int, W: int, pad: int):
    """Blocked data ``(N, C/cb, H, W, cb)`` zero-padded by ``pad`` on every side of the plane."""
    n_, cblocks, _, _, cb = X.shape
    return te.compute((n_, cblocks, H + 2 * pad, W + 2 * pad, cb),
                      lambda n, c, h, w, i: te.if_then_else(te.all(h >= pad, h < H + pad, w >= pad, w < W + pad),
                                                            X[n, c, h - pad, w - pad, i], 0.0), "Xpad")


def pack_nchwc(x: np.ndarray, cb: int) -> np.ndarray:
    """NCHW -> ``(N, C//cb, H, W, cb)`` (``C`` a multiple of ``cb``)."""
    N, C, H, W = x.shape
    return np.ascontiguousarray(x.reshape(N, C // cb, cb, H, W).transpose(0, 1, 3, 4, 2))


def unpack_nchwc(y: np.ndarray) -> np.ndarray:
    """``(N, C//cb, H, W, cb)`` -> NCHW."""
    N, Co, H, W, cb = y.shape
    return np.ascontiguousarray(y.transpose(0, 1, 4, 2, 3).reshape(N, Co * cb, H, W))


def pack_weights_oihwio(w: np.ndarray, cb: int, kb: int) -> np.ndarray:
    """KCRS weights -> ``(K//kb, C//cb, R, S, cb, kb)``: the output channels of a block innermost."""
    K, C, R, S = w.shape
    return np.ascontiguousarray(w.reshape(K // kb, kb, C // cb, cb, R, S).transpose(0, 2, 4, 5, 3, 1))


def depthwise_conv2d(N: int, C: int, H: int, W: int, R: int, S: int, stride: int = 1, pad: int = 0,
                     dtype: str = "float32") -> list:
    """Depthwise 2-d convolution (channel multiplier 1), NCHW data, weights ``(C, 1, R, S)``.

    ``Y[n, c, p, q] = sum_{r, s} Xpad[n, c, p*stride + r, q*stride + s] * Wt[c, 0, r, s]``.

    Returns
    -------
    list of te.Tensor
        ``[X (N, C, H, W), Wt (C, 1, R, S), Y (N, C, P, Q)]``.
    """
    op = "depthwise_conv2d"
    check_sizes(op, N=N, C=C, H=H, W=W, R=R, S=S, stride=stride)
    check_sizes(op, 0, pad=pad)
    check_dtype(op, dtype, NUMERIC_DTYPES)
    P = _output_size(op, "H", H, R, "R", stride, pad)
    Q = _output_size(op, "W", W, S, "S", stride, pad)
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder((C, 1, R, S), dtype, "Wt")
    Xp = pad2d(X, pad, 0.0 if dtype in FLOAT_DTYPES else 0) if pad else X
    r, s = te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    Y = te.compute(
        (N, C, P, Q),
        lambda n, c, p, q: te.sum(Xp[n, c, _window(p, stride, r), _window(q, stride, s)] * Wt[c, 0, r, s],
                                  axis=[r, s]),
        "Y")
    return [X, Wt, Y]


def depthwise_conv2d_nchwc(N: int, C: int, H: int, W: int, R: int, S: int, stride: int = 1, pad: int = 0,
                           cb: int = 16, dtype: str = "float32") -> list:
    """Depthwise 2-d convolution on the blocked layout (the form a model build computes, decision 037).

    Data ``(N, C//cb, H, W, cb)``, weights ``(C//cb, R, S, cb)`` (:func:`pack_depthwise_weights`),
    output ``(N, C//cb, P, Q, cb)``:
    ``Y[n, c, p, q, ci] = sum_{r, s} Xpad[n, c, p*stride + r, q*stride + s, ci] * Wt[c, r, s, ci]``.
    ``C`` must be a multiple of ``cb``.

    Returns
    -------
    list of te.Tensor
        ``[X, Wt, Y]``.
    """
    op = "depthwise_conv2d_nchwc"
    check_sizes(op, N=N, C=C, H=H, W=W, R=R, S=S, stride=stride, cb=cb)
    check_sizes(op, 0, pad=pad)
    check_dtype(op, dtype)
    if C % cb:
        raise ValueError(f"{op}: C={C} must be a multiple of its block cb={cb}")
    P = _output_size(op, "H", H, R, "R", stride, pad)
    Q = _output_size(op, "W", W, S, "S", stride, pad)
    X = te.placeholder((N, C // cb, H, W, cb), dtype, "X")
    Wt = te.placeholder((C // cb, R, S, cb), dtype, "Wt")
    Xp = _pad_blocked(X, H, W, pad) if pad else X
    r, s = te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    Y = te.compute(
        (N, C // cb, P, Q, cb),
        lambda n, c, p, q, ci: te.sum(Xp[n, c, _window(p, stride, r), _window(q, stride, s), ci] * Wt[c, r, s, ci],
                                      axis=[r, s]),
        "Y")
    return [X, Wt, Y]


def pack_depthwise_weights(w: np.ndarray, cb: int) -> np.ndarray:
    """Depthwise weights ``(C, 1, R, S)`` -> ``(C//cb, R, S, cb)``: a block's channels innermost."""
    C, _, R, S = w.shape
    return np.ascontiguousarray(w.reshape(C // cb, cb, R, S).transpose(0, 2, 3, 1))


def _pool_setup(op: str, N, C, H, W, R, S, stride, pad, dtype, allowed):
    check_sizes(op, N=N, C=C, H=H, W=W, R=R, S=S, stride=stride)
    check_sizes(op, 0, pad=pad)
    check_dtype(op, dtype, allowed)
    if pad > R // 2 or pad > S // 2:
        raise ValueError(f"{op}: pad={pad} must be at most half the window (R={R}, S={S}): pad <= {min(R, S) // 2}")
    P = _output_size(op, "H", H, R, "R", stride, pad)
    Q = _output_size(op, "W", W, S, "S", stride, pad)
    return P, Q, te.placeholder((N, C, H, W), dtype, "X")


def max_pool2d(N: int, C: int, H: int, W: int, R: int, S: int, stride: int = 1, pad: int = 0,
               dtype: str = "float32") -> list:
    """2-d max pooling over ``R x S`` windows, NCHW.

    Padded positions hold the lowest finite value of ``dtype``, so they never win.

    Returns
    -------
    list of te.Tensor
        ``[X (N, C, H, W), Y (N, C, P, Q)]``.
    """
    P, Q, X = _pool_setup("max_pool2d", N, C, H, W, R, S, stride, pad, dtype, NUMERIC_DTYPES)
    Xp = pad2d(X, pad, _lowest(dtype)) if pad else X
    r, s = te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    Y = te.compute((N, C, P, Q),
                   lambda n, c, p, q: te.max(Xp[n, c, _window(p, stride, r), _window(q, stride, s)], axis=[r, s]),
                   "Y")
    return [X, Y]


def avg_pool2d(N: int, C: int, H: int, W: int, R: int, S: int, stride: int = 1, pad: int = 0,
               dtype: str = "float32") -> list:
    """2-d average pooling over ``R x S`` windows, NCHW, zero padding counted (``count_include_pad=True``).

    Two stages after the padding: the window sum, then a division by ``R*S``.

    Returns
    -------
    list of te.Tensor
        ``[X (N, C, H, W), Y (N, C, P, Q)]``.
    """
    P, Q, X = _pool_setup("avg_pool2d", N, C, H, W, R, S, stride, pad, dtype, FLOAT_DTYPES)
    Xp = pad2d(X, pad, 0.0) if pad else X
    r, s = te.reduce_axis(R, "r"), te.reduce_axis(S, "s")
    total = te.compute((N, C, P, Q),
                       lambda n, c, p, q: te.sum(Xp[n, c, _window(p, stride, r), _window(q, stride, s)], axis=[r, s]),
                       "window_sum")
    Y = te.compute((N, C, P, Q), lambda n, c, p, q: total[n, c, p, q] / float(R * S), "Y")
    return [X, Y]


def softmax(rows: int, cols: int, dtype: str = "float32") -> list:
    """Numerically stable softmax over the last axis.

    Stages: ``row_max[i] = max_k X[i, k]``, ``e[i, j] = exp(X[i, j] - row_max[i])``,
    ``row_sum[i] = sum_k e[i, k]``, ``Y[i, j] = e[i, j] / row_sum[i]``.

    Returns
    -------
    list of te.Tensor
        ``[X (rows, cols), Y (rows, cols)]``.
    """
    check_sizes("softmax", rows=rows, cols=cols)
    check_dtype("softmax", dtype)
    X = te.placeholder((rows, cols), dtype, "X")
    k1, k2 = te.reduce_axis(cols, "k"), te.reduce_axis(cols, "k")
    row_max = te.compute((rows,), lambda i: te.max(X[i, k1], axis=k1), "row_max")
    e = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - row_max[i]), "exp")
    row_sum = te.compute((rows,), lambda i: te.sum(e[i, k2], axis=k2), "row_sum")
    Y = te.compute((rows, cols), lambda i, j: e[i, j] / row_sum[i], "Y")
    return [X, Y]


def layer_norm(rows: int, cols: int, eps: float = 1e-5, dtype: str = "float32") -> list:
    """Layer normalization over the last axis with scale ``gamma`` and shift ``beta``.

    Stages: ``mean[i]``, ``var[i]`` (biased, mean of squared deviations),
    ``rstd[i] = 1 / sqrt(var[i] + eps)``, then
    ``Y[i, j] = (X[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j]``.

    Returns
    -------
    list of te.Tensor
        ``[X (rows, cols), gamma (cols,), beta (cols,), Y (rows, cols)]``.
    """
    check_sizes("layer_norm", rows=rows, cols=cols)
    check_dtype("layer_norm", dtype)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not 0 < eps < float("inf"):
        raise ValueError(f"layer_norm: eps must be a positive number, got {eps!r}")
    X = te.placeholder((rows, cols), dtype, "X")
    gamma = te.placeholder((cols,), dtype, "gamma")
    beta = te.placeholder((cols,), dtype, "beta")
    inv_n = 1.0 / cols
    k1, k2 = te.reduce_axis(cols, "k"), te.reduce_axis(cols, "k")
    mean = te.compute((rows,), lambda i: te.sum(X[i, k1] * inv_n, axis=k1), "mean")

    def squared_deviation(i):
        d = X[i, k2] - mean[i]
        return d * d * inv_n

    var = te.compute((rows,), lambda i: te.sum(squared_deviation(i), axis=k2), "var")
    rstd = te.compute((rows,), lambda i: 1.0 / te.sqrt(var[i] + float(eps)), "rstd")
    Y = te.compute((rows, cols), lambda i, j: (X[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j], "Y")
    return [X, gamma, beta, Y]


def elementwise_chain(n: int, dtype: str = "float32") -> list:
    """A chain of elementwise stages: ``Y = tanh(sigmoid(X * 2 + 1)) * X``.

    Stages: ``affine = X * 2 + 1``, ``sig = sigmoid(affine)``, ``Y = tanh(sig) * X``.

    Returns
    -------
    list of te.Tensor
        ``[X (n,), Y (n,)]``.
    """
    check_sizes("elementwise_chain", n=n)
    check_dtype("elementwise_chain", dtype)
    X = te.placeholder((n,), dtype, "X")
    affine = te.compute((n,), lambda i: X[i] * 2.0 + 1.0, "affine")
    sig = te.compute((n,), lambda i: te.sigmoid(affine[i]), "sig")
    Y = te.compute((n,), lambda i: te.tanh(sig[i]) * X[i], "Y")
    return [X, Y]
