"""The ``promote`` pass: register promotion on the loop IR (a lowering pass, before codegen).

Small serial loops that walk a LOCAL register tile (a ``cache_write``
write-back) are unrolled, so every tile access has a constant index.

A serial loop that keeps reading and writing one element of a buffer, or a
small tile of it spanned by unrolled/vectorized inner loops (``acc[i] += ...``
over ``k``; ``mean[i:i+32] += ...`` over ``k`` with the ``i`` lanes vectorized
inside), gets a private LOCAL copy of it: loaded once before the loop, stored
once after it; likewise a tile that an unrolled loop rewrites repeatedly within
a straight-line loop body.  SROA then keeps
the copy in a register.  This is LLVM's LICM scalar promotion, done here so
the fast LLVM pipeline (:mod:`tensorir.runtime`) needs no loop passes.

The rewrite is exact: only elements the loop stores unconditionally qualify
(so the extra load and store touch memory the loop writes anyway), and every
access to the buffer inside the loop must be to that same element (so nothing
reads a stale value).  Distinct buffers never alias (kernel arguments are
checked not to overlap; allocations are distinct).

A copy the pass made (recognised by its allocation around the copy-in, the loop
and the copy-out of the same elements) is not promoted again, so a second run
changes nothing, with one exception: the first run visits loops outermost first,
so a serial loop it unrolls as a register-tile walk cannot make an enclosing
loop's tile promotable in that run, and a second run promotes that tile (14 of
600 random schedules of the generated spaces; a third run changes nothing).  The
lowering pipeline runs the pass once, as code generation used to.
"""
from __future__ import annotations

import itertools

from tensorir.te.expr import Const, Var, children
from tensorir.tir.ir import Allocate, Buffer, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Scope, Seq, Store, seq
from tensorir.tir.rewrite import rewrite, rewrite_stmt


def promote_func(func: PrimFunc) -> PrimFunc:
    """The ``promote`` pass on a function; returns ``func`` itself when nothing is promoted."""
    body = promote(func.body)
    return func if body == func.body else PrimFunc(func.name, func.params, body)


def promote(body):
    """``body`` with loop-invariant accumulators of serial loops in LOCAL registers."""
    return _Promoter().visit(body)


class _Promoter:
    def __init__(self):
        self.names = itertools.count()
        self.copies: set = set()     # LOCAL buffers that are copies this pass made (on an earlier run)

    def visit(self, s):
        if isinstance(s, Seq):
            return seq(*[self.visit(c) for c in s.stmts])
        if isinstance(s, IfThenElse):
            return IfThenElse(s.cond, self.visit(s.then),
                              None if s.otherwise is None else self.visit(s.otherwise), s.skip)
        if isinstance(s, Allocate):
            if promoted_copy(s) is not None:
                self.copies.add(s.buffer)
            return Allocate(s.buffer, self.visit(s.body))
        if isinstance(s, For):
            if indexes_register_tile(s):
                return For(s.var, s.extent, ForKind.UNROLLED, self.visit(s.body))
            if s.kind is ForKind.SERIAL and s.extent > 1:
                found = invariant_elements(s, skip=self.copies)
                if found:
                    return self.promoted(s, found)
            body = self.visit(s.body)
            if s.kind is ForKind.SERIAL:
                body = self.tiles_in_body(body)
            return For(s.var, s.extent, s.kind, body)
        return s

    def tiles_in_body(self, body):
        """Straight-line ``body``: small tiles it reads and rewrites repeatedly go to registers.  A
        branch (a tile loop's full tiles beside its guarded edge) is looked at one side at a time: each
        side is straight-line code of its own, and a copy around one side is exact."""
        if isinstance(body, IfThenElse):
            return IfThenElse(body.cond, self.tiles_in_body(body.then),
                              None if body.otherwise is None else self.tiles_in_body(body.otherwise), body.skip)
        for buf, indices, loops in repeated_tiles(body, skip=self.copies):
            tmp, tidx, copy_in, copy_out = self.tile(buf, indices, loops)
            body = Allocate(tmp, seq(copy_in, _redirect(body, buf, indices, tmp, tidx), copy_out))
        return body

    def promoted(self, loop: For, found: list):
        body = loop.body
        wrappers = []
        for buf, indices, loops in found:
            tmp, tidx, copy_in, copy_out = self.tile(buf, indices, loops)
            body = _redirect(body, buf, indices, tmp, tidx)
            wrappers.append((tmp, copy_in, copy_out))
        out = For(loop.var, loop.extent, loop.kind, self.visit(body))
        for tmp, copy_in, copy_out in reversed(wrappers):
            out = Allocate(tmp, seq(copy_in, out, copy_out))
        return out

    def tile(self, buf, indices, loops):
        """A LOCAL copy of ``buf[indices]`` over ``loops``' variables, with copy-in/out nests."""
        shape = tuple(lp.extent for lp in loops) or (1,)
        tmp = Buffer(f"{buf.name}.reg{next(self.names)}", shape, buf.dtype, Scope.LOCAL)
        tidx = tuple(lp.var for lp in loops) or (Const(0, "int32"),)
        copy_in = Store(tmp, tidx, Load(buf, indices))
        copy_out = Store(buf, indices, Load(tmp, tidx))
        for lp in reversed(loops):
            copy_in = For(lp.var, lp.extent, lp.kind, copy_in)
            copy_out = For(lp.var, lp.extent, lp.kind, copy_out)
        return tmp, tidx, copy_in, copy_out


