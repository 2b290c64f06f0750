"""Injective ops as tensor expressions: index arithmetic only (Transpose, Reshape, Concat, Slice,
Gather, Expand). Inside a fused group the space inlines them into their consumer."""
from __future__ import annotations

import numpy as np

from graph.lower.core import LoweringError
from graph.lower.elementwise import lowering
from tensorir import te


@lowering("Transpose")
def _transpose(ctx, node, ins, outs):
    x = ins[0]
    perm = node.attr("perm") or tuple(reversed(range(x.rank)))

    def f(*i):
        idx = [None] * x.rank
        for d, p in enumerate(perm):
            idx[p] = i[d]
        return x(*idx)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "transpose")]


def _strides(shape) -> list:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def reshape_index(out_idx, out_shape, in_shape) -> list:
    """Input indices of a row-major reshape: the flat offset of ``out_idx`` unravelled in ``in_shape``.

    Leading dimensions the two shapes share map one to one, so a reshape of the trailing axes
    (BERT's heads split) keeps its batch indices plain."""
    out_idx = list(out_idx)
    common = 0
    while (common < min(len(out_shape), len(in_shape)) - 1 and out_shape[common] == in_shape[common]):
        common += 1
    head = out_idx[:common]
    o_shape, i_shape, o_idx = out_shape[common:], in_shape[common:], out_idx[common:]
    flat = None
    for i, s, d in zip(o_idx, _strides(o_shape), o_shape):
        if d == 1:
            continue
        term = i * s if s != 1 else i
        flat = term if flat is None else flat + term
    if flat is None:
        flat = te.const(0)
    idx = []
    size = int(np.prod(i_shape))
    for n, (s, d) in enumerate(zip(_strides(i_shape), i_shape)):
        if d == 1:
            idx.append(0)
            continue
        e = flat // s if s != 1 else flat
        if s * d < size:          # not the outermost non-trivial dimension
            e = e % d
        idx.append(e)
    return head + idx


@lowering("Reshape")
def _reshape(ctx, node, ins, outs):
    x = ins[0]
    shape = outs[0].shape
    return [ctx.emit(shape, outs[0].dtype, lambda *i: x(*reshape_index(i, shape, x.shape)), "reshape")]


@lowering("Expand")
def _expand(ctx, node, ins, outs):
    x = ins[0]
    shape = outs[0].shape
    return [ctx.emit(shape, outs[0].dtype, lambda *i: x.at(i, shape), "expand")]


@lowering("Concat")
def _concat(ctx, node, ins, outs):
    axis = node.attr("axis")
    parts = [v for v in ins if v is not None and v.shape[axis] > 0]
    offsets = np.cumsum([0] + [v.shape[axis] for v in parts]).tolist()

    def f(*i):
        i = list(i)
        e = None
        for n in reversed(range(len(parts))):
            idx = i[:axis] + [i[axis] - offsets[n] if offsets[n] else i[axis]] + i[axis + 1:]
            val = parts[n](*idx)
            e = val if e is None else te.if_then_else(i[axis] < offsets[n + 1], val, e)
        return e
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "concat")]


@lowering("Slice")
def _slice(ctx, node, ins, outs):
    x = ins[0]
    starts, axes, steps = node.attr("starts"), node.attr("axes"), node.attr("steps", None)
    steps = steps or (1,) * len(starts)
    plan = {a: (s, st) for a, s, st in zip(axes, starts, steps)}

    def f(*i):
        idx = []
        for d, e in enumerate(i):
            s, st = plan.get(d, (0, 1))
            e = e * st if st != 1 else e
            idx.append(e + s if s else e)
        return x(*idx)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "slice")]


def clamp_index(j, n: int):
    """A runtime index ``j`` into an axis of ``n``: negative counts from the end, and any index
    outside ``-n..n-1`` is clamped to the nearest end, so no read leaves the buffer (onnxruntime
    refuses such an index; the runtime checks the model's own index inputs before a run)."""
    j = te.if_then_else(j < 0, j + n, j)
    return te.min(te.max(j, 0), n - 1)


@lowering("Gather")
def _gather(ctx, node, ins, outs):
    data, indices = ins
    axis = node.attr("axis", 0)
    axis = axis + data.rank if axis < 0 else axis
    n_axis = data.shape[axis]
    known = ctx.constant_value(node.inputs[1])
    if known is not None:
        known = np.where(known < 0, known + n_axis, known)
        if known.size and (known.min() < 0 or known.max() >= n_axis):
            raise LoweringError(f"node {node.name} (Gather): an index is outside 0..{n_axis - 1}")
    if known is not None and known.ndim == 0:
        pos = int(known)

        def f(*i):
            i = list(i)
            return data(*(i[:axis] + [pos] + i[axis:]))
        return [ctx.emit(outs[0].shape, outs[0].dtype, f, "gather")]
    if known is not None:
        indices = ctx.constant(known.astype(np.int64), "indices")
    r = indices.rank

    def g(*i):
        i = list(i)
        j = indices(*i[axis:axis + r])
        if known is None:     # runtime indices may be negative, and are kept inside the table
            j = clamp_index(j, n_axis)
        return data(*(i[:axis] + [j] + i[axis + r:]))
    return [ctx.emit(outs[0].shape, outs[0].dtype, g, "gather")]
