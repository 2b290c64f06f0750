"""Reductions as tensor expressions: pools, Softmax, LayerNormalization, Reduce*.

Each is a short pipeline of stages in the style of ``tensorir.ops`` (softmax: row max, exp, row
sum, quotient), so the generated space hosts the row reductions inside the output's row loop.
"""
from __future__ import annotations

import numpy as np

from graph.lower.core import LoweringError, lit, storage_dtype
from graph.lower.elementwise import lowering
from graph.lower.linalg import pad
from tensorir import te


def _window(base, stride, off, dilation):
    b = base * stride if stride != 1 else base
    o = off * dilation if dilation != 1 else off
    return b + o


def _pool_geometry(node, x, out_shape):
    r_, s_ = node.attr("kernel_shape")
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, pb, pr = node.attr("pads", (0, 0, 0, 0))
    dh, dw = node.attr("dilations", (1, 1))
    _, _, h_, w_ = x.shape
    p_, q_ = out_shape[2:]
    # rows/columns the windows reach past the input (bottom/right padding, or ceil_mode's overhang)
    hi = (max(0, (p_ - 1) * sh + (r_ - 1) * dh + 1 - h_ - pt), max(0, (q_ - 1) * sw + (s_ - 1) * dw + 1 - w_ - pl))
    return (r_, s_), (sh, sw), (pt, pl, pb, pr), (dh, dw), hi


@lowering("MaxPool")
def _max_pool(ctx, node, ins, outs):
    x = ins[0]
    if x.rank != 4:
        raise LoweringError(f"node {node.name} (MaxPool): only 2-d pooling (NCHW), got rank {x.rank}")
    (r_, s_), (sh, sw), (pt, pl, _, _), (dh, dw), hi = _pool_geometry(node, x, outs[0].shape)
    sdt = storage_dtype(x.dtype)
    lowest = float(np.finfo(sdt).min) if sdt != "int32" else int(np.iinfo(np.int32).min)
    src = pad(ctx, x, (pt, pl), hi, lowest, keep_layout=True)
    rr, rs = te.reduce_axis(r_, "r"), te.reduce_axis(s_, "s")
    return [ctx.emit(outs[0].shape, outs[0].dtype,
                     lambda n, c, p, q: te.max(src(n, c, _window(p, sh, rr, dh), _window(q, sw, rs, dw)),
                                               axis=[rr, rs]), "maxpool")]


def pool_counts(h_, w_, out_hw, kernel, strides, pads, dilations, include_pad: bool) -> np.ndarray:
    """Elements each average-pool window divides by (ONNX): those inside the input, or with
    ``count_include_pad`` inside the padded input (never ceil_mode's overhang)."""
    p_, q_ = out_hw
    (r_, s_), (sh, sw), (pt, pl, pb, pr), (dh, dw) = kernel, strides, pads, dilations
    lo_h, hi_h = (-pt, h_ + pb) if include_pad else (0, h_)
    lo_w, hi_w = (-pl, w_ + pr) if include_pad else (0, w_)
    rows = np.array([[lo_h <= p * sh - pt + r * dh < hi_h for r in range(r_)] for p in range(p_)]).sum(1)
    cols = np.array([[lo_w <= q * sw - pl + s * dw < hi_w for s in range(s_)] for q in range(q_)]).sum(1)
    return np.outer(rows, cols)


@lowering("AveragePool")
def _avg_pool(ctx, node, ins, outs):
    x = ins[0]
    if x.rank != 4 or storage_dtype(x.dtype) == "int32":
        raise LoweringError(f"node {node.name} (AveragePool): only 2-d float pooling (NCHW)")
    kernel, strides, pads, dil, hi = _pool_geometry(node, x, outs[0].shape)
    (r_, s_), (sh, sw), (dh, dw) = kernel, strides, dil
    src = pad(ctx, x, pads[:2], hi, 0.0, keep_layout=True)
    rr, rs = te.reduce_axis(r_, "r"), te.reduce_axis(s_, "s")
    shape, dtype = outs[0].shape, outs[0].dtype
    total = ctx.emit(shape, dtype, lambda n, c, p, q: te.sum(src(n, c, _window(p, sh, rr, dh), _window(q, sw, rs, dw)),
                                                             axis=[rr, rs]), "window_sum")
    counts = pool_counts(x.shape[2], x.shape[3], shape[2:], kernel, strides, pads, dil,
                         bool(node.attr("count_include_pad", 0)))
    if (counts == counts.flat[0]).all():
        inv = 1.0 / float(counts.flat[0])
        return [ctx.emit(shape, dtype, lambda n, c, p, q: total(n, c, p, q) * inv, "avgpool")]
    inv_counts = ctx.constant((1.0 / counts).astype(dtype), "inv_count")
    return [ctx.emit(shape, dtype, lambda n, c, p, q: total(n, c, p, q) * inv_counts(p, q), "avgpool")]


@lowering("GlobalAveragePool")
def _global_avg_pool(ctx, node, ins, outs):
    x = ins[0]
    spatial = x.shape[2:]
    axes = [te.reduce_axis(d, f"r{n}") for n, d in enumerate(spatial)]
    inv = 1.0 / float(np.prod(spatial))
    shape, dtype = outs[0].shape, outs[0].dtype
    total = ctx.emit(shape, dtype, lambda n, c, *_: te.sum(x(n, c, *axes), axis=axes), "window_sum")
    return [ctx.emit(shape, dtype, lambda *i: total(*i) * inv, "avgpool")]


