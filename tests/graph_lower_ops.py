"""Test-only registrations of canonical op kinds not yet registered in ``graph.ops`` (the importer's
and the passes' op modules add them): each with numpy semantics as GRAPH.md normalizes them.

Importing this module registers only the kinds that are missing, so once the real definitions
land, tests use those.
"""
from __future__ import annotations

import math

import numpy as np

from graph.ir import TensorType
from graph.ops import all_ops
from graph.ops.registry import REQUIRED, OpDef, Pattern, register, same_type
from graph.ops.elementwise import broadcast_shape


def _add(kind, inputs, infer, evaluate, pattern, attrs=None):
    if kind not in all_ops():
        register(OpDef(kind, inputs, infer, evaluate, pattern, dict(attrs or {})))


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _gelu(node, arrays):
    x = arrays[0].astype(np.float64)
    if node.attr("approximate", "none") == "tanh":
        y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    return [y.astype(arrays[0].dtype)]


_add("Gelu", ("X",), lambda n, t: [same_type(t[0])], _gelu, Pattern.ELEMWISE, {"approximate": "none"})
_add("Clip", ("X",), lambda n, t: [same_type(t[0])],
     lambda n, a: [np.clip(a[0], n.attr("min", -np.inf), n.attr("max", np.inf)).astype(a[0].dtype)],
     Pattern.ELEMWISE, {"min": -math.inf, "max": math.inf})
_add("Cast", ("X",), lambda n, t: [same_type(t[0], dtype=n.attr("to"))],
     lambda n, a: [a[0].astype(n.attr("to"))], Pattern.INJECTIVE, {"to": REQUIRED})
_add("Where", ("C", "X", "Y"),
     lambda n, t: [TensorType(broadcast_shape(n, *(x.shape for x in t)), t[1].dtype)],
     lambda n, a: [np.where(a[0], a[1], a[2])], Pattern.BROADCAST)


def _bn(node, a):
    x, s, b, m, v = a
    shp = (1, -1) + (1,) * (x.ndim - 2)
    eps = node.attr("epsilon", 1e-5)
    y = (x - m.reshape(shp)) / np.sqrt(v.reshape(shp) + eps) * s.reshape(shp) + b.reshape(shp)
    return [y.astype(x.dtype)]


_add("BatchNormalization", ("X", "scale", "B", "mean", "var"), lambda n, t: [same_type(t[0])], _bn,
     Pattern.BROADCAST, {"epsilon": 1e-5})


# ------------------------------------------------------------------ pools