def _redirect(s, buf, indices, tmp, tidx):
    """``s`` with every access ``buf[indices]`` turned into ``tmp[tidx]``."""
    def fix(e):
        if isinstance(e, Load) and e.buffer == buf and e.indices == indices:
            return Load(tmp, tidx)
        return None

    def store(st):
        return Store(tmp, tidx, st.value) if st.buffer == buf and st.indices == indices else st
    return rewrite_stmt(s, lambda e: rewrite(e, fix), store)


def promoted_copy(s: Allocate):
    """``(buffer, indices)`` whose register copy Allocate ``s`` holds, if :func:`promote` made it, else None.

    A copy made by this pass is allocated around ``copy-in; ...; copy-out``: the same
    loops around ``tmp[t] = buf[i]`` first and ``buf[i] = tmp[t]`` last.  A schedule's
    own allocations never end by writing back the buffer their first statement reads.
    """
    body = s.body
    if not isinstance(body, Seq) or len(body.stmts) < 3:
        return None
    (loops_in, first), (loops_out, last) = _under_loops(body.stmts[0]), _under_loops(body.stmts[-1])
    if loops_in != loops_out or not isinstance(first, Store) or not isinstance(last, Store):
        return None
    tmp = s.buffer
    if first.buffer != tmp or not isinstance(first.value, Load) or first.value.buffer == tmp:
        return None
    src, indices = first.value.buffer, first.value.indices
    if last.buffer != src or last.indices != indices or last.value != Load(tmp, first.indices):
        return None
    return src, indices


def _under_loops(s):
    """``([(var, extent, kind)], innermost statement)`` of a nest of single loops."""
    loops = []
    while isinstance(s, For):
        loops.append((s.var, s.extent, s.kind))
        s = s.body
    return loops, s


