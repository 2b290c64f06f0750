"""Index simplification with variable ranges (a small cousin of TVM's arith::Analyzer).

Integer expressions are put in a canonical *linear form* ``sum(coeff * term) + const``
(:mod:`tensorir.tir.analysis.affine`) where a term is a variable or an irreducible
sub-expression.  Floor division and
modulo by a positive constant are resolved using variable ranges, so that after
``split`` the index ``(i0 * 16 + i1) // 16`` becomes ``i0`` when ``0 <= i1 < 16``.
Comparisons that the ranges decide fold to constants, which removes guards.
"""
from __future__ import annotations

import math
from dataclasses import fields

from tensorir.te.expr import Binary, BinOp, Cast, Const, Expr, Select, Unary, UnOp, Var, const
from tensorir.tir.analysis.affine import Affine, affine
from tensorir.tir.analysis.bounds import Ranges, int_range, linear_range
from tensorir.tir.ir import Allocate, For, IfThenElse, Prefetch, PrimFunc, Seq, Store


# (x * 16 + y) // 32 with 0 <= y < 16 is x // 2: a remainder that never carries is split off at a divisor
# of the modulus (False: only a remainder within one whole block resolves);
# why: docs/decisions/076-lane-pattern-loads.md
DIVISOR_SPLIT = True


def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
    """Simplify ``e`` using inclusive variable ``ranges`` (Var -> (lo, hi))."""
    return Simplifier(ranges or {}).visit(e)


