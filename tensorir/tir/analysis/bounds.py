"""Integer bounds of index expressions from the ranges of their variables (interval arithmetic
over the affine form of :mod:`tensorir.tir.analysis.affine`)."""
from __future__ import annotations

from tensorir.te.expr import Binary, BinOp, Const, Expr, Select, Var
from tensorir.tir.analysis.affine import Affine, affine

# A range is an inclusive integer interval (lo, hi); ``None`` means unknown.
Ranges = dict  # Var -> (lo, hi)


def _mul_range(r, k):
    lo, hi = r[0] * k, r[1] * k
    return (min(lo, hi), max(lo, hi))


def int_range(e: Expr, ranges: Ranges):
    """Inclusive (lo, hi) bounds of integer expression ``e``, or None if unknown."""
    if isinstance(e, Const):
        v = int(e.value)
        return (v, v)
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Binary):
        if e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
            lin = affine(e)
            if len(lin.terms) != 1 or next(iter(lin.terms)) is not e:
                return linear_range(lin, ranges)
            ra, rb = int_range(e.a, ranges), int_range(e.b, ranges)
            if ra is None or rb is None:
                return None
            ps = [ra[0] * rb[0], ra[0] * rb[1], ra[1] * rb[0], ra[1] * rb[1]]
            return (min(ps), max(ps))
        ra = int_range(e.a, ranges)
        rb = int_range(e.b, ranges)
        if e.op is BinOp.FLOORDIV and rb is not None and rb[0] == rb[1] and rb[0] > 0:
            if ra is None:
                return None
            return (ra[0] // rb[0], ra[1] // rb[0])
        if e.op is BinOp.MOD and rb is not None and rb[0] == rb[1] and rb[0] > 0:
            if ra is not None and ra[0] // rb[0] == ra[1] // rb[0]:
                return (ra[0] % rb[0], ra[1] % rb[0])
            return (0, rb[0] - 1)
        if e.op in (BinOp.MIN, BinOp.MAX) and ra is not None and rb is not None:
            f = min if e.op is BinOp.MIN else max
            return (f(ra[0], rb[0]), f(ra[1], rb[1]))
        return None
    if isinstance(e, Select):
        rt, rf = int_range(e.t, ranges), int_range(e.f, ranges)
        if rt is None or rf is None:
            return None
        return (min(rt[0], rf[0]), max(rt[1], rf[1]))
    return None


def linear_range(lin: Affine, ranges: Ranges):
    """Inclusive (lo, hi) bounds of an affine form, or None if a term is unbounded."""
    lo = hi = lin.const
    for t, c in lin.terms.items():
        r = int_range(t, ranges)
        if r is None:
            return None
        r = _mul_range(r, c)
        lo += r[0]
        hi += r[1]
    return (lo, hi)
