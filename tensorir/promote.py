"""Register promotion on the loop IR (run by codegen, after lowering).

A serial loop that keeps reading and writing one element of a buffer, or one
vector of it (``acc[i] += ...`` over ``k``; ``mean[i:i+32] += ...`` over ``k``
with the ``i`` lanes vectorized inside), gets a private LOCAL copy of that
element: loaded once before the loop, stored once after it.  SROA then keeps
the copy in a register.  This is LLVM's LICM scalar promotion, done here so
the fast LLVM pipeline (:mod:`tensorir.runtime`) needs no loop passes.

The rewrite is exact: only elements the loop stores unconditionally qualify
(so the extra load and store touch memory the loop writes anyway), and every
access to the buffer inside the loop must be to that same element (so nothing
reads a stale value).  Distinct buffers never alias (kernel arguments are
checked not to overlap; allocations are distinct).
"""
from __future__ import annotations

import itertools

from .expr import Const, Var, children
from .ir import Allocate, Buffer, For, ForKind, IfThenElse, Load, Scope, Seq, Store, seq
from .rewrite import rewrite


MAX_LANES = 256      # widest vector copy kept (codegen's MAX_VECTOR_LANES)


def promote(body):
    """``body`` with loop-invariant accumulators of serial loops in LOCAL registers."""
    return _Promoter().visit(body)


class _Promoter:
    def __init__(self):
        self.names = itertools.count()

    def visit(self, s):
        if isinstance(s, Seq):
            return seq(*[self.visit(c) for c in s.stmts])
        if isinstance(s, IfThenElse):
            return IfThenElse(s.cond, self.visit(s.then),
                              None if s.otherwise is None else self.visit(s.otherwise))
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.visit(s.body))
        if isinstance(s, For):
            if s.kind is ForKind.SERIAL and s.extent > 1:
                found = invariant_elements(s)
                if found:
                    return self.promoted(s, found)
            return For(s.var, s.extent, s.kind, self.visit(s.body))
        return s

    def promoted(self, loop: For, found: list):
        body = loop.body
        wrappers = []
        for buf, indices, vec in found:
            lanes = 1 if vec is None else vec.extent
            tmp = Buffer(f"{buf.name}.reg{next(self.names)}", (lanes,), buf.dtype, Scope.LOCAL)
            tidx = (Const(0, "int32"),) if vec is None else (vec.var,)
            body = _redirect(body, buf, indices, tmp, tidx)
            copy_in = Store(tmp, tidx, Load(buf, indices))
            copy_out = Store(buf, indices, Load(tmp, tidx))
            if vec is not None:
                copy_in = For(vec.var, vec.extent, ForKind.VECTORIZED, copy_in)
                copy_out = For(vec.var, vec.extent, ForKind.VECTORIZED, copy_out)
            wrappers.append((tmp, copy_in, copy_out))
        out = For(loop.var, loop.extent, loop.kind, self.visit(body))
        for tmp, copy_in, copy_out in reversed(wrappers):
            out = Allocate(tmp, seq(copy_in, out, copy_out))
        return out


def _redirect(s, buf, indices, tmp, tidx):
    """``s`` with every access ``buf[indices]`` turned into ``tmp[tidx]``."""
    def fix(e):
        if isinstance(e, Load) and e.buffer == buf and e.indices == indices:
            return Load(tmp, tidx)
        return None

    def go(st):
        if isinstance(st, Seq):
            return Seq(tuple(go(c) for c in st.stmts))
        if isinstance(st, For):
            return For(st.var, st.extent, st.kind, go(st.body))
        if isinstance(st, Allocate):
            return Allocate(st.buffer, go(st.body))
        if isinstance(st, IfThenElse):
            return IfThenElse(rewrite(st.cond, fix), go(st.then),
                              None if st.otherwise is None else go(st.otherwise))
        if isinstance(st, Store):
            value = rewrite(st.value, fix)
            if st.buffer == buf and st.indices == indices:
                return Store(tmp, tidx, value)
            return Store(st.buffer, tuple(rewrite(i, fix) for i in st.indices), value)
        return st
    return go(s)


def invariant_elements(loop: For) -> list:
    """``[(buffer, indices, vector_loop or None)]`` that ``loop`` may keep in registers.

    ``vector_loop`` is the VECTORIZED loop inside ``loop`` whose variable the
    indices use (the promoted copy is then one vector); no other variable bound
    inside ``loop`` may appear in the indices.
    """
    binders: dict = {loop.var.name: [loop]}   # variable name -> loops binding it
    seen: dict = {}                           # buffer -> set of index tuples
    stored, unsafe = set(), set()

    def exprs(e, conditional):
        stack = [e]
        while stack:
            n = stack.pop()
            if isinstance(n, Load):
                seen.setdefault(n.buffer, set()).add(n.indices)
                if conditional:
                    unsafe.add(n.buffer)
            stack.extend(children(n))

    def visit(st, conditional):
        if isinstance(st, Seq):
            for c in st.stmts:
                visit(c, conditional)
        elif isinstance(st, For):
            binders.setdefault(st.var.name, []).append(st)
            visit(st.body, conditional)
        elif isinstance(st, IfThenElse):
            exprs(st.cond, True)
            visit(st.then, True)
            if st.otherwise is not None:
                visit(st.otherwise, True)
        elif isinstance(st, Store):
            seen.setdefault(st.buffer, set()).add(st.indices)
            stored.add(st.buffer)
            if conditional:
                unsafe.add(st.buffer)
            exprs(st.value, conditional)
            for i in st.indices:
                exprs(i, True)
        elif isinstance(st, Allocate):
            unsafe.add(st.buffer)
            visit(st.body, conditional)

    visit(loop.body, False)
    out = []
    for buf in sorted(stored, key=lambda b: b.name):
        if buf in unsafe or len(seen[buf]) != 1:
            continue
        (indices,) = seen[buf]
        names, has_load = set(), False
        stack = list(indices)
        while stack:
            n = stack.pop()
            if isinstance(n, Var):
                names.add(n.name)
            elif isinstance(n, Load):
                has_load = True
            stack.extend(children(n))
        inner = [n for n in names if n in binders]
        if has_load or len(inner) > 1:
            continue
        vec = None
        if inner:
            loops = binders[inner[0]]
            if len(loops) != 1 or loops[0] is loop or loops[0].kind is not ForKind.VECTORIZED \
                    or loops[0].extent > MAX_LANES:
                continue
            vec = loops[0]
        out.append((buf, indices, vec))
    return out