class Simplifier:
    """Simplifies expressions under fixed variable ``ranges``; results are memoized (by structure),
    so one instance shares work across the expressions of one scope."""

    def __init__(self, ranges: Ranges):
        self.ranges = ranges
        self.memo: dict = {}

    def visit(self, e: Expr) -> Expr:
        got = self.memo.get(e)
        if got is None:
            got = self._visit(e)
            self.memo[e] = got
        return got

    def _visit(self, e: Expr) -> Expr:
        if isinstance(e, (Const, Var)):
            return e
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Unary):
            a = self.visit(e.a)
            if isinstance(a, Const):
                return _fold_unary(e.op, a)
            return e if a is e.a else Unary(e.op, a)
        if isinstance(e, Select):
            c = self.visit(e.cond)
            if isinstance(c, Const):
                return self.visit(e.t if c.value else e.f)
            t, f = self.visit(e.t), self.visit(e.f)
            if t == f:
                return t
            return Select(c, t, f)
        if isinstance(e, Cast):
            a = self.visit(e.a)
            if isinstance(a, Const):
                v = a.value
                return const(int(math.trunc(v)) if e.to == "int32" else v, e.to)
            return Cast(e.to, a)
        sub = getattr(e, "sub_exprs", None)
        if sub is not None:  # Load / TensorRead: simplify the indices
            idx = tuple(self.visit(i) for i in e.indices)
            if idx == e.indices:
                return e
            return type(e)(*(idx if f.name == "indices" else getattr(e, f.name) for f in fields(e) if f.init))
        return e

    def _linear(self, e: Expr) -> Affine:
        """Linear form of an int expression whose non-linear parts are simplified once."""
        if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL) and e.dtype == "int32":
            la = self._linear(e.a)
            lb = self._linear(e.b)
            if e.op is BinOp.ADD:
                return la.add(lb)
            if e.op is BinOp.SUB:
                return la.add(lb, -1)
            if not lb.terms:
                return la.scale(lb.const)
            if not la.terms:
                return lb.scale(la.const)
            return Affine({Binary(BinOp.MUL, la.to_expr(), lb.to_expr()): 1}, 0)
        if isinstance(e, Const):
            return Affine({}, int(e.value))
        e = self.visit(e)
        return affine(e) if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL) else (
            Affine({}, int(e.value)) if isinstance(e, Const) else Affine({e: 1}, 0))

    def _binary(self, e: Binary) -> Expr:
        op = e.op
        if op in (BinOp.ADD, BinOp.SUB, BinOp.MUL) and e.dtype == "int32":
            return self._linear(e).to_expr()
        a, b = self.visit(e.a), self.visit(e.b)
        if isinstance(a, Const) and isinstance(b, Const):
            return _fold_binary(op, a, b)
        if op in (BinOp.AND, BinOp.OR):
            return _logic(op, a, b)
        is_int = a.dtype == "int32"
        if is_int and op in (BinOp.FLOORDIV, BinOp.MOD) and isinstance(b, Const) and b.value > 0:
            return self._divmod(op, a, int(b.value))
        if is_int and op in (BinOp.MIN, BinOp.MAX):
            ra, rb = int_range(a, self.ranges), int_range(b, self.ranges)
            if ra is not None and rb is not None:
                if ra[1] <= rb[0]:
                    return a if op is BinOp.MIN else b
                if rb[1] <= ra[0]:
                    return b if op is BinOp.MIN else a
        if is_int and op in (BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE):
            return self._compare(op, a, b)
        if not is_int and a.dtype != "bool":
            # float identities that are exact
            if op is BinOp.MUL and (_is(b, 1) or _is(a, 1)):
                return a if _is(b, 1) else b
            if op is BinOp.ADD and (_is(b, 0) or _is(a, 0)):
                return a if _is(b, 0) else b
        if a is e.a and b is e.b:
            return e
        return Binary(op, a, b)

    def _divmod(self, op: BinOp, a: Expr, c: int) -> Expr:
        if c == 1:
            return a if op is BinOp.FLOORDIV else const(0)
        lin = affine(a)
        q = Affine()
        rest = Affine({}, lin.const % c)
        q.const = lin.const // c
        for t, k in lin.terms.items():
            if k % c == 0:
                q.terms[t] = k // c
            else:
                rest.terms[t] = k
        rr = linear_range(rest, self.ranges)
        if rr is not None and rr[0] // c == rr[1] // c:
            # the remainder part stays inside one block of size c
            if op is BinOp.FLOORDIV:
                q.const += rr[0] // c
                return q.to_expr()
            return rest.add(Affine({}, -(rr[0] // c) * c)).to_expr()
        split = self._split_at_divisor(rest, c) if DIVISOR_SPLIT else None
        if split is not None:
            # rest = g * big + small with 0 <= small < g and g | c: the small part never carries
            # (a relayout's (co * 16 + ci) // 32 with ci < 16 is co // 2, its % 32 (co % 2) * 16 + ci)
            g, big, small = split
            if op is BinOp.FLOORDIV:
                return q.add(affine(self._divmod(BinOp.FLOORDIV, big.to_expr(), c // g))).to_expr()
            return affine(self._divmod(BinOp.MOD, big.to_expr(), c // g)).scale(g).add(small).to_expr()
        if op is BinOp.MOD:
            return Binary(BinOp.MOD, rest.to_expr(), const(c))
        inner = Binary(BinOp.FLOORDIV, rest.to_expr(), const(c))
        return q.add(Affine({inner: 1})).to_expr() if q.terms or q.const else inner

    def _split_at_divisor(self, rest: Affine, c: int):
        """``(g, big, small)`` with ``rest == g * big + small``, ``g`` the largest proper divisor of
        ``c`` for which the terms of ``rest`` whose coefficients ``g`` does not divide (and the
        constant's remainder) range within ``[0, g)``; None when no divisor does."""
        divisors = {d for i in range(2, math.isqrt(c) + 1) if c % i == 0 for d in (i, c // i)}
        for g in sorted(divisors - {c}, reverse=True):
            big = Affine({t: k // g for t, k in rest.terms.items() if k % g == 0}, rest.const // g)
            small = Affine({t: k for t, k in rest.terms.items() if k % g}, rest.const % g)
            if not big.terms:
                continue
            r = linear_range(small, self.ranges)
            if r is not None and r[0] >= 0 and r[1] < g:
                return g, big, small
        return None

    def _compare(self, op: BinOp, a: Expr, b: Expr) -> Expr:
        diff = affine(a).add(affine(b), -1)
        r = linear_range(diff, self.ranges)
        if r is not None:
            lo, hi = r
            truth = {BinOp.LT: (hi < 0, lo >= 0), BinOp.LE: (hi <= 0, lo > 0),
                     BinOp.GT: (lo > 0, hi <= 0), BinOp.GE: (lo >= 0, hi < 0),
                     BinOp.EQ: (lo == hi == 0, lo > 0 or hi < 0),
                     BinOp.NE: (lo > 0 or hi < 0, lo == hi == 0)}[op]
            if truth[0]:
                return const(True)
            if truth[1]:
                return const(False)
        # canonical form: (terms) op (constant)
        c = diff.const
        diff.const = 0
        return Binary(op, diff.to_expr(), const(-c))


def _is(e: Expr, v) -> bool:
    return isinstance(e, Const) and e.value == v


def _logic(op: BinOp, a: Expr, b: Expr) -> Expr:
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            if op is BinOp.AND:
                return y if x.value else const(False)
            return const(True) if x.value else y
    if a == b:
        return a
    return Binary(op, a, b)


def _fold_binary(op: BinOp, a: Const, b: Const) -> Const:
    x, y = a.value, b.value
    if op is BinOp.ADD: return const(x + y, a.dtype)
    if op is BinOp.SUB: return const(x - y, a.dtype)
    if op is BinOp.MUL: return const(x * y, a.dtype)
    if op in (BinOp.MIN, BinOp.MAX) and (x != x or y != y):
        return const(math.nan, a.dtype)      # numpy's minimum/maximum: NaN wins
    if op is BinOp.MIN: return const(min(x, y), a.dtype)
    if op is BinOp.MAX: return const(max(x, y), a.dtype)
    if op is BinOp.DIV:
        return const(x / y if y else math.copysign(math.inf, x) if x else math.nan, a.dtype)
    if op is BinOp.FLOORDIV:
        return const(x // y, a.dtype) if y else Binary(op, a, b)
    if op is BinOp.MOD:
        return const(x % y, a.dtype) if y else Binary(op, a, b)
    if op is BinOp.AND: return const(bool(x and y))
    if op is BinOp.OR: return const(bool(x or y))
    cmp = {BinOp.LT: x < y, BinOp.LE: x <= y, BinOp.GT: x > y, BinOp.GE: x >= y,
           BinOp.EQ: x == y, BinOp.NE: x != y}
    return const(cmp[op])


def _fold_unary(op: UnOp, a: Const) -> Expr:
    x = a.value
    try:
        if op is UnOp.NOT: return const(not x)
        if op is UnOp.ABS: return const(abs(x), a.dtype)
        if op is UnOp.EXP: return const(math.exp(x), a.dtype)
        if op is UnOp.LOG: return const(math.log(x), a.dtype)
        if op is UnOp.SQRT: return const(math.sqrt(x), a.dtype)
        if op is UnOp.TANH: return const(math.tanh(x), a.dtype)
        if op is UnOp.SIGMOID: return const(1.0 / (1.0 + math.exp(-x)), a.dtype)
    except (ValueError, OverflowError):
        pass
    return Unary(op, a)


# ------------------------------------------------------------------ the pass

def simplify_func(func):
    """The ``simplify`` pass: the indices and values of every load, store and prefetch in ``func``
    simplified with the ranges of the enclosing loops.

    Guard conditions are left as they are: ``loop_nest`` simplifies them where it places
    them (a guard's place depends on its simplified form).  Returns ``func`` itself when
    nothing changes.
    """
    body = _StmtSimplifier().stmt(func.body, Simplifier({}))
    return func if body is func.body else PrimFunc(func.name, func.params, body)


class _StmtSimplifier:
    def __init__(self):
        self.simplifiers: dict = {}     # the ranges in scope -> their Simplifier (versioned copies share one)
        self.seen: dict = {}            # (id(Simplifier), id(expr)) -> (result, expr, Simplifier): alive

    def expr(self, e: Expr, simp: Simplifier) -> Expr:
        """``simp.visit(e)``, or ``e`` itself when that equals it; by identity first (the copies of a
        versioned nest share their expressions, and hashing a large one is not free)."""
        key = (id(simp), id(e))
        hit = self.seen.get(key)
        if hit is None:
            new = simp.visit(e)
            hit = self.seen[key] = (e if new is e or new == e else new, e, simp)
        return hit[0]

    def stmt(self, s, simp: Simplifier):
        if isinstance(s, Store):
            idx = tuple(self.expr(i, simp) for i in s.indices)
            value = self.expr(s.value, simp)
            if value is s.value and all(a is b for a, b in zip(idx, s.indices)):
                return s
            return Store(s.buffer, idx, value)
        if isinstance(s, Prefetch):
            idx = tuple(self.expr(i, simp) for i in s.indices)
            if all(a is b for a, b in zip(idx, s.indices)):
                return s
            return Prefetch(s.buffer, idx, s.offset, s.locality)
        if isinstance(s, For):
            body = s.body
            if s.extent >= 1:
                ranges = {**simp.ranges, s.var: (0, s.extent - 1)}
                key = frozenset(ranges.items())
                inner = self.simplifiers.get(key)
                if inner is None:
                    inner = self.simplifiers[key] = Simplifier(ranges)
                body = self.stmt(s.body, inner)
            return s if body is s.body else For(s.var, s.extent, s.kind, body)
        if isinstance(s, IfThenElse):
            then = self.stmt(s.then, simp)
            other = None if s.otherwise is None else self.stmt(s.otherwise, simp)
            if then is s.then and other is s.otherwise:
                return s
            return IfThenElse(s.cond, then, other, s.skip)
        if isinstance(s, Allocate):
            body = self.stmt(s.body, simp)
            return s if body is s.body else Allocate(s.buffer, body)
        if isinstance(s, Seq):
            stmts = tuple(self.stmt(c, simp) for c in s.stmts)
            return s if all(a is b for a, b in zip(stmts, s.stmts)) else Seq(stmts)
        return s
