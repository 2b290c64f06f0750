"""The ``unswitch`` pass: a copy that pads, ``buf[..] = select(in_bounds, X[..], pad)``, gets an
unguarded version for the iterations that are all in bounds.

A padded copy's condition is a conjunction of affine comparisons of the copy's loop variables and
outer ones (the task's row and column).  Over the box of the copy's loops each comparison is
extreme at a corner, so ``if (every comparison holds at its worst corner) { copy without the
test } else { the original }`` decides once per nest what each element tested: a convolution
task's padded window, copied in every task, then costs its loads alone in the tasks away from
the border (MobileNet-V2's depthwise 32@112 spent about half its instructions on the tests;
docs/decisions/050-padded-copies-are-unswitched.md).

Only a whole copy nest is versioned, where at least ``MIN_INSIDE`` of the enclosing iterations take
the version without tests (a small image's tasks nearly all touch its border; a whole padded image
is never inside), and the version is hoisted to the top of the enclosing loop's body, so that the
copied values need no merge before the code that reads them.  Comparisons that are not affine in
the nest's variables (an atom such as ``(h + r) // 2`` over a loop variable) leave the nest as it is.
"""
from __future__ import annotations

import numpy as np

from tensorir.te.expr import Binary, BinOp, Const, Expr, Select, Var
from tensorir.tir.analysis.affine import Affine, affine, mentions
from tensorir.tir.analysis.bounds import linear_range
from tensorir.tir.analysis.values import int_values
from tensorir.tir.ir import Allocate, For, ForKind, IfThenElse, PrimFunc, Seq, Store

# d = a - b; the comparison ``a op b`` holds over a box iff it holds at d's minimum (``>=``, ``>``)
# or maximum (``<=``, ``<``)
_AT_MIN = frozenset({BinOp.GE, BinOp.GT})
_AT_MAX = frozenset({BinOp.LE, BinOp.LT})
# least share of the enclosing iterations that must take the version without tests: where fewer do
# (a 7x7 image's tasks all touch its border), the second copy of the task only costs
# (docs/decisions/050-padded-copies-are-unswitched.md)
MIN_INSIDE = 0.8
MAX_COUNTED = 1 << 20     # enclosing iterations counted at most, to find that share
def unswitch_func(func: PrimFunc) -> PrimFunc:
    """The pass (see the module docstring); ``func`` itself when no copy pads."""
    body = _Unswitch().stmt(func.body, {}, frozenset())
    return func if body is func.body else PrimFunc(func.name, func.params, body)


class _Unswitch:
    def __init__(self):
        self.versioned = {}    # id -> the IfThenElse this pass made around a whole copy nest (kept alive)

    def stmt(self, s, ranges: dict, slow: frozenset):
        """``s`` with its copies versioned; ``slow``: the conditions known false here (the else branch of
        a version already made: its copy stays as it is, so the pass is idempotent)."""
        if isinstance(s, For):
            if s.kind is not ForKind.PARALLEL:
                chain = _copy_chain(s)
                if chain is not None:      # versioned whole, or left whole (never loop by loop)
                    got = _version(s, *chain, ranges, slow)
                    if isinstance(got, IfThenElse):
                        self.versioned[id(got)] = got
                    return s if got is None else got
            body = self.stmt(s.body, {**ranges, s.var: (0, s.extent - 1)}, slow)
            return s if body is s.body else For(s.var, s.extent, s.kind, self.hoist(body))
        if isinstance(s, Seq):
            stmts = tuple(self.stmt(c, ranges, slow) for c in s.stmts)
            return s if all(a is b for a, b in zip(stmts, s.stmts)) else Seq(stmts)
        if isinstance(s, Allocate):
            body = self.stmt(s.body, ranges, slow)
            return s if body is s.body else Allocate(s.buffer, body)
        if isinstance(s, IfThenElse):
            then = self.stmt(s.then, ranges, slow)
            other = None if s.otherwise is None else self.stmt(s.otherwise, ranges, slow | {s.cond})
            return s if then is s.then and other is s.otherwise else IfThenElse(s.cond, then, other, s.skip)
        return s

    def hoist(self, s):
        """A loop body with a versioned copy in it, split at its top into the two versions of the whole
        body: the copy's values then need no merge before the code that reads them (a task's padded
        window, held in registers, would otherwise go through the stack at the join)."""
        if isinstance(s, Allocate):
            inner = self.hoist(s.body)
            if id(inner) in self.versioned:
                return self._mark(IfThenElse(inner.cond, Allocate(s.buffer, inner.then),
                                             Allocate(s.buffer, inner.otherwise)))
            return s if inner is s.body else Allocate(s.buffer, inner)
        if isinstance(s, Seq):
            stmts = [self.hoist(c) for c in s.stmts]
            for k, c in enumerate(stmts):
                if id(c) in self.versioned:
                    pre, post = stmts[:k], stmts[k + 1:]
                    return self._mark(IfThenElse(c.cond, Seq((*pre, c.then, *post)),
                                                 Seq((*pre, c.otherwise, *post))))
            return s if all(a is b for a, b in zip(stmts, s.stmts)) else Seq(tuple(stmts))
        return s

    def _mark(self, s: IfThenElse) -> IfThenElse:
        self.versioned[id(s)] = s
        return s


