"""Pooling (Pattern.REDUCE): MaxPool, AveragePool (2-d windows on NCHW) and GlobalAveragePool.

Attributes are normalized by the importer: ``kernel_shape``, ``strides``, ``dilations`` have
2 ints, ``pads`` 4 (top, left, bottom, right) with ``auto_pad`` resolved. With ``ceil_mode``
the output size is rounded up, but a window never starts in the bottom/right padding
(onnxruntime's and PyTorch's rule); the part of a window past the padded input is ignored.
"""
from __future__ import annotations

import numpy as np

from graph.ir import TensorType
from graph.ops.registry import REQUIRED, OpDef, OpError, Pattern, register, same_type

WINDOW_ATTRS = {"kernel_shape": REQUIRED, "strides": (1, 1), "pads": (0, 0, 0, 0), "ceil_mode": 0}


def pool_out(size: int, k: int, stride: int, lo: int, hi: int, dilation: int = 1, ceil_mode: int = 0) -> int:
    """Output length of a pooling window along one axis."""
    span = dilation * (k - 1) + 1
    room = size + lo + hi - span
    if not ceil_mode:
        return room // stride + 1
    out = -(-room // stride) + 1
    if (out - 1) * stride >= size + lo:
        out -= 1
    return out


def _params(node):
    get = node.attr
    return (get("kernel_shape"), get("strides", (1, 1)), get("pads", (0, 0, 0, 0)),
            get("dilations", (1, 1)), get("ceil_mode", 0))


def _pool_infer(node, types):
    x = types[0]
    (r, s), (sh, sw), (pt, pl, pb, pr), (dh, dw), ceil_mode = _params(node)
    if x.rank != 4:
        raise OpError(f"node {node.name} ({node.op}): only 2-d pooling on NCHW data, got {x.shape}")
    if min(r, s, sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr) < 0 or ceil_mode not in (0, 1):
        raise OpError(f"node {node.name} ({node.op}): bad window attributes {dict(node.attrs)}")
    if max(pt, pb) >= dh * (r - 1) + 1 or max(pl, pr) >= dw * (s - 1) + 1:
        raise OpError(f"node {node.name} ({node.op}): pads {(pt, pl, pb, pr)} are not smaller than the "
                      f"window {r}x{s}")
    n, c, h, w = x.shape
    p = pool_out(h, r, sh, pt, pb, dh, ceil_mode)
    q = pool_out(w, s, sw, pl, pr, dw, ceil_mode)
    if p <= 0 or q <= 0:
        raise OpError(f"node {node.name} ({node.op}): the window {r}x{s} does not fit the padded input "
                      f"{h}x{w}")
    return [same_type(x, shape=(n, c, p, q))]


def _windows(xp, out_hw, kernel, strides, dilations, combine):
    """Combine the kernel's r*s strided views of the padded ``xp`` elementwise."""
    (p, q), (r, s), (sh, sw), (dh, dw) = out_hw, kernel, strides, dilations
    acc = None
    for i in range(r):
        for j in range(s):
            view = xp[..., i * dh:i * dh + sh * (p - 1) + 1:sh, j * dw:j * dw + sw * (q - 1) + 1:sw]
            acc = view.copy() if acc is None else combine(acc, view)
    return acc


def _padded(x, node, out_hw, fill, pad_fill):
    """x padded by the node's pads with ``pad_fill``, then past them (ceil_mode) with ``fill``."""
    (r, s), (sh, sw), (pt, pl, pb, pr), (dh, dw), _ = _params(node)
    h, w = x.shape[-2:]
    extra_h = max(0, (out_hw[0] - 1) * sh + dh * (r - 1) + 1 - (h + pt + pb))
    extra_w = max(0, (out_hw[1] - 1) * sw + dw * (s - 1) + 1 - (w + pl + pr))
    lead = ((0, 0),) * (x.ndim - 2)
    xp = np.pad(x, lead + ((pt, pb), (pl, pr)), constant_values=pad_fill)
    return np.pad(xp, lead + ((0, extra_h), (0, extra_w)), constant_values=fill)


def _maxpool_eval(node, arrays):
    x = arrays[0]
    out_hw = _pool_infer(node, [TensorType(x.shape, x.dtype.name)])[0].shape[2:]
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    xp = _padded(x, node, out_hw, low, low)
    kernel, strides, _, dilations, _ = _params(node)
    return [_windows(xp, out_hw, kernel, strides, dilations, np.maximum).astype(x.dtype)]


def _avgpool_eval(node, arrays):
    x = arrays[0]
    out_hw = _pool_infer(node, [TensorType(x.shape, x.dtype.name)])[0].shape[2:]
    kernel, strides, _, dilations, _ = _params(node)
    xp = _padded(x.astype(np.float64), node, out_hw, 0.0, 0.0)
    ones = _padded(np.ones(x.shape[-2:]), node, out_hw, 0.0, float(node.attr("count_include_pad", 0)))
    total = _windows(xp, out_hw, kernel, strides, dilations, np.add)
    count = _windows(ones, out_hw, kernel, strides, dilations, np.add)
    return [(total / count).astype(x.dtype)]


register(OpDef("MaxPool", ("X",), _pool_infer, _maxpool_eval, Pattern.REDUCE,
               dict(WINDOW_ATTRS, dilations=(1, 1)), doc="maximum over each window; padding never wins"))
register(OpDef("AveragePool", ("X",), _pool_infer, _avgpool_eval, Pattern.REDUCE,
               dict(WINDOW_ATTRS, count_include_pad=0),
               doc="mean over each window; padding counts only with count_include_pad=1"))


def _global_infer(node, types):
    x = types[0]
    if x.rank < 3 or x.dtype[0] != "f":
        raise OpError(f"node {node.name} (GlobalAveragePool): needs float N x C x spatial data, got "
                      f"{x.dtype}{list(x.shape)}")
    return [same_type(x, shape=x.shape[:2] + (1,) * (x.rank - 2))]


register(OpDef("GlobalAveragePool", ("X",), _global_infer,
               lambda node, a: [a[0].astype(np.float64).mean(axis=tuple(range(2, a[0].ndim)), keepdims=True)
                                .astype(a[0].dtype)],
               Pattern.REDUCE, doc="mean over all spatial axes, kept as size 1"))
