"""The condition under which an iteration of a ``skip_padding`` loop runs (:mod:`schedules.skip`).

For each read of the padded tensor, its box conditions (``lo <= index < hi``, the padding stage's select
with the read's indices) are each projected onto the loop's own and outer variables: ``e < c`` holds for
some inner iteration iff ``min(e) < c`` over the inner loops' ranges.  The conjunction of the projections
is necessary for that read to see a value inside the box in some inner iteration (each conjunct on its
own is), so where it fails every inner iteration reads padding only, and the iteration is skipped; the
iteration runs where any read's projection holds.
"""
from __future__ import annotations

import functools

from schedules.errors import LoweringError
from schedules.lowering.bounds import split_fixed
from schedules.skip import conjuncts, padded_reads
from tensorir.te import free_vars
from tensorir.te.expr import Binary, BinOp, Const, Expr, const
from tensorir.tir.rewrite import substitute


def _some_inner(cond: Expr, inner: dict) -> Expr:
    """A condition on the other variables that holds where ``cond`` (simplified) holds for some values of the
    ``inner`` ones (Var -> (lo, hi)); ``cond`` itself without inner variables, True where not affine."""
    fv = free_vars(cond)
    if not fv & inner.keys():
        return cond
    if not isinstance(cond, Binary) or cond.op not in (BinOp.LT, BinOp.GE, BinOp.LE, BinOp.GT):
        return const(True)
    split = split_fixed(Binary(BinOp.SUB, cond.a, cond.b), inner)     # (cond.a - cond.b) (op) 0
    if split is None:
        return const(True)
    fixed, lo, hi = split
    # some inner value makes the difference small (<, <=) or large (>=, >) enough
    return Binary(cond.op, Binary(BinOp.ADD, fixed, const(lo if cond.op in (BinOp.LT, BinOp.LE) else hi)), const(0))


def _parts(reads, s, lay, loop: str, sub: dict, simplify) -> list:
    """Per read, the projections of its box conditions onto ``loop``'s variable and the outer ones."""
    pos = s.leaf.index(loop)
    inner = {lay.vars[n]: (0, lay.extents[n] - 1) for n in s.leaf[pos + 1:]}
    return [[_some_inner(part, inner) for c in box for part in conjuncts(simplify(substitute(c, sub)))]
            for box in reads]


def skip_condition(g, s, lay, spec, sub: dict, simplify) -> Expr | None:
    """The condition (on ``s.spec.loop``'s variable and the outer ones) under which an iteration of the loop
    runs; None where it always does.  ``sub``: ``s``'s root variables -> their values in loop variables."""
    reads = padded_reads(g, s, spec.tensor)
    if reads is None:
        raise LoweringError("skip_padding", f"stage {s.name} skips the padding of {spec.tensor} in loop "
                            f"{spec.loop}, but {spec.tensor} is no longer a zero padding that {s.name} reads as "
                            "a factor (inlined after skip_padding?)", stage=s.name, loop=spec.loop)
    parts = _parts(reads, s, lay, spec.loop, sub, simplify)
    if len(reads) == 1:
        # a condition an enclosing loop's skip already tested (a tap row's, in its column loop) is not tested again
        pos = s.leaf.index(spec.loop)
        for k in s.skips:
            if k.tensor == spec.tensor and k.loop in s.leaf[:pos]:
                done = _parts(reads, s, lay, k.loop, sub, simplify)[0]
                parts = [[p for p in parts[0] if p not in done]]
    runs = [functools.reduce(lambda a, b: Binary(BinOp.AND, a, b), p) if p else const(True) for p in parts]
    cond = simplify(functools.reduce(lambda a, b: Binary(BinOp.OR, a, b), runs))
    if isinstance(cond, Const) and cond.value:
        return None
    return cond
