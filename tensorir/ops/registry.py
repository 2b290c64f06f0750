"""The registry of built-in workloads: named, parameterized operators with numpy references.

>>> from tensorir.ops.registry import get_workload
>>> w = get_workload("matmul")
>>> params = w.parse_params(["M=128", "N=64"])        # K takes its default
>>> params
{'M': 128, 'N': 64, 'K': 512, 'dtype': 'float32'}
>>> tensors = w.make(**params)
>>> w.flops(**params) == 2 * 128 * 64 * 512
True

Every entry has a one-line description, ordered typed parameters with
defaults (small but realistic sizes), ``make`` (the tensor expressions from
:mod:`tensorir.ops`), an analytic ``flops`` (equal to
:func:`tensorir.evaluate.count_flops` of the built workload), a numpy
``reference`` and reproducible random ``inputs``.
"""
from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tensorir.ops import library as ops
from tensorir.ops import winograd as wino


class WorkloadError(ValueError):
    """A workload name or parameter is invalid; the message is one line naming the culprit."""


class UnknownWorkloadError(WorkloadError, KeyError):
    """No workload of that name is registered (also a ``KeyError``)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Param:
    """A workload parameter: ``kind`` is int, float or str; ``default`` None means required."""
    name: str
    kind: type = int
    default: object = None
    help: str = ""
    allow_zero: bool = False     # numbers: positive unless this is set (then non-negative)
    choices: tuple = ()          # strings: the allowed values

    def convert(self, text: str, workload: str):
        """Parse the text of a ``NAME=VALUE`` item into this parameter's kind."""
        if self.kind is str:
            return text
        try:
            return int(text) if self.kind is int else float(text)
        except ValueError:
            raise WorkloadError(f"workload {workload!r}: parameter {self.name}={text!r} is not "
                                f"{'an integer' if self.kind is int else 'a number'}") from None

    def validate(self, value, workload: str):
        """Check a value's type and range; return it normalized (numpy ints become ints)."""
        where = f"workload {workload!r}: parameter {self.name!r}"
        if self.kind is str:
            if not isinstance(value, str):
                raise WorkloadError(f"{where} must be a string, got {value!r}")
            if self.choices and value not in self.choices:
                raise WorkloadError(f"{where} must be one of {', '.join(self.choices)}, got {value!r}")
            return value
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise WorkloadError(f"{where} must be an integer, got {value!r}")
            value = int(value)
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise WorkloadError(f"{where} must be a number, got {value!r}")
            value = float(value)
            if not math.isfinite(value):
                raise WorkloadError(f"{where} must be finite, got {value!r}")
        if value < 0 or (value == 0 and not self.allow_zero):
            raise WorkloadError(f"{where} must be {'non-negative' if self.allow_zero else 'positive'}, got {value}")
        return value