def _copy_chain(nest: For):
    """``(loops, store)`` if ``nest`` is a chain of non-parallel loops around one store of
    ``select(cond, value, constant)``, else None."""
    loops, st = [], nest
    while isinstance(st, For):
        if st.kind is ForKind.PARALLEL:
            return None
        loops.append(st)
        st = st.body
    if not (isinstance(st, Store) and isinstance(st.value, Select) and isinstance(st.value.f, Const)):
        return None
    return loops, st


def _version(nest: For, loops: list, st: Store, ranges: dict, slow: frozenset):
    """``if whole: nest without the test else nest`` for the copy ``loops`` around ``st``, whose box is
    wholly in bounds for at least ``MIN_INSIDE`` of the enclosing iterations; else None."""
    box = {lp.var: (0, lp.extent - 1) for lp in loops}
    whole = _whole(_conjuncts(st.value.cond), box, ranges)
    if whole is None or whole in slow or (whole is not True and _share(whole, ranges) < MIN_INSIDE):
        return None
    fast = Store(st.buffer, st.indices, st.value.t)
    for lp in reversed(loops):
        fast = For(lp.var, lp.extent, lp.kind, fast)
    return fast if whole is True else IfThenElse(whole, fast, nest)


def _conjuncts(cond: Expr) -> list:
    if isinstance(cond, Binary) and cond.op is BinOp.AND:
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _whole(comparisons: list, box: dict, outer: dict):
    """The condition (over ``outer``'s variables) that every comparison holds on all of ``box`` (True:
    always); None if one is not an affine comparison or can never hold for the whole box."""
    parts = []
    for c in comparisons:
        if not (isinstance(c, Binary) and (c.op in _AT_MIN or c.op in _AT_MAX)):
            return None
        d = affine(c.a).add(affine(c.b), -1)
        terms, const = {}, d.const
        for t, k in d.terms.items():
            if t in box:
                lo, hi = box[t]
                const += k * (lo if (k > 0) == (c.op in _AT_MIN) else hi)
            elif any(mentions(t, v) for v in box):
                return None
            else:
                terms[t] = k
        worst = Affine(terms, const)
        r = linear_range(worst, outer)
        if r is not None and not _can_hold(c.op, r):
            return None
        if r is not None and _always(c.op, r):
            continue
        parts.append(Binary(c.op, worst.to_expr(), Const(0, "int32")))
    if not parts:
        return True
    out = parts[0]
    for p in parts[1:]:
        out = Binary(BinOp.AND, out, p)
    return out


def _can_hold(op: BinOp, r: tuple) -> bool:
    lo, hi = r
    return {BinOp.GE: hi >= 0, BinOp.GT: hi > 0, BinOp.LE: lo <= 0, BinOp.LT: lo < 0}[op]


def _always(op: BinOp, r: tuple) -> bool:
    lo, hi = r
    return {BinOp.GE: lo >= 0, BinOp.GT: lo > 0, BinOp.LE: hi <= 0, BinOp.LT: hi < 0}[op]



def _share(cond: Expr, ranges: dict) -> float:
    """Share of the points of ``ranges`` (the enclosing loops) where ``cond`` holds; 0 when unknown."""
    names = {}
    stack = [cond]
    while stack:
        e = stack.pop()
        if isinstance(e, Var):
            names[e] = ranges.get(e)
        elif isinstance(e, Binary):
            stack.extend((e.a, e.b))
    if any(r is None for r in names.values()) or np.prod([r[1] - r[0] + 1 for r in names.values()]) > MAX_COUNTED:
        return 0.0
    axes = list(names)
    grid = {v.name: np.arange(names[v][0], names[v][1] + 1).reshape([-1 if k == d else 1 for k in range(len(axes))])
            for d, v in enumerate(axes)}
    value = int_values(cond, grid)
    return 0.0 if value is None else float(np.mean(np.broadcast_to(value, [g.size for g in grid.values()])))