POOL = {"kernel_shape": REQUIRED, "strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "ceil_mode": 0}


def _pool_out(size, k, s, lo, hi, d, ceil):
    span = size + lo + hi - ((k - 1) * d + 1)
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= size + lo:
        out -= 1       # the last window must start inside the input or its left padding
    return out


def _pool_infer(node, t):
    n, c, h, w = t[0].shape
    r, s = node.attr("kernel_shape")
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, pb, pr = node.attr("pads", (0, 0, 0, 0))
    dh, dw = node.attr("dilations", (1, 1))
    ceil = node.attr("ceil_mode", 0)
    return [TensorType((n, c, _pool_out(h, r, sh, pt, pb, dh, ceil), _pool_out(w, s, sw, pl, pr, dw, ceil)),
                       t[0].dtype)]


def _windows(node, x, fill, out_hw):
    """(N, C, P, Q, R*S) windows of ``x`` padded with ``fill`` (every position a window reaches)."""
    r, s = node.attr("kernel_shape")
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, _, _ = node.attr("pads", (0, 0, 0, 0))
    dh, dw = node.attr("dilations", (1, 1))
    p, q = out_hw
    h, w = x.shape[2:]
    big = np.full(x.shape[:2] + (pt + (p - 1) * sh + (r - 1) * dh + 1 + h, pl + (q - 1) * sw + (s - 1) * dw + 1 + w),
                  fill, dtype=np.float64)
    big[:, :, pt:pt + h, pl:pl + w] = x
    out = np.empty(x.shape[:2] + (p, q, r * s))
    for i in range(r):
        for j in range(s):
            out[..., i * s + j] = big[:, :, i * dh:i * dh + (p - 1) * sh + 1:sh, j * dw:j * dw + (q - 1) * sw + 1:sw]
    return out


def _max_pool(node, a):
    x = a[0]
    p, q = _pool_infer(node, [TensorType(x.shape, x.dtype.name)])[0].shape[2:]
    return [_windows(node, x, -np.inf, (p, q)).max(-1).astype(x.dtype)]


def _avg_pool(node, a):
    x = a[0]
    p, q = _pool_infer(node, [TensorType(x.shape, x.dtype.name)])[0].shape[2:]
    total = _windows(node, x, 0.0, (p, q)).sum(-1)
    pt, pl, pb, pr = node.attr("pads", (0, 0, 0, 0))
    ones = np.ones((1, 1) + x.shape[2:])
    if node.attr("count_include_pad", 0):
        ones = np.pad(ones, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=1.0)
        shifted = node.with_(attrs={**node.attr_dict, "pads": (0, 0, 0, 0)})
        count = _windows(shifted, ones, 0.0, (p, q)).sum(-1)
    else:
        count = _windows(node, ones, 0.0, (p, q)).sum(-1)
    return [(total / count).astype(x.dtype)]


_add("MaxPool", ("X",), _pool_infer, _max_pool, Pattern.REDUCE, POOL)
_add("AveragePool", ("X",), _pool_infer, _avg_pool, Pattern.REDUCE,
     {k: v for k, v in {**POOL, "count_include_pad": 0}.items() if k != "dilations"})
_add("GlobalAveragePool", ("X",), lambda n, t: [same_type(t[0], shape=t[0].shape[:2] + (1,) * (t[0].rank - 2))],
     lambda n, a: [a[0].mean(axis=tuple(range(2, a[0].ndim)), keepdims=True).astype(a[0].dtype)], Pattern.REDUCE)


# ------------------------------------------------------------------ normalizations and reductions

def _softmax(node, a):
    x = a[0].astype(np.float64)
    ax = node.attr("axis")
    e = np.exp(x - x.max(axis=ax, keepdims=True))
    return [(e / e.sum(axis=ax, keepdims=True)).astype(a[0].dtype)]


_add("Softmax", ("X",), lambda n, t: [same_type(t[0])], _softmax, Pattern.REDUCE, {"axis": REQUIRED})


def _layer_norm(node, a):
    x, s, b = (list(a) + [None])[:3]
    axes = tuple(range(node.attr("axis"), x.ndim))
    xx = x.astype(np.float64)
    m = xx.mean(axis=axes, keepdims=True)
    v = ((xx - m) ** 2).mean(axis=axes, keepdims=True)
    y = (xx - m) / np.sqrt(v + node.attr("epsilon", 1e-5)) * s
    return [(y + b if b is not None else y).astype(x.dtype)]


_add("LayerNormalization", ("X", "Scale", "B?"), lambda n, t: [same_type(t[0])], _layer_norm, Pattern.REDUCE,
     {"axis": REQUIRED, "epsilon": 1e-5})


def _reduce(fn):
    def infer(node, t):
        axes, keep = node.attr("axes"), node.attr("keepdims", 1)
        shape = tuple((1 if keep else None) if d in axes else s for d, s in enumerate(t[0].shape))
        return [same_type(t[0], shape=tuple(s for s in shape if s is not None))]

    def evaluate(node, a):
        return [np.asarray(fn(a[0], axis=tuple(node.attr("axes")), keepdims=bool(node.attr("keepdims", 1))),
                           dtype=a[0].dtype)]
    return infer, evaluate


for _kind, _fn in (("ReduceMean", np.mean), ("ReduceSum", np.sum), ("ReduceMax", np.max)):
    _add(_kind, ("X",), *_reduce(_fn), Pattern.REDUCE, {"axes": REQUIRED, "keepdims": 1})


# ------------------------------------------------------------------ shape ops

_add("Transpose", ("X",), lambda n, t: [same_type(t[0], shape=tuple(t[0].shape[p] for p in n.attr("perm")))],
     lambda n, a: [np.transpose(a[0], n.attr("perm"))], Pattern.INJECTIVE, {"perm": REQUIRED})
_add("Reshape", ("X",), lambda n, t: [same_type(t[0], shape=n.attr("shape"))],
     lambda n, a: [a[0].reshape(n.attr("shape"))], Pattern.INJECTIVE, {"shape": REQUIRED})
_add("Expand", ("X",), lambda n, t: [same_type(t[0], shape=broadcast_shape(n, t[0].shape, n.attr("shape")))],
     lambda n, a: [np.broadcast_to(a[0], broadcast_shape(n, a[0].shape, n.attr("shape"))).copy()],
     Pattern.INJECTIVE, {"shape": REQUIRED})


def _concat_infer(node, t):
    ax = node.attr("axis")
    shape = list(t[0].shape)
    shape[ax] = sum(x.shape[ax] for x in t)
    return [same_type(t[0], shape=tuple(shape))]


_add("Concat", ("inputs*",), _concat_infer, lambda n, a: [np.concatenate(a, axis=n.attr("axis"))],
     Pattern.INJECTIVE, {"axis": REQUIRED})


def _slices(node, rank):
    sl = [slice(None)] * rank
    steps = node.attr("steps", None) or (1,) * len(node.attr("starts"))
    for s, e, ax, st in zip(node.attr("starts"), node.attr("ends"), node.attr("axes"), steps):
        sl[ax] = slice(s, e if e >= 0 else None, st)
    return tuple(sl)


_add("Slice", ("X",),
     lambda n, t: [same_type(t[0], shape=np.empty(t[0].shape, np.int8)[_slices(n, t[0].rank)].shape)],
     lambda n, a: [a[0][_slices(n, a[0].ndim)].copy()], Pattern.INJECTIVE,
     {"starts": REQUIRED, "ends": REQUIRED, "axes": REQUIRED, "steps": None})


def _gather_infer(node, t):
    ax = node.attr("axis", 0)
    return [same_type(t[0], shape=t[0].shape[:ax] + t[1].shape + t[0].shape[ax + 1:])]


_add("Gather", ("data", "indices"), _gather_infer,
     lambda n, a: [np.take(a[0], a[1].astype(np.int64), axis=n.attr("axis", 0))], Pattern.INJECTIVE, {"axis": 0})