def invariant_elements(loop: For, skip=frozenset()) -> list:
    """``[(buffer, indices, loops)]`` that ``loop`` may keep in registers.

    ``loops`` are the UNROLLED / VECTORIZED loops inside ``loop`` whose
    variables the indices use (the vectorized one last; none for a single
    element): the promoted copy is that small tile, e.g. the 4 x 2 x 32
    accumulators a convolution updates in every step of its channel and
    window loops.  No other variable bound inside ``loop`` may appear.
    Buffers in ``skip`` (copies made by an earlier promotion) are left alone.
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
            # a skipping branch's body may run regardless (ir.IfThenElse.skip): what it writes counts as
            # written unconditionally, so a conv's accumulators stay promoted across its tap loops
            inside = conditional or not st.skip or st.otherwise is not None
            exprs(st.cond, True)
            visit(st.then, inside)
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
        if buf in unsafe or len(seen[buf]) != 1 or buf in skip:
            continue
        (indices,) = seen[buf]
        tile = _tile_loops(indices, binders, exclude=loop)
        if tile is None:
            continue
        loops, _ = tile
        out.append((buf, indices, loops))
    return out


# a tile whose loop variable is bound by several loops of one range (initialized, then updated under an
# unrolled window) is promoted as one tile; False: such tiles stay in memory, a store per update
# (docs/decisions/084-a-tile-initialized-then-updated-is-one-register-tile.md)
REBOUND_TILES = True
MAX_TILE = 512       # elements of a tile kept in registers (32 AVX-512 registers of 16 floats)


def repeated_tiles(body, skip=frozenset()) -> list:
    """``[(buffer, indices, loops)]``: tiles a straight-line body should keep in registers.

    ``body`` must hold only UNROLLED and VECTORIZED loops (and no branches).
    A buffer qualifies when the body stores to it, every access uses the same
    indices, those indices vary only with the body's own loops (``loops``, the
    vectorized one last) besides outer variables, and an unrolled loop that
    the indices do not use repeats the accesses: e.g. ``D[i, j] += ...`` under
    an unrolled ``k``.  This replaces store-to-load forwarding (GVN) and dead
    store elimination across the unrolled copies.  Buffers in ``skip`` are left alone.
    """
    binders: dict = {}
    accesses: dict = {}          # buffer -> list of (indices, enclosing loops)
    stored = set()

    def visit(st, enclosing) -> bool:
        if isinstance(st, Seq):
            return all(visit(c, enclosing) for c in st.stmts)
        if isinstance(st, For):
            if st.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED) and st.extent > 1:
                return False
            binders.setdefault(st.var.name, []).append(st)
            return visit(st.body, enclosing + (st,))
        if isinstance(st, Store):
            accesses.setdefault(st.buffer, []).append((st.indices, enclosing))
            stored.add(st.buffer)
            stack = [st.value, *st.indices]
            while stack:
                n = stack.pop()
                if isinstance(n, Load):
                    accesses.setdefault(n.buffer, []).append((n.indices, enclosing))
                stack.extend(children(n))
            return True
        if isinstance(st, Prefetch):
            return True   # a hint, not an access: it neither reads nor writes a tile
        return False      # branches, allocations: leave the body alone

    if not visit(body, ()):
        return []
    out = []
    for buf in sorted(stored, key=lambda b: b.name):
        if buf in skip:
            continue
        acc = accesses[buf]
        if len({a[0] for a in acc}) != 1:
            continue
        indices = acc[0][0]
        tile = _tile_loops(indices, binders)
        if tile is None:
            continue
        loops, names = tile
        repeated = any(lp.kind is ForKind.UNROLLED and lp.extent > 1 and lp.var.name not in names
                       for _, enclosing in acc for lp in enclosing)
        if repeated:
            out.append((buf, indices, loops))
    return out


def _tile_loops(indices, binders: dict, exclude=None):
    """``(loops, names)`` if ``indices`` vary only with unrolled/vectorized inner loops, else None.

    ``names`` are the variables the indices use; ``loops`` the inner loops
    (from ``binders``: variable name -> loops binding it, in nesting order) among
    them, outermost first but the vectorized one last.  Each must be bound by loops of one extent and
    kind (a variable bound twice, e.g. by a tile's initialization and its update, spans the same
    elements in both), at most one vectorized, the tile they span at most ``MAX_TILE`` elements, and
    no index may read memory.
    """
    names = set()
    stack = list(indices)
    while stack:
        n = stack.pop()
        if isinstance(n, Load):
            return None
        if isinstance(n, Var):
            names.add(n.name)
        stack.extend(children(n))
    loops = []
    for name in [n for n in binders if n in names]:     # in nesting order (deterministic)
        bound = binders.get(name)
        if bound is None:
            continue
        # a variable bound by several loops of one range (the tile's initialization and its update nest,
        # each walking the same columns) names the same elements in each: one tile covers them all
        first = bound[0]
        if len(bound) > 1 and not REBOUND_TILES:
            return None
        if any(lp is exclude or (lp.extent, lp.kind) != (first.extent, first.kind) for lp in bound) or \
                first.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED):
            return None
        loops.append(first)
    loops.sort(key=lambda lp: lp.kind is ForKind.VECTORIZED)
    size = 1
    for lp in loops:
        size *= lp.extent
    if sum(lp.kind is ForKind.VECTORIZED for lp in loops) > 1 or size > MAX_TILE:
        return None
    return loops, names


LOCAL_STACK_LIMIT = 64 * 1024   # LOCAL buffers up to this size live on the stack (codegen)
REGISTER_TILE_UNROLL = 64      # max statements a register-tile loop may unroll into


def _straight_line_size(body):
    """Statements ``body`` expands to when fully unrolled (vectorized loops count once)."""
    if isinstance(body, Seq):
        total = 0
        for c in body.stmts:
            n = _straight_line_size(c)
            if n is None:
                return None
            total += n
        return total
    if isinstance(body, For):
        if body.kind is ForKind.VECTORIZED or body.extent <= 1:
            return _straight_line_size(body.body)
        if body.kind is ForKind.PARALLEL:
            return None
        n = _straight_line_size(body.body)
        return None if n is None else n * body.extent
    if isinstance(body, IfThenElse):
        sizes = [_straight_line_size(x) for x in (body.then, body.otherwise) if x is not None]
        return None if None in sizes else sum(sizes)
    if isinstance(body, Allocate):
        return None
    return 1


def indexes_register_tile(s: For) -> bool:
    """Whether serial loop ``s`` walks a stack-resident LOCAL buffer and unrolls cheaply.

    Such loops (typically the write-back of a ``cache_write`` tile) are
    unrolled, inner serial loops included, so every access to the tile has a
    constant index and SROA keeps it in registers; the size limit keeps the
    code small.
    """
    if s.kind is not ForKind.SERIAL:
        return False
    size = _straight_line_size(s.body)
    if size is None or size * s.extent > REGISTER_TILE_UNROLL:
        return False
    name = s.var.name
    stack = [s.body]
    while stack:
        st = stack.pop()
        if isinstance(st, Seq):
            stack.extend(st.stmts)
        elif isinstance(st, (For, Allocate)):
            stack.append(st.body)
        elif isinstance(st, IfThenElse):
            stack.extend(x for x in (st.then, st.otherwise) if x is not None)
        elif isinstance(st, Store):
            accesses = [(st.buffer, st.indices)]
            exprs = [st.value, *st.indices]
            while exprs:
                n = exprs.pop()
                if isinstance(n, Load):
                    accesses.append((n.buffer, n.indices))
                exprs.extend(children(n))
            for buf, idx in accesses:
                if buf.scope is Scope.LOCAL and buf.nbytes <= LOCAL_STACK_LIMIT and any(
                        _uses(i, name) for i in idx):
                    return True
    return False


def _uses(e, name: str) -> bool:
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Var) and n.name == name:
            return True
        stack.extend(children(n))
    return False
