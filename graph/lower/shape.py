"""Injective ops as tensor expressions: index arithmetic only (Transpose, Reshape, Concat, Slice,
Gather, Expand). Inside a fused group the space inlines them into their consumer."""
from __future__ import annotations

import numpy as np

from graph.lower.core import LoweringError, block_of
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


# a reshape's indices unravelled per group of dimensions of equal size on both sides; False: the whole flat
# offset after the leading dimensions the shapes share (why: reshape_index)
RESHAPE_BY_GROUPS = True


def _unravel(out_idx, out_shape, in_shape) -> list:
    """Input indices of a row-major reshape of ``out_shape`` into ``in_shape`` (equal sizes): the flat offset
    of ``out_idx`` unravelled."""
    flat = None
    for i, s, d in zip(out_idx, _strides(out_shape), out_shape):
        if d == 1:
            continue
        term = i * s if s != 1 else i
        flat = term if flat is None else flat + term
    if flat is None:
        flat = te.const(0)
    idx = []
    size = int(np.prod(in_shape))
    for s, d in zip(_strides(in_shape), in_shape):
        if d == 1:
            idx.append(0)
            continue
        e = flat // s if s != 1 else flat
        if s * d < size:          # not the outermost non-trivial dimension
            e = e % d
        idx.append(e)
    return idx


def reshape_index(out_idx, out_shape, in_shape) -> list:
    """Input indices of a row-major reshape: the flat offset of ``out_idx`` unravelled in ``in_shape``.

    The dimensions are matched in groups whose sizes multiply to the same product on both sides, and each
    group's input indices are unravelled from its own output indices: a dimension the reshape keeps maps to
    itself (BERT's batch and positions around its heads split), and a split or merged one divides by
    constants of its group alone. A channel shuffle's (116, 28, 28) -> (2, 58, 28, 28) reads
    ``(c // 58, c % 58, h, w)``: its rows stay contiguous. Unravelling the whole flat offset instead left
    ``(h * 28 + w) // 784`` per lane, which lowering cannot prove 0: a gather per element, 3.6 GB/s."""
    out_shape, in_shape, out_idx = list(out_shape), list(in_shape), list(out_idx)
    if not RESHAPE_BY_GROUPS or 0 in out_shape or 0 in in_shape:
        common = 0        # (the leading dimensions the shapes share, one to one; then one flat offset)
        while common < min(len(out_shape), len(in_shape)) - 1 and out_shape[common] == in_shape[common]:
            common += 1
        return out_idx[:common] + _unravel(out_idx[common:], out_shape[common:], in_shape[common:])
    idx, o, i = [], 0, 0
    while i < len(in_shape):
        if o == len(out_shape):          # (trailing input dimensions of 1)
            idx.append(0)
            i += 1
            continue
        oe, ie, po, pi = o + 1, i + 1, out_shape[o], in_shape[i]
        while po != pi:
            if po < pi:
                po, oe = po * out_shape[oe], oe + 1
            else:
                pi, ie = pi * in_shape[ie], ie + 1
        idx += _unravel(out_idx[o:oe], out_shape[o:oe], in_shape[i:ie])
        o, i = oe, ie
    return idx


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


BLOCK_TESTS = True    # a blocked channel concat of whole blocks tests the block, not the channel (decision 101)


@lowering("Concat")
def _concat(ctx, node, ins, outs):
    axis = node.attr("axis")
    parts = [v for v in ins if v is not None and v.shape[axis] > 0]
    offsets = np.cumsum([0] + [v.shape[axis] for v in parts]).tolist()
    # a concat along the channels of a blocked output whose parts are whole blocks picks its part by the block:
    # the test is then the same for a vector's lanes (a scalar branch), not a lane mask over every part's loads
    # (docs/decisions/101-blocked-concats-test-the-block.md)
    block = block_of(ctx.layout_for(outs[0].shape)) if BLOCK_TESTS and axis == 1 else 0
    g = block if block and all(o % block == 0 for o in offsets) else 1

    def f(*i):
        i = list(i)
        e = None
        for n in reversed(range(len(parts))):
            idx = i[:axis] + [i[axis] - offsets[n] if offsets[n] else i[axis]] + i[axis + 1:]
            val = parts[n](*idx)
            test = i[axis] // g < offsets[n + 1] // g if g > 1 else i[axis] < offsets[n + 1]
            e = val if e is None else te.if_then_else(test, val, e)
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
    pattern = affine_indices(known) if known is not None and known.ndim == 1 and GATHER_PATTERNS else None
    if pattern is not None:
        a, b, c = pattern

        def h(*i):
            i = list(i)
            return data(*(i[:axis] + [(i[axis] * a + b) // c if c > 1 else i[axis] * a + b] + i[axis + 1:]))
        return [ctx.emit(outs[0].shape, outs[0].dtype, h, "gather")]
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


# constant 1-d Gather indices that follow ``(a * i + b) // c`` (a nearest Resize by an integer factor: ``i // 2``;
# a strided pick: ``2 * i + 1``) are computed, not looked up: the loads of a vector then follow its lanes (a load
# and a shuffle) rather than gathering through a table; False: every constant index is a table
# (docs/decisions/096-gather-indices-as-arithmetic.md)
GATHER_PATTERNS = True
PATTERN_LIMIT = 8       # the largest a and c tried


def affine_indices(known: np.ndarray):
    """``(a, b, c)`` with ``known[i] == (a * i + b) // c`` for every ``i`` (0 <= b, 1 <= a, c <= ``PATTERN_LIMIT``),
    the smallest such ``c`` then ``a``, else None."""
    n = known.size
    if n < 2:
        return None
    i = np.arange(n, dtype=np.int64)
    k = known.astype(np.int64)
    for c in range(1, PATTERN_LIMIT + 1):
        for a in range(1, PATTERN_LIMIT + 1):
            for b in range(int(k[0]) * c, int(k[0]) * c + c):
                if b >= 0 and np.array_equal((a * i + b) // c, k):
                    return a, b, c
    return None

