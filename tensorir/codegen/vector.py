"""Explicit SIMD code for VECTORIZED loops (part of :mod:`tensorir.codegen`).

The body of a vectorized loop is emitted once with ``extent``-lane LLVM vectors;
LLVM legalizes widths larger than the hardware's.  Lane-dependent values are
vectors, the rest stay scalar and are broadcast where the two meet.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from tensorir.codegen.lane_pattern import known_value, lane_offsets, load_span, load_window, row_window
from tensorir.codegen.types import ITEMSIZE, I1, I32, I64, LLTYPE, PTR, VOID, scoped, strides, type_suffix
from tensorir.te.expr import Binary, BinOp, Const, Var
from tensorir.tir.analysis.affine import Affine, affine
from tensorir.tir.ir import Buffer, For, IfThenElse, Load, Store

if TYPE_CHECKING:
    from tensorir.codegen.function import FunctionGen


# An unmasked load whose lanes are a constant stride apart is one scalar load per lane at a constant
# offset (False: an llvm.masked.gather of a vector of addresses); why: docs/decisions/070-strided-loads-are-scalar-loads.md
STRIDED_LOADS = True
# An unmasked load whose lanes follow a constant pattern (``x[k // 4 * 4 + c]``) is whole-vector loads and
# a shuffle (False: a gather); why: docs/decisions/076-lane-pattern-loads.md
PATTERN_LOADS = True


class VectorContext:
    """Emits the body of a VECTORIZED loop once, with ``extent`` lanes.

    The loop variable is bound to the constant vector ``<0, 1, ..., n-1>``, so
    every expression that depends on it evaluates to a vector and everything
    else stays scalar (broadcast where the two meet).  Memory accesses are
    classified by the coefficient of the loop variable in the flattened offset:
    0 -> scalar access, 1 -> contiguous vector access, otherwise gather/scatter.
    Lane-dependent conditions become the lane ``mask`` applied to every memory
    access beneath them.
    """

    def __init__(self, fg: FunctionGen, loop: For):
        self.fg = fg
        self.var = loop.var.name
        self.lanes = loop.extent
        self.body = loop.body
        self.mask = None

    def emit(self) -> None:
        fg = self.fg
        ramp = fg.mod.ramp(self.lanes)
        fg.vec = self
        with scoped(fg.vars, self.var, ramp):
            fg.stmt(self.body)
        fg.vec = None

    # -------------------------------------------------------- access analysis
    def linear(self, e):
        """``(c, rest)`` with ``e == c*var + rest`` and ``rest`` free of var (None = 0).

        Returns None when ``e`` is not linear in the loop variable with a
        constant coefficient.  The affine form of
        :func:`tensorir.tir.analysis.affine.affine`, with every sub-expression
        free of the variable kept whole (an atom).  Memoized so repeated
        accesses share ``rest`` nodes (and their cached values).
        """
        memo = self.fg.mod.linear_memo
        key = (self.var, id(e))
        if key not in memo:
            memo[key] = (self._linear(e), e)
        return memo[key][0]

    def _linear(self, e):
        mod, var = self.fg.mod, self.var
        if not mod.uses_var(e, var):
            return 0, e
        form = affine(e, atom=lambda n: not mod.uses_var(n, var))
        coef, rest = 0, {}
        for t, c in form.terms.items():
            if isinstance(t, Var) and t.name == var:
                coef += c
            elif mod.uses_var(t, var):
                return None         # the variable inside a non-linear term
            else:
                rest[t] = c
        if not rest and not form.const:
            return coef, None
        return coef, Affine(rest, form.const).to_expr()

    def access(self, buf: Buffer, indices, load: bool = False):
        """Classify ``buf[indices]``: ("scalar", ptr), ("contig", ptr), ("local", ptr), ("stride2", ptr)
        (a ``load`` of every other element) or ("gather", ptrs).

        "local" is a contiguous access wholly inside a stack buffer at a
        constant offset: under a mask it is done as a plain load/store plus a
        select, which SROA can keep in registers (masked intrinsics on a
        register tile would pin it to memory).
        """
        fg = self.fg
        elt = LLTYPE[buf.dtype]
        parts = [self.linear(i) for i in indices]
        if all(p is not None for p in parts) and len(indices) == len(buf.shape):
            coef = sum(p[0] * st for p, st in zip(parts, strides(buf)))
            rests = [Const(0, "int32") if p[1] is None else p[1] for p in parts]
            ptr = fg.address(buf, rests)
            if coef == 0:
                return "scalar", ptr
            if coef == 1:
                if self.mask is not None and id(fg.bufs.get(buf)) in fg.stack_slots:
                    chain = fg.affine_chain(buf, rests)
                    if chain is not None and not chain[0] and 0 <= chain[1] <= buf.size - self.lanes:
                        return "local", ptr
                return "contig", ptr
            if coef == 2 and load:
                return "stride2", ptr
            if load and self.mask is None and STRIDED_LOADS:
                return "strided", (ptr, coef)
            steps = ir.Constant(ir.VectorType(I64, self.lanes), [coef * k for k in range(self.lanes)])
            return "gather", self.vector_gep(ptr, steps, elt)
        if load and self.mask is None and PATTERN_LOADS and len(indices) == len(buf.shape):
            found = self._pattern_access(buf, indices)
            if found is not None:
                return found
        off = fg.offset(buf, indices)
        if not isinstance(off.type, ir.VectorType):
            return "scalar", fg.b.gep(fg.base_pointer(buf), [off], inbounds=self.mask is None,
                                      source_etype=elt)
        return "gather", self.vector_gep(fg.base_pointer(buf), off, elt)

    def _pattern_access(self, buf: Buffer, indices):
        """("window", (ptr, width, picks)): the lanes read within one row of ``buf``'s last axis at a
        constant place; ("span", (ptr, offsets)): each lane a constant offset from ``ptr``; None: neither
        (see :mod:`tensorir.codegen.lane_pattern`)."""
        parts = [lane_offsets(self, i) for i in indices]
        if any(p is None for p in parts):
            return None
        rests, varying = [], []
        for d, (offsets, rest) in enumerate(parts):
            if len(set(offsets)) > 1:
                varying.append(d)
            elif offsets[0]:
                shift = Const(offsets[0], "int32")
                rest = shift if rest is None else Binary(BinOp.ADD, rest, shift)
            rests.append(rest)
        last, st = len(indices) - 1, strides(buf)
        if varying == [last] and st[last] == 1:
            # (a constant place in the row, as an unrolled loop's variable gives it: the whole row window)
            window = row_window(parts[last][0], known_value(rests[last], self.fg.vars), buf.shape[last], self.lanes)
            if window is not None:
                start, width, picks = window
                place = [Const(0, "int32") if r is None else r for r in rests[:-1]] + [Const(start, "int32")]
                return "window", (self.fg.address(buf, place), width, picks)
        flat = [sum(parts[d][0][k] * st[d] for d in varying) for k in range(self.lanes)]
        return "span", (self.fg.address(buf, [Const(0, "int32") if r is None else r for r in rests]), flat)

    def vector_gep(self, base, offsets, elt):
        g = self.fg.b.gep(base, [offsets], inbounds=self.mask is None, source_etype=elt)
        g.type = ir.VectorType(PTR, self.lanes)   # llvmlite types it as a scalar ptr
        return g

    # -------------------------------------------------------- masks
    def all_true(self):
        return ir.Constant(ir.VectorType(I1, self.lanes), [1] * self.lanes)

    def and_mask(self, cond):
        return cond if self.mask is None else self.fg.b.and_(self.mask, cond)

    def any_lane(self):
        """``<1 x i1>``: is any lane of the current mask active (guards scalar accesses)."""
        fg = self.fg
        any_on = fg.call_intrinsic(f"llvm.vector.reduce.or.v{self.lanes}i1", I1, [self.mask])
        return fg.b.bitcast(any_on, ir.VectorType(I1, 1))

    def masked_if(self, cond, s: IfThenElse) -> None:
        """Both arms run, each under the current mask narrowed by ``cond`` / ``not cond``."""
        fg, outer = self.fg, self.mask
        self.mask = self.and_mask(cond)
        fg.stmt(s.then)
        if s.otherwise is not None:
            self.mask = outer
            self.mask = self.and_mask(fg.b.not_(cond))
            fg.stmt(s.otherwise)
        self.mask = outer

    def masked_select(self, cond, t_e, f_e, lazy_t: bool, lazy_f: bool):
        fg, old = self.fg, self.mask
        if lazy_t:
            self.mask = self.and_mask(cond)
        t = fg.expr(t_e)
        self.mask = old
        if lazy_f:
            self.mask = self.and_mask(fg.b.not_(cond))
        f = fg.expr(f_e)
        self.mask = old
        t, f = fg.unify(t, f)
        if not isinstance(t.type, ir.VectorType):
            t, f = fg.broadcast(t, self.lanes), fg.broadcast(f, self.lanes)
        return fg.b.select(cond, t, f)

    # -------------------------------------------------------- memory
    def load(self, e: Load):
        fg = self.fg
        elt, align = LLTYPE[e.dtype], ITEMSIZE[e.dtype]
        vty = ir.VectorType(elt, self.lanes)
        fg.check_access(e.buffer, e.indices, "load")     # checked builds only: the enabled lanes
        kind, ptr = self.access(e.buffer, e.indices, load=True)
        align_c = ir.Constant(I32, align)
        if kind == "stride2":
            return self._load_stride2(ptr, vty, align)
        if kind == "strided":
            return self._load_strided(*ptr, vty, align)
        if kind == "window":
            return load_window(fg.b, ptr[0], ptr[1], ptr[2], elt, align)
        if kind == "span":
            return load_span(fg.b, ptr[0], ptr[1], elt, align)
        if kind == "scalar":
            if self.mask is None:
                return fg.b.load(ptr, typ=elt, align=align)
            # One element, loaded only if some lane wants it (no control flow).
            one = ir.VectorType(elt, 1)
            v = fg.call_intrinsic(f"llvm.masked.load.v1{type_suffix(elt)}.p0", one,
                                  [ptr, align_c, self.any_lane(), ir.Constant(one, None)])
            return fg.b.extract_element(v, ir.Constant(I32, 0))
        zero = ir.Constant(vty, None)
        if kind == "local":
            return fg.b.select(self.mask, fg.b.load(ptr, typ=vty, align=align), zero)
        if kind == "contig":
            if self.mask is None:
                return fg.b.load(ptr, typ=vty, align=align)
            return fg.call_intrinsic(f"llvm.masked.load.{type_suffix(vty)}.p0", vty,
                                     [ptr, align_c, self.mask, zero])
        mask = self.all_true() if self.mask is None else self.mask
        return fg.call_intrinsic(f"llvm.masked.gather.{type_suffix(vty)}.v{self.lanes}p0", vty,
                                 [ptr, align_c, mask, zero])

    def _load_strided(self, ptr, step: int, vty, align: int):
        """Lanes ``step`` elements apart, every lane enabled: one scalar load per lane at a constant
        offset from ``ptr``, inserted into the vector. LLVM scalarizes a gather on this CPU anyway, but
        from a vector of addresses it extracts one by one; loads of a stack tile at constant offsets
        also let SROA keep the tile in registers and turn the inserts into shuffles (a transpose)."""
        b, v = self.fg.b, ir.Constant(vty, None)
        for k in range(self.lanes):
            p = ptr if k == 0 else b.gep(ptr, [ir.Constant(I64, k * step)], inbounds=True, source_etype=vty.element)
            v = b.insert_element(v, b.load(p, typ=vty.element, align=align), ir.Constant(I32, k))
        return v

    def _load_stride2(self, ptr, vty, align: int):
        """Every other element from ``ptr`` (a stride-2 window, a subsampling copy): two contiguous
        loads that end at the last element read, so nothing past it is touched, and one shuffle
        (a two-source permute) instead of a gather, which reads the elements one at a time."""
        b, n = self.fg.b, self.lanes
        hi_ptr = b.gep(ptr, [ir.Constant(I64, n - 1)], inbounds=self.mask is None, source_etype=vty.element)
        if self.mask is None:
            lo, hi = b.load(ptr, typ=vty, align=align), b.load(hi_ptr, typ=vty, align=align)
        else:
            # lane k reads element 2k: lo[2k] for k < n/2, else hi[2k - n + 1]; each half loads only the
            # elements of enabled lanes (a masked load never touches a disabled element)
            off = ir.Constant(ir.VectorType(I1, n), None)
            lo_lanes = [j // 2 if j % 2 == 0 else n for j in range(n)]
            hi_lanes = [(n - 1 + j) // 2 if (n - 1 + j) % 2 == 0 else n for j in range(n)]
            zero, align_c = ir.Constant(vty, None), ir.Constant(I32, align)
            lo, hi = (self.fg.call_intrinsic(f"llvm.masked.load.{type_suffix(vty)}.p0", vty, [
                          p, align_c, b.shuffle_vector(self.mask, off, ir.Constant(ir.VectorType(I32, n), lanes)),
                          zero]) for p, lanes in ((ptr, lo_lanes), (hi_ptr, hi_lanes)))
        picks = [2 * k if 2 * k < n else 2 * k + 1 for k in range(n)]   # hi[j] is element n - 1 + j
        return b.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, n), picks))

    def store(self, s: Store) -> None:
        fg = self.fg
        elt, align = LLTYPE[s.buffer.dtype], ITEMSIZE[s.buffer.dtype]
        value = fg.expr(s.value)
        fg.check_access(s.buffer, s.indices, "store")    # checked builds only: the enabled lanes
        kind, ptr = self.access(s.buffer, s.indices)
        align_c = ir.Constant(I32, align)
        if kind == "scalar" and not isinstance(value.type, ir.VectorType):
            if self.mask is None:
                fg.b.store(value, ptr, align=align)
            else:
                one = fg.b.bitcast(value, ir.VectorType(elt, 1))
                fg.call_intrinsic(f"llvm.masked.store.v1{type_suffix(elt)}.p0", VOID,
                                  [one, ptr, align_c, self.any_lane()])
            return
        if not isinstance(value.type, ir.VectorType):
            value = fg.broadcast(value, self.lanes)
        vty = value.type
        if kind == "local":
            old = fg.b.load(ptr, typ=vty, align=align)
            fg.b.store(fg.b.select(self.mask, value, old), ptr, align=align)
            return
        if kind == "contig":
            if self.mask is None:
                fg.b.store(value, ptr, align=align)
            else:
                fg.call_intrinsic(f"llvm.masked.store.{type_suffix(vty)}.p0", VOID,
                                  [value, ptr, align_c, self.mask])
            return
        if kind == "scalar":
            # A vector stored to one address: scatter's lane order makes the
            # last active lane win, as in the sequential loop.
            ptr = fg.broadcast(ptr, self.lanes)
        mask = self.all_true() if self.mask is None else self.mask
        fg.call_intrinsic(f"llvm.masked.scatter.{type_suffix(vty)}.v{self.lanes}p0", VOID,
                          [value, ptr, align_c, mask])
