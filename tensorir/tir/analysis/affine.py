"""The affine (linear) form of an integer expression: ``sum(coef * atom) + const``.

The one implementation of this decomposition, used by the simplifier
(:mod:`tensorir.tir.transform.simplify`), lowering, code generation (addresses
and the lane coefficient of vector accesses) and the cost model's access
analysis.  ``+``, ``-`` and ``*`` by a constant are expanded; any other
sub-expression (a variable, ``//``, ``%``, ``min``, a load, a product of two
non-constants...) is an *atom* with an integer coefficient.  Callers that need
another view adapt the atoms (codegen keys them by variable name or by a
canonical identity; the cost model accepts only loop variables).
"""
from __future__ import annotations

from tensorir.te.expr import Binary, BinOp, Const, Expr, Var, children, const


class Affine:
    """``sum(coeff * term) + const`` with integer coefficients (terms are atom Exprs, no zero coefficient)."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, c: int = 0):
        self.terms = terms if terms is not None else {}
        self.const = c

    def add(self, other: "Affine", scale: int = 1) -> "Affine":
        terms = dict(self.terms)
        for t, c in other.terms.items():
            v = terms.get(t, 0) + c * scale
            if v:
                terms[t] = v
            else:
                terms.pop(t, None)
        return Affine(terms, self.const + other.const * scale)

    def scale(self, k: int) -> "Affine":
        if k == 0:
            return Affine()
        return Affine({t: c * k for t, c in self.terms.items()}, self.const * k)

    def to_expr(self) -> Expr:
        """The form as an expression: ``t0 * c0 + t1 - t2 + const`` (terms in insertion order)."""
        out = None
        for t, c in self.terms.items():
            if c == 1:
                e = t
            elif c == -1 and out is not None:
                out = Binary(BinOp.SUB, out, t)
                continue
            else:
                e = Binary(BinOp.MUL, t, const(c))
            out = e if out is None else Binary(BinOp.ADD, out, e)
        if out is None:
            return const(self.const)
        if self.const > 0:
            return Binary(BinOp.ADD, out, const(self.const))
        if self.const < 0:
            return Binary(BinOp.SUB, out, const(-self.const))
        return out

    def __repr__(self) -> str:
        return f"Affine({self.terms!r}, {self.const})"


def affine(e: Expr, atom=None) -> Affine:
    """The affine form of integer expression ``e``.

    Parameters
    ----------
    e : Expr
        An integer (index) expression.
    atom : callable, optional
        ``atom(node) -> bool``: keep a non-constant sub-expression whole, as an
        atom, instead of expanding it (codegen's vector accesses keep every
        sub-expression free of the lane variable whole).

    Returns
    -------
    Affine
        Constants fold into ``const``; ``a + b``, ``a - b`` and products whose
        one side is constant are expanded; anything else is an atom with
        coefficient 1 (a product of two non-constant forms is the original node).
    """
    if isinstance(e, Const):
        return Affine({}, int(e.value))
    if atom is not None and atom(e):
        return Affine({e: 1}, 0)
    if isinstance(e, Binary):
        if e.op is BinOp.ADD:
            return affine(e.a, atom).add(affine(e.b, atom))
        if e.op is BinOp.SUB:
            return affine(e.a, atom).add(affine(e.b, atom), -1)
        if e.op is BinOp.MUL:
            la, lb = affine(e.a, atom), affine(e.b, atom)
            if not lb.terms:
                return la.scale(lb.const)
            if not la.terms:
                return lb.scale(la.const)
    return Affine({e: 1}, 0)


def coefficient(e: Expr, v: Var):
    """Integer coefficient of ``v`` in ``e`` if ``e`` is linear in ``v``, else None."""
    lin = affine(e)
    c = lin.terms.get(v, 0)
    for t in lin.terms:
        if t is not v and t != v and mentions(t, v):
            return None
    return c


def mentions(e: Expr, v: Var) -> bool:
    """Does ``v`` occur in ``e``?"""
    stack = [e]
    while stack:
        n = stack.pop()
        if n == v:
            return True
        stack.extend(children(n))
    return False