def _reduce_index(in_shape, axes, keepdims, out_idx, raxes):
    """The input index of an output index and the reduce axes (one per reduced dimension)."""
    out_idx = list(out_idx)
    idx, it, ri = [], iter(out_idx), iter(raxes)
    for d in range(len(in_shape)):
        if d in axes:
            idx.append(next(ri))
            if keepdims:
                next(it)
        else:
            idx.append(next(it))
    return idx


@lowering("ReduceSum", "ReduceMean", "ReduceMax")
def _reduce(ctx, node, ins, outs):
    x = ins[0]
    axes = tuple(node.attr("axes", ())) or tuple(range(x.rank))
    keep = bool(node.attr("keepdims", 1))
    raxes = [te.reduce_axis(x.shape[a], f"r{n}") for n, a in enumerate(axes)]
    shape, dtype = outs[0].shape, outs[0].dtype
    reducer = te.max if node.op == "ReduceMax" else te.sum
    total = ctx.emit(shape, dtype, lambda *i: reducer(x(*_reduce_index(x.shape, axes, keep, i, raxes)), axis=raxes),
                     node.op[len("Reduce"):].lower())
    if node.op != "ReduceMean":
        return [total]
    if storage_dtype(dtype) == "int32":
        raise LoweringError(f"node {node.name} (ReduceMean): integer means are not supported")
    inv = 1.0 / float(np.prod([x.shape[a] for a in axes]))
    return [ctx.emit(shape, dtype, lambda *i: total(*i) * inv, "mean")]


def row_indexing(shape: tuple, axis: int) -> tuple:
    """``(rows, at, row)`` for a reduction along ``axis`` kept as one value per row: the rows' shape,
    ``at(i, j)`` the full index of row ``i`` with ``j`` on the axis, ``row(i)`` the row of a full index."""
    rest = shape[:axis] + shape[axis + 1:]

    def at(i, j):
        i = list(i) if rest else []
        return i[:axis] + [j] + i[axis:]

    def row(i):
        i = list(i)
        return (i[:axis] + i[axis + 1:]) or [0]
    return rest or (1,), at, row


@lowering("Softmax")
def _softmax(ctx, node, ins, outs):
    x = ins[0]
    axis = node.attr("axis", x.rank - 1)
    axis = axis + x.rank if axis < 0 else axis
    shape, dtype = outs[0].shape, outs[0].dtype
    rows, at, row = row_indexing(shape, axis)
    k1, k2 = te.reduce_axis(shape[axis], "k"), te.reduce_axis(shape[axis], "k")
    mx = ctx.emit(rows, dtype, lambda *i: te.max(x(*at(i, k1)), axis=k1), "row_max")
    e = ctx.emit(shape, dtype, lambda *i: te.exp(x(*i) - mx(*row(i))), "exp")
    total = ctx.emit(rows, dtype, lambda *i: te.sum(e(*at(i, k2)), axis=k2), "row_sum")
    # one division per row, not per element (as onnxruntime's softmax scales a row)
    inv = ctx.emit(rows, dtype, lambda *i: lit(1, dtype) / total(*i), "inv_sum")
    return [ctx.emit(shape, dtype, lambda *i: e(*i) * inv(*row(i)), "softmax")]


@lowering("LayerNormalization")
def _layer_norm(ctx, node, ins, outs):
    x, scale, bias = (list(ins) + [None, None])[:3]
    if len([o for o in node.outputs if o]) > 1:
        raise LoweringError(f"node {node.name} (LayerNormalization): only the first output is supported")
    axis = node.attr("axis", -1)
    axis = axis + x.rank if axis < 0 else axis
    eps = float(node.attr("epsilon", 1e-5))
    shape, dtype = x.shape, outs[0].dtype
    lead, norm = shape[:axis], shape[axis:]
    rows = lead or (1,)
    inv_n = 1.0 / float(np.prod(norm))
    k1 = [te.reduce_axis(d, f"k{n}") for n, d in enumerate(norm)]
    k2 = [te.reduce_axis(d, f"k{n}") for n, d in enumerate(norm)]

    def lead_of(i):
        return list(i) if lead else []

    def row(i):
        return list(i[:axis]) or [0]
    mean = ctx.emit(rows, dtype, lambda *i: te.sum(x(*lead_of(i), *k1) * inv_n, axis=k1), "mean")

    def sq(*i):
        d = x(*lead_of(i), *k2) - mean(*(list(i) if lead else [0]))
        return te.sum(d * d * inv_n, axis=k2)
    var = ctx.emit(rows, dtype, sq, "var")
    rstd = ctx.emit(rows, dtype, lambda *i: lit(1, dtype) / te.sqrt(var(*i) + eps), "rstd")

    def y(*i):
        out = (x(*i) - mean(*row(i))) * rstd(*row(i)) * scale.at(i, shape)
        return out + bias.at(i, shape) if bias is not None else out
    return [ctx.emit(shape, dtype, y, "layernorm")]
