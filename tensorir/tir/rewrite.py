"""Generic bottom-up rewriting and substitution of expressions (TE and loop IR)."""
from __future__ import annotations

from tensorir.te.expr import Binary as B, Cast, Expr, Select, Unary, Var
from tensorir.tir.ir import Allocate, For, IfThenElse, Load, Prefetch, Seq, Store
from tensorir.te import Reduce, TensorRead


def rewrite(e: Expr, fn):
    """Bottom-up rebuild of ``e``; ``fn(node)`` may return a replacement (or None)."""
    got = fn(e)
    if got is not None:
        return got
    if isinstance(e, B):
        a, b = rewrite(e.a, fn), rewrite(e.b, fn)
        return e if (a is e.a and b is e.b) else B(e.op, a, b)
    if isinstance(e, Unary):
        a = rewrite(e.a, fn)
        return e if a is e.a else Unary(e.op, a)
    if isinstance(e, Cast):
        a = rewrite(e.a, fn)
        return e if a is e.a else Cast(e.to, a)
    if isinstance(e, Select):
        return Select(rewrite(e.cond, fn), rewrite(e.t, fn), rewrite(e.f, fn))
    if isinstance(e, TensorRead):
        return TensorRead(e.tensor, tuple(rewrite(i, fn) for i in e.indices))
    if isinstance(e, Load):
        return Load(e.buffer, tuple(rewrite(i, fn) for i in e.indices))
    if isinstance(e, Reduce):
        return Reduce(e.reducer, rewrite(e.source, fn), e.axes)
    return e


def substitute(e: Expr, mapping: dict) -> Expr:
    return rewrite(e, lambda n: mapping.get(n) if isinstance(n, Var) else None)


def rewrite_stmt(s, expr, store=None):
    """Rebuild loop-IR statement ``s`` with ``expr(e)`` applied to every expression in it.

    ``store(st)``, if given, may replace each rebuilt ``Store`` (e.g. to redirect it).
    """
    if isinstance(s, Seq):
        return Seq(tuple(rewrite_stmt(c, expr, store) for c in s.stmts))
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, rewrite_stmt(s.body, expr, store))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, rewrite_stmt(s.body, expr, store))
    if isinstance(s, IfThenElse):
        return IfThenElse(expr(s.cond), rewrite_stmt(s.then, expr, store),
                          None if s.otherwise is None else rewrite_stmt(s.otherwise, expr, store), s.skip)
    if isinstance(s, Store):
        new = Store(s.buffer, tuple(expr(i) for i in s.indices), expr(s.value))
        return new if store is None else store(new)
    if isinstance(s, Prefetch):
        return Prefetch(s.buffer, tuple(expr(i) for i in s.indices), s.offset, s.locality)
    raise TypeError(f"not a loop-IR statement: {type(s).__name__}")