@dataclass(frozen=True)
class Workload:
    """A named, parameterized operator.

    ``builder``, ``flops_fn`` and ``reference_fn`` take the bound parameters
    as keywords (``reference_fn`` takes the input arrays first).
    """
    name: str
    description: str
    params: tuple
    builder: Callable = field(repr=False)
    flops_fn: Callable = field(repr=False)
    reference_fn: Callable = field(repr=False)

    @property
    def param_names(self) -> list:
        return [p.name for p in self.params]

    @property
    def defaults(self) -> dict:
        return {p.name: p.default for p in self.params if p.default is not None}

    def bind(self, **params) -> dict:
        """Validate parameters and fill in defaults.

        Returns
        -------
        dict
            Every parameter, in declaration order.

        Raises
        ------
        WorkloadError
            Unknown name (the valid ones are listed), wrong type, non-positive
            size, missing required parameter, or sizes that make the operator
            impossible (e.g. a convolution window larger than the padded input).
        """
        valid = {p.name: p for p in self.params}
        for name in params:
            if name not in valid:
                raise WorkloadError(f"workload {self.name!r}: unknown parameter {name!r}; valid parameters: "
                                    f"{', '.join(valid)}")
        bound = {}
        for p in self.params:
            if p.name in params:
                bound[p.name] = p.validate(params[p.name], self.name)
            elif p.default is not None:
                bound[p.name] = p.default
            else:
                raise WorkloadError(f"workload {self.name!r}: missing required parameter {p.name!r}")
        try:  # building is cheap and runs exactly the shape checks make() will
            self.builder(**bound)
        except ValueError as err:
            raise WorkloadError(f"workload {self.name!r}: {err}") from None
        return bound

    def parse_params(self, items: Sequence[str]) -> dict:
        """Parse ``["M=128", "N=64"]`` (command-line style) and :meth:`bind` the result.

        Raises
        ------
        WorkloadError
            An item that is not ``NAME=VALUE``, a parameter given twice, a
            value of the wrong kind, and everything :meth:`bind` rejects.
        """
        if isinstance(items, str):
            items = items.split()
        valid = {p.name: p for p in self.params}
        raw = {}
        for item in items:
            name, sep, text = str(item).partition("=")
            name, text = name.strip(), text.strip()
            if not sep or not name or not text:
                raise WorkloadError(f"workload {self.name!r}: expected NAME=VALUE, got {item!r}")
            if name not in valid:
                raise WorkloadError(f"workload {self.name!r}: unknown parameter {name!r}; valid parameters: "
                                    f"{', '.join(valid)}")
            if name in raw:
                raise WorkloadError(f"workload {self.name!r}: parameter {name!r} given twice")
            raw[name] = valid[name].convert(text, self.name)
        return self.bind(**raw)

    def make(self, **params) -> list:
        """The workload's tensors (inputs first, then outputs) for these parameters."""
        return self.builder(**self.bind(**params))

    def flops(self, **params) -> int:
        """Arithmetic operations, counted as :func:`tensorir.evaluate.count_flops` does."""
        return int(self.flops_fn(**self.bind(**params)))

    def reference(self, inputs: Sequence, **params) -> list:
        """The outputs computed by a plain numpy implementation."""
        return list(self.reference_fn(list(inputs), **self.bind(**params)))

    def inputs(self, seed: int = 0, **params) -> list:
        """Random inputs, one per placeholder in order, uniform in [-1, 1], reproducible from ``seed``."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype)
                for t in self.make(**params) if t.is_placeholder]

    def label(self, **params) -> str:
        """A readable one-line instance name, e.g. ``matmul(M=512, N=512, K=512, dtype=float32)``."""
        bound = self.bind(**params)
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in bound.items())})"


_REGISTRY: dict = {}


def register(workload: Workload) -> Workload:
    """Add a workload to the registry (its name must be new)."""
    if workload.name in _REGISTRY:
        raise WorkloadError(f"a workload named {workload.name!r} is already registered")
    _REGISTRY[workload.name] = workload
    return workload


def get_workload(name: str) -> Workload:
    """The registered workload called ``name``.

    Raises
    ------
    UnknownWorkloadError
        (a ``WorkloadError`` and a ``KeyError``) naming the available workloads.
    """
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), _REGISTRY, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownWorkloadError(f"unknown workload {name!r}{hint}; available: {', '.join(_REGISTRY)}") from None


def list_workloads() -> list:
    """All registered workloads, in registration order."""
    return list(_REGISTRY.values())


# ------------------------------------------------------------ numpy references

def _windows(x, R, S, stride, pad, dilation=1, fill=0.0):
    """``(N, C, P, Q, R, S)`` view of the (padded) windows of an NCHW array."""
    if pad:
        x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=fill)
    span_r, span_s = dilation * (R - 1) + 1, dilation * (S - 1) + 1
    win = sliding_window_view(x, (span_r, span_s), axis=(2, 3))
    return win[:, :, ::stride, ::stride, ::dilation, ::dilation]


def _conv2d_ref(inputs, N, C, H, W, K, R, S, stride, pad, dilation, dtype):
    x, w = inputs
    win = _windows(x, R, S, stride, pad, dilation)                       # N C P Q R S
    P, Q = win.shape[2], win.shape[3]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(N, P * Q, C * R * S)   # im2col (copies)
    y = np.matmul(cols, w.reshape(K, C * R * S).T)                        # N, P*Q, K
    return [np.ascontiguousarray(y.reshape(N, P, Q, K).transpose(0, 3, 1, 2))]


def _depthwise_ref(inputs, N, C, H, W, R, S, stride, pad, dtype):
    x, w = inputs
    return [np.einsum("ncpqrs,crs->ncpq", _windows(x, R, S, stride, pad), w[:, 0])]


def _max_pool_ref(inputs, N, C, H, W, R, S, stride, pad, dtype):
    return [_windows(inputs[0], R, S, stride, pad, fill=-np.inf).max(axis=(4, 5))]


def _avg_pool_ref(inputs, N, C, H, W, R, S, stride, pad, dtype):
    return [_windows(inputs[0], R, S, stride, pad).mean(axis=(4, 5), dtype=dtype)]


def _softmax_ref(inputs, rows, cols, dtype):
    x = inputs[0]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return [e / e.sum(axis=1, keepdims=True)]


def _layer_norm_ref(inputs, rows, cols, eps, dtype):
    x, gamma, beta = inputs
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return [((x - mean) / np.sqrt(var + np.dtype(dtype).type(eps)) * gamma + beta).astype(dtype)]


def _chain_ref(inputs, n, dtype):
    x = inputs[0]
    return [np.tanh(1 / (1 + np.exp(-(x * 2 + 1)))) * x]


def _sizes(*names, **defaults):
    return tuple(Param(n, int, defaults[n]) for n in names)


_DTYPE = Param("dtype", str, "float32", "element type", choices=ops.FLOAT_DTYPES)

register(Workload(
    "matmul", "matrix product C = A @ B (A: M x K, B: K x N)",
    _sizes("M", "N", "K", M=512, N=512, K=512) + (_DTYPE,),
    ops.matmul,
    lambda M, N, K, dtype: 2 * M * N * K,
    lambda inputs, M, N, K, dtype: [inputs[0] @ inputs[1]]))

register(Workload(
    "batch_matmul", "batched matrix product C[b] = A[b] @ Bm[b]",
    _sizes("B", "M", "N", "K", B=16, M=128, N=128, K=128) + (_DTYPE,),
    ops.batch_matmul,
    lambda B, M, N, K, dtype: 2 * B * M * N * K,
    lambda inputs, B, M, N, K, dtype: [np.matmul(inputs[0], inputs[1])]))

register(Workload(
    "dense", "fully connected layer with bias and ReLU: max(X @ W.T + bias, 0)",
    _sizes("batch", "in_features", "out_features", batch=128, in_features=1024, out_features=1024) + (_DTYPE,),
    ops.dense,
    lambda batch, in_features, out_features, dtype: 2 * batch * out_features * (in_features + 1),
    lambda inputs, batch, in_features, out_features, dtype:
        [np.maximum(inputs[0] @ inputs[1].T + inputs[2], np.dtype(dtype).type(0))]))


def _conv2d_flops(N, C, H, W, K, R, S, stride, pad, dilation, dtype):
    P, Q = (ops.conv_output_size(H, R, stride, pad, dilation), ops.conv_output_size(W, S, stride, pad, dilation))
    return 2 * N * K * P * Q * C * R * S


def _pool_flops(N, C, H, W, R, S, stride, pad, dtype, per_output=0):
    P, Q = ops.conv_output_size(H, R, stride, pad), ops.conv_output_size(W, S, stride, pad)
    return N * C * P * Q * (R * S + per_output)


register(Workload(
    "conv2d", "2-d convolution, NCHW data, KCRS weights, zero padding, stride and dilation",
    _sizes("N", "C", "H", "W", "K", "R", "S", N=1, C=64, H=56, W=56, K=64, R=3, S=3)
    + (Param("stride", int, 1, "window step"), Param("pad", int, 1, "zero padding on each side", allow_zero=True),
       Param("dilation", int, 1, "spacing of the kernel taps"), _DTYPE),
    ops.conv2d, _conv2d_flops, _conv2d_ref))

def _conv2d_bias_relu_ref(inputs, N, C, H, W, K, R, S, stride, pad, residual, dtype):
    y = _conv2d_ref(inputs[:2], N, C, H, W, K, R, S, stride, pad, 1, dtype)[0] + inputs[2][None, :, None, None]
    if residual:
        y = y + inputs[3]
    return [np.maximum(y, np.dtype(dtype).type(0))]


register(Workload(
    "conv2d_bias_relu", "convolution + bias + ReLU (residual=1: + Z, a ResNet block's end), NCHW",
    _sizes("N", "C", "H", "W", "K", "R", "S", N=1, C=64, H=56, W=56, K=64, R=3, S=3)
    + (Param("stride", int, 1, "window step"), Param("pad", int, 1, "zero padding on each side", allow_zero=True),
       Param("residual", int, 0, "1: add a residual input Z before the ReLU", allow_zero=True), _DTYPE),
    ops.conv2d_bias_relu,
    lambda N, C, H, W, K, R, S, stride, pad, residual, dtype:
        _conv2d_flops(N, C, H, W, K, R, S, stride, pad, 1, dtype)
        + N * K * ops.conv_output_size(H, R, stride, pad) * ops.conv_output_size(W, S, stride, pad) * (2 + residual),
    _conv2d_bias_relu_ref))


def _conv2d_nchwc_ref(inputs, N, C, H, W, K, R, S, stride, pad, cb, kb, dtype):
    x, w = inputs
    K_, Co, R_, S_, cb_, kb_ = w.shape
    wt = w.transpose(0, 5, 1, 4, 2, 3).reshape(K, C, R, S)      # back to KCRS
    y = _conv2d_ref([ops.unpack_nchwc(x), wt], N, C, H, W, K, R, S, stride, pad, 1, dtype)[0]
    return [ops.pack_nchwc(y, kb)]


register(Workload(
    "conv2d_nchwc", "2-d convolution on blocked layouts: data (N, C/cb, H, W, cb), weights (K/kb, C/cb, R, S, cb, kb)",
    _sizes("N", "C", "H", "W", "K", "R", "S", N=1, C=64, H=56, W=56, K=64, R=3, S=3)
    + (Param("stride", int, 1, "window step"), Param("pad", int, 1, "zero padding on each side", allow_zero=True),
       Param("cb", int, 16, "input channels per block"), Param("kb", int, 16, "output channels per block"), _DTYPE),
    ops.conv2d_nchwc,
    lambda N, C, H, W, K, R, S, stride, pad, cb, kb, dtype: _conv2d_flops(N, C, H, W, K, R, S, stride, pad, 1, dtype),
    _conv2d_nchwc_ref))

def _winograd_flops(**params):
    from tensorir.te.evaluate import count_flops
    return count_flops(wino.conv2d_winograd_nchwc(**params))   # the transforms' additions and the products


register(Workload(
    "conv2d_winograd_nchwc", "3x3 convolution (stride 1, padding 1) by Winograd F(m x m, 3x3), m = tile, on "
    "blocked layouts: data (N, C/cb, H, W, cb), transformed weights ((tile + 2)^2, C, K)",
    _sizes("N", "C", "H", "W", "K", N=1, C=64, H=56, W=56, K=64)
    + (Param("cb", int, 16, "input channels per block"), Param("kb", int, 16, "output channels per block"), _DTYPE,
       Param("tile", int, 2, "outputs per tile side: 2 or 4")),
    wino.conv2d_winograd_nchwc, _winograd_flops,
    lambda inputs, N, C, H, W, K, cb, kb, dtype, tile: [wino.reference(inputs[0], inputs[1], kb)]))

register(Workload(
    "depthwise_conv2d", "depthwise 2-d convolution, NCHW data, weights (C, 1, R, S)",
    _sizes("N", "C", "H", "W", "R", "S", N=1, C=128, H=56, W=56, R=3, S=3)
    + (Param("stride", int, 1, "window step"), Param("pad", int, 1, "zero padding on each side", allow_zero=True),
       _DTYPE),
    ops.depthwise_conv2d,
    lambda N, C, H, W, R, S, stride, pad, dtype: 2 * _pool_flops(N, C, H, W, R, S, stride, pad, dtype),
    _depthwise_ref))

def _depthwise_nchwc_ref(inputs, N, C, H, W, R, S, stride, pad, cb, dtype):
    x, w = inputs
    wt = w.transpose(0, 3, 1, 2).reshape(C, 1, R, S)          # back to (C, 1, R, S)
    y = _depthwise_ref([ops.unpack_nchwc(x), wt], N, C, H, W, R, S, stride, pad, dtype)[0]
    return [ops.pack_nchwc(y, cb)]


register(Workload(
    "depthwise_conv2d_nchwc", "depthwise 2-d convolution on the blocked layout: data (N, C/cb, H, W, cb), "
    "weights (C/cb, R, S, cb)",
    _sizes("N", "C", "H", "W", "R", "S", N=1, C=128, H=56, W=56, R=3, S=3)
    + (Param("stride", int, 1, "window step"), Param("pad", int, 1, "zero padding on each side", allow_zero=True),
       Param("cb", int, 16, "channels per block"), _DTYPE),
    ops.depthwise_conv2d_nchwc,
    lambda N, C, H, W, R, S, stride, pad, cb, dtype: 2 * _pool_flops(N, C, H, W, R, S, stride, pad, dtype),
    _depthwise_nchwc_ref))

register(Workload(
    "max_pool2d", "2-d max pooling, NCHW; padding never wins",
    _sizes("N", "C", "H", "W", "R", "S", N=1, C=64, H=112, W=112, R=3, S=3)
    + (Param("stride", int, 2, "window step"), Param("pad", int, 1, "padding on each side", allow_zero=True),
       _DTYPE),
    ops.max_pool2d, _pool_flops, _max_pool_ref))

register(Workload(
    "avg_pool2d", "2-d average pooling, NCHW, zero padding counted in the average",
    _sizes("N", "C", "H", "W", "R", "S", N=1, C=128, H=28, W=28, R=2, S=2)
    + (Param("stride", int, 2, "window step"), Param("pad", int, 0, "padding on each side", allow_zero=True),
       _DTYPE),
    ops.avg_pool2d,
    lambda **p: _pool_flops(**p, per_output=1),
    _avg_pool_ref))

register(Workload(
    "softmax", "softmax over the last axis of a rows x cols matrix (max, exp, sum, normalize)",
    _sizes("rows", "cols", rows=512, cols=1024) + (_DTYPE,),
    ops.softmax,
    lambda rows, cols, dtype: 5 * rows * cols,
    _softmax_ref))

register(Workload(
    "layer_norm", "layer normalization over the last axis with gamma and beta",
    _sizes("rows", "cols", rows=512, cols=768)
    + (Param("eps", float, 1e-5, "added to the variance"), _DTYPE),
    ops.layer_norm,
    lambda rows, cols, eps, dtype: 10 * rows * cols + 3 * rows,
    _layer_norm_ref))

register(Workload(
    "elementwise_chain", "elementwise chain Y = tanh(sigmoid(X * 2 + 1)) * X in three stages",
    _sizes("n", n=1 << 20) + (_DTYPE,),
    ops.elementwise_chain,
    lambda n, dtype: 5 * n,
    _chain_ref))
