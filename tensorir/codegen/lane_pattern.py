"""Loads whose lanes follow a constant pattern: ``x[ki // 4 * 4 + ci]``, ``x[q // 2]``, ``x[k % 4]``.

In a vectorized loop an index that is not linear in the lane variable was a gather (one scalar load
per lane, LLVM scalarizes it on these CPUs). When the lane-dependent terms are functions of the lane
variable alone, each lane's offset is a known constant plus a lane-free part: the lanes read a window
of memory, loaded as whole vectors and rearranged with one shuffle. A grouped convolution in blocks of
whole groups reads its 4-channel groups this way (``(ki // 4) * 4 + ci``; the models' other kernels have no
such load). Why: docs/decisions/076-lane-pattern-loads.md
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tensorir.codegen.types import I32, I64
from tensorir.tir.analysis.affine import Affine, affine
from tensorir.tir.analysis.values import int_values


def known_value(e, bound: dict):
    """``e``'s value where every variable in it is bound (``bound``: codegen's name -> LLVM value) to a
    constant (an unrolled loop's), else None; None for ``e`` None is 0."""
    if e is None:
        return 0
    env = {name: v.constant for name, v in bound.items() if isinstance(v, ir.Constant) and isinstance(v.constant, int)}
    value = int_values(e, env)
    return None if value is None else int(value)


def lane_offsets(vec, e):
    """``(offsets, rest)``: ``e`` equals ``offsets[k] + rest`` in lane ``k`` of ``vec`` (a
    :class:`~tensorir.codegen.vector.VectorContext`), with ``rest`` free of the lane variable (None = 0);
    None when a lane-dependent term involves another variable or anything but arithmetic."""
    mod, var, lanes = vec.fg.mod, vec.var, vec.lanes

    def lane_only(n) -> bool:
        return mod.free_vars(n) == (var,)

    form = affine(e, atom=lambda n: not mod.uses_var(n, var) or lane_only(n))
    offsets, rest = [0] * lanes, {}
    for t, c in form.terms.items():
        if not mod.uses_var(t, var):
            rest[t] = c
            continue
        if not lane_only(t):
            return None
        values = int_values(t, {var: np.arange(lanes)})
        if values is None:
            return None
        offsets = [o + c * int(v) for o, v in zip(offsets, np.broadcast_to(values, (lanes,)))]
    if not rest and not form.const:
        return offsets, None
    return offsets, Affine(rest, form.const).to_expr()


def row_window(offsets: list, c, extent: int, lanes: int):
    """``(start, width, picks)`` for lanes that read element ``c + offsets[k]`` of a row of ``extent``
    elements (``c`` a known constant, else None): the ``width``-element window (a power of two, inside
    the row) from ``start`` holds every lane's element, lane ``k`` is its element ``picks[k]``; else None."""
    if c is None:
        return None
    lo, hi = c + min(offsets), c + max(offsets)
    if lo < 0 or hi >= extent:
        return None          # (an index outside its row: not this shape)
    width = 1
    while width < hi - lo + 1:
        width *= 2
    if width > extent or width > lanes:
        return None
    start = min(lo, extent - width)
    return start, width, [c + o - start for o in offsets]


def load_window(b: ir.IRBuilder, ptr, width: int, picks: list, elt, align: int):
    """One ``width``-element load from ``ptr``, its elements shuffled into the lanes ``picks`` names."""
    wty = ir.VectorType(elt, width)
    v = b.load(ptr, typ=wty, align=align)
    return b.shuffle_vector(v, ir.Constant(wty, None), ir.Constant(ir.VectorType(I32, len(picks)), picks))


def load_span(b: ir.IRBuilder, ptr, offsets: list, elt, align: int):
    """Lane ``k`` reads ``ptr[offsets[k]]``, every lane enabled: consecutive offsets one load; where the
    offsets span at most two
    vectors, two loads of ``p`` elements (the first at the lowest offset, the second ending at the
    highest: nothing outside the span is read) and one two-source shuffle; else one scalar load per
    distinct offset, inserted lane by lane."""
    lanes, lo, hi = len(offsets), min(offsets), max(offsets)
    span = hi - lo + 1
    if offsets == list(range(lo, lo + lanes)):       # (``A[i // 2, i % 2]`` of a (n, 2) array: contiguous)
        return b.load(b.gep(ptr, [ir.Constant(I64, lo)], inbounds=True, source_etype=elt),
                      typ=ir.VectorType(elt, lanes), align=align)
    if span <= 2 * lanes:
        p = 1
        while 2 * p < span:
            p *= 2
        pty = ir.VectorType(elt, p)
        first = b.load(b.gep(ptr, [ir.Constant(I64, lo)], inbounds=True, source_etype=elt), typ=pty, align=align)
        second_at = hi - p + 1
        second = b.load(b.gep(ptr, [ir.Constant(I64, second_at)], inbounds=True, source_etype=elt), typ=pty,
                        align=align)
        picks = [o - lo if o - lo < p else p + o - second_at for o in offsets]
        return b.shuffle_vector(first, second, ir.Constant(ir.VectorType(I32, lanes), picks))
    v, loaded = ir.Constant(ir.VectorType(elt, lanes), None), {}
    for k, o in enumerate(offsets):
        if o not in loaded:
            loaded[o] = b.load(b.gep(ptr, [ir.Constant(I64, o)], inbounds=True, source_etype=elt), typ=elt,
                               align=align)
        v = b.insert_element(v, loaded[o], ir.Constant(I32, k))
    return v
