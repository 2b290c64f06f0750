"""Guard placement and edge-tile versioning while a loop nest is emitted.

Partial tiles (non-dividing splits, regions crossing a tensor's edge) are
guarded with ``IfThenElse``, each guard placed at the outermost loop where all
its variables are bound.  A guard that only fails on edge tiles and would sit in
an unrolled or vectorized loop is *versioned* instead: where the outer variables
decide it for the whole inner nest, a guard-free copy runs the full tiles and the
guarded copy only the edge tiles.  The guarded copy is versioned again further in,
where more bound variables decide the guard for a smaller nest (up to
``VERSION_DEPTH`` copies deep): a task whose last row tile is an edge runs its other
row tiles guard-free, as TVM's loop partitioning does, instead of all of them
guarded (a 3x3 stride-2 conv in tasks of 15 rows over 28 ran its second task, half
the work, in guarded code: 0.46x of a tile that divides the rows;
docs/decisions/056-guarded-copies-are-versioned-again.md).

:class:`GuardScope` holds what the emitter knows at its current position in the
nest (the ranges of the variables in scope, the loops open, the checks an
enclosing version already made); :func:`for_all_inner` is the pure rule that
turns a guard into the condition on outer variables that decides it.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from tensorir.te import free_vars
from tensorir.te.expr import Binary, BinOp, Const, Expr
from tensorir.tir.analysis import Affine, affine, linear_range
from tensorir.tir.ir import ForKind, IfThenElse, seq
from tensorir.tir.transform.simplify import Simplifier

TIGHT = (ForKind.UNROLLED, ForKind.VECTORIZED)  # loops where a guard blocks vector/register code
VERSION_DEPTH = 2   # guarded copies versioned again inside one another, at most (each adds a copy of a nest)


class GuardScope:
    """The emitter's position in the loop nest, and the guards and versions placed from there.

    Parameters
    ----------
    var_kind : Mapping
        Loop Var -> ForKind of every leaf loop (from :class:`~schedules.lowering.bounds.Bounds`).
    """

    def __init__(self, var_kind):
        self.var_kind = var_kind
        self.ranges: dict = {}      # Var -> (lo, hi) of every loop variable in scope or known
        self.bound: set = set()     # loop variables of the loops currently open
        self.no_version = 0         # guarded (edge-tile) copies of a nest being emitted, one inside another
        self.known: list = []       # version checks known true here (the fast copy of an enclosing version)
        self.refuted: list = []     # version checks (sets) known false together here (guarded copies)
        self.pins: list = []        # (terms, value): an affine sum of bound atoms known equal to value here
        self._simplifier = None     # shares simplified subexpressions while ``ranges`` is unchanged

    # ------------------------------------------------------------- scope
    @contextmanager
    def stage(self, ranges: dict):
        """While a stage is emitted: the ranges of its loop variables are known."""
        saved = dict(self.ranges)
        self.ranges.update(ranges)
        self._simplifier = None
        try:
            yield
        finally:
            self.ranges = saved

    @contextmanager
    def loop(self, var):
        """While the loop of ``var`` is open."""
        self.bound.add(var)
        try:
            yield
        finally:
            self.bound.discard(var)

    def split(self, conds) -> tuple:
        """``(ready, rest)``: the guards whose variables are all bound here, and the others."""
        ready = [c for c in conds if free_vars(c[0]) <= self.bound]
        rest = [c for c in conds if not free_vars(c[0]) <= self.bound]
        return ready, rest

    def simplify(self, e: Expr) -> Expr:
        """``simplify(e, self.ranges)``, memoized across calls while the ranges stay the same, with the
        sums pinned by enclosing guarded copies replaced by their values (see :func:`pinned_sum`)."""
        if self._simplifier is None or self._simplifier.ranges is not self.ranges:
            self._simplifier = Simplifier(self.ranges)
        e = self._simplifier.visit(e)
        if self.pins:
            pinned = _apply_pins(e, self.pins)
            if pinned is not e:
                e = self._simplifier.visit(pinned)
        return e

    # ------------------------------------------------------------ guards
    def guard(self, conds, body):
        """``body`` under the guards ``conds`` (``(Expr, is_spatial)``) that are not known to hold."""
        cond, seen = None, []
        for c, _ in conds:
            c = self.simplify(c)
            if c in self.known or c in seen:
                continue
            seen.append(c)
            if isinstance(c, Const):
                if c.value:
                    continue
                return seq()  # provably empty
            cond = c if cond is None else Binary(BinOp.AND, cond, c)
        if cond is None:
            return body
        return IfThenElse(cond, body)

    def versioned(self, pending: list, build):
        """``build(pending)``, split into a guard-free full-tile copy when the bound loops decide it."""
        if not pending or self.no_version >= VERSION_DEPTH:
            return build(pending)
        checks, dropped = [], []
        for c in pending:
            if not any(self.var_kind.get(v) in TIGHT for v in free_vars(c[0]) - self.bound):
                continue  # a guard on serial loops is cheap; duplicating the nest is not
            whole = for_all_inner(self.simplify(c[0]), self.bound, self.ranges)
            if whole is None:
                continue
            whole = self.simplify(whole)
            # an enclosing version checks it, or another guard's check here is the same: once, so a
            # single failed check still pins its sum (docs/decisions/059-one-check-per-guard-condition.md)
            if whole in self.known or whole in checks:
                dropped.append(c)
                continue
            if isinstance(whole, Const):
                if whole.value:
                    dropped.append(c)
                continue
            checks.append(whole)
            dropped.append(c)
        if not checks:
            if dropped:
                return build([c for c in pending if c not in dropped])
            return build(pending)
        if frozenset(checks) in self.refuted:   # the guarded copy of this same version: nothing to decide
            return build(pending)
        self.known.extend(checks)
        try:
            fast = build([c for c in pending if c not in dropped])
        finally:
            del self.known[len(self.known) - len(checks):]
        pin = pinned_sum(checks[0], self.ranges) if len(checks) == 1 else None
        self.no_version += 1
        self.refuted.append(frozenset(checks))
        self.pins.extend([pin] if pin else [])
        try:
            slow = build(pending)
        finally:
            self.no_version -= 1
            self.refuted.pop()
            del self.pins[len(self.pins) - (1 if pin else 0):]
        cond = checks[0]
        for c in checks[1:]:
            cond = Binary(BinOp.AND, cond, c)
        return IfThenElse(cond, fast, slow)


def for_all_inner(cond: Expr, bound: set, ranges: dict):
    """A condition on the ``bound`` variables implying ``cond`` for every value of the others.

    ``cond`` is a simplified ``terms < c`` or ``terms >= c``; the unbound part is replaced
    by its maximum (resp. minimum).  None when no such condition exists.
    """
    if not isinstance(cond, Binary) or cond.op not in (BinOp.LT, BinOp.GE):
        return None
    fv = free_vars(cond)
    if fv <= bound or not fv & bound:
        return None
    lin = affine(cond.a)
    outer, inner = Affine(), Affine()
    for t, k in lin.terms.items():
        tv = free_vars(t)
        if tv <= bound:
            outer.terms[t] = k
        elif not tv & bound:
            inner.terms[t] = k
        else:
            return None
    r = linear_range(inner, ranges)
    if r is None:
        return None
    outer.const = lin.const + (r[1] if cond.op is BinOp.LT else r[0])
    return Binary(cond.op, outer.to_expr(), cond.b)


def pinned_sum(check: Expr, ranges: dict):
    """``(terms, value)`` when a version's ``check`` being false leaves its sum of atoms one value.

    ``check`` is ``sum < c`` (or ``>=``).  Where it fails, the sum is at least ``c`` (a multiple of the
    coefficients' gcd); when that is also the sum's largest value, the guarded copy runs the last tile
    alone and the sum is that value there: a guard ``sum + p1 < N`` in it becomes ``p1 < k``, an edge
    tile of ``k`` rows without a test (the emitter then shortens the loop).  None otherwise.
    """
    if not isinstance(check, Binary) or check.op not in (BinOp.LT, BinOp.GE) or not isinstance(check.b, Const):
        return None
    lin = affine(check.a)
    if not lin.terms:
        return None
    sums = Affine(dict(lin.terms))
    r = linear_range(sums, ranges)
    if r is None:
        return None
    g = 0
    for k in lin.terms.values():
        g = math.gcd(g, abs(k))
    bound = check.b.value - lin.const
    if check.op is BinOp.LT:          # refuted: sum >= bound
        least = -(-bound // g) * g
        return (dict(lin.terms), least) if least == r[1] else None
    most = (bound - 1) // g * g         # refuted: sum <= bound - 1
    return (dict(lin.terms), most) if most == r[0] else None


def _apply_pins(e: Expr, pins: list) -> Expr:
    """``e`` (a comparison, or a conjunction of them) with each pinned sum it contains replaced by its value."""
    if not isinstance(e, Binary):
        return e
    if e.op is BinOp.AND:
        a, b = _apply_pins(e.a, pins), _apply_pins(e.b, pins)
        return e if a is e.a and b is e.b else Binary(BinOp.AND, a, b)
    if e.op not in (BinOp.LT, BinOp.GE, BinOp.LE, BinOp.GT):
        return e
    lin = affine(e.a)
    changed = False
    for terms, value in pins:
        first, k0 = next(iter(terms.items()))
        scale, rest = divmod(lin.terms.get(first, 0), k0)
        if scale and not rest and all(lin.terms.get(t) == k * scale for t, k in terms.items()):
            lin = Affine({t: k for t, k in lin.terms.items() if t not in terms}, lin.const + value * scale)
            changed = True
    return Binary(e.op, lin.to_expr(), e.b) if changed else e
