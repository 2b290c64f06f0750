"""Explicit SIMD code for VECTORIZED loops (part of :mod:`tensorir.codegen`).

The body of a vectorized loop is emitted once with ``extent``-lane LLVM vectors;
LLVM legalizes widths larger than the hardware's.  Lane-dependent values are
vectors, the rest stay scalar and are broadcast where the two meet.
"""
from __future__ import annotations

from llvmlite import ir

from .codegen import FunctionGen, scoped, type_suffix
from .llvm_types import _ITEMSIZE, F32, FP_FLAGS, I1, I32, I64, LLTYPE, PTR, VOID, _splat, strides
from .expr import Binary, BinOp, Const, Var
from .ir import Buffer, For, IfThenElse, Load, Store


def _add(a, b):
    if a is None or b is None:
        return b if a is None else a
    return Binary(BinOp.ADD, a, b)


def _sub(a, b):
    if b is None:
        return a
    return Binary(BinOp.SUB, Const(0, "int32") if a is None else a, b)


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
        constant coefficient; other sub-terms are treated as opaque.  Memoized
        so repeated accesses share ``rest`` nodes (and their cached values).
        """
        memo = self.fg.mod.linear_memo
        key = (self.var, id(e))
        if key not in memo:
            memo[key] = (self._linear(e), e)
        return memo[key][0]

    def _linear(self, e):
        if not self.fg.mod.uses_var(e, self.var):
            return 0, e
        if isinstance(e, Var):
            return 1, None
        if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
            la, lb = self.linear(e.a), self.linear(e.b)
            if la is None or lb is None:
                return None
            if e.op is BinOp.ADD:
                return la[0] + lb[0], _add(la[1], lb[1])
            return la[0] - lb[0], _sub(la[1], lb[1])
        if isinstance(e, Binary) and e.op is BinOp.MUL:
            for x, y in ((e.a, e.b), (e.b, e.a)):
                if isinstance(y, Const):
                    lx = self.linear(x)
                    if lx is None:
                        return None
                    rest = None if lx[1] is None else Binary(BinOp.MUL, lx[1], y)
                    return lx[0] * y.value, rest
        return None

    def access(self, buf: Buffer, indices):
        """Classify ``buf[indices]``: ("scalar", ptr), ("contig", ptr), ("local", ptr) or ("gather", ptrs).

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
            steps = ir.Constant(ir.VectorType(I64, self.lanes), [coef * k for k in range(self.lanes)])
            return "gather", self.vector_gep(ptr, steps, elt)
        off = fg.offset(buf, indices)
        if not isinstance(off.type, ir.VectorType):
            return "scalar", fg.b.gep(fg.base_pointer(buf), [off], inbounds=self.mask is None,
                                      source_etype=elt)
        return "gather", self.vector_gep(fg.base_pointer(buf), off, elt)

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
        elt, align = LLTYPE[e.dtype], _ITEMSIZE[e.dtype]
        vty = ir.VectorType(elt, self.lanes)
        kind, ptr = self.access(e.buffer, e.indices)
        align_c = ir.Constant(I32, align)
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

    def store(self, s: Store) -> None:
        fg = self.fg
        elt, align = LLTYPE[s.buffer.dtype], _ITEMSIZE[s.buffer.dtype]
        value = fg.expr(s.value)
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


def vector_exp(fg: FunctionGen, x):
    """``exp(x)`` of a float32 vector ``x`` as a SIMD polynomial.

    LLVM lowers ``llvm.exp`` on a vector to one ``expf`` call per lane.  The
    vector version is Cephes' ``expf``: ``x = n*ln2 + r`` with ``|r| <=
    ln2/2``, a degree-7 polynomial for ``exp(r)``, and ``2**n`` built in the
    exponent bits, applied as two factors so results down to the smallest
    denormal are right.  Max relative error about 2 ulp over the normal
    range; ``inf`` above 88.72, ``0`` below -103.98, NaN stays NaN.
    """
    b, n = fg.b, x.type.count
    f = lambda v: _splat(F32, v, n)                     # noqa: E731
    i32 = lambda v: ir.Constant(ir.VectorType(I32, n), [v] * n)   # noqa: E731
    fl = dict(flags=FP_FLAGS)
    hi, lo = f(88.72283935546875), f(-103.97208404541016)
    xc = b.select(b.fcmp_ordered(">", x, hi), hi, b.select(b.fcmp_ordered("<", x, lo), lo, x))
    fx = fg.call_intrinsic(f"llvm.floor.v{n}f32", x.type,
                           [b.fadd(b.fmul(xc, f(1.44269504088896341), **fl), f(0.5), **fl)])
    r = b.fsub(b.fsub(xc, b.fmul(fx, f(0.693359375))), b.fmul(fx, f(-2.12194440e-4)))
    y = f(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        y = fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", x.type, [y, r, f(c)])
    z = b.fmul(r, r)
    y = b.fadd(fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", x.type, [y, z, r]), f(1.0))
    k = b.fptosi(fx, ir.VectorType(I32, n))                  # in [-150, 128]
    k1 = b.ashr(k, i32(1))
    k2 = b.sub(k, k1)
    vty = x.type
    p1 = b.bitcast(b.shl(b.add(k1, i32(127)), i32(23)), vty)
    p2 = b.bitcast(b.shl(b.add(k2, i32(127)), i32(23)), vty)
    out = b.fmul(b.fmul(y, p1), p2)
    out = b.select(b.fcmp_ordered(">", x, hi), f(float("inf")), out)
    out = b.select(b.fcmp_ordered("<", x, lo), f(0.0), out)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


def vector_tanh(fg: FunctionGen, x):
    """``tanh(x)`` of a float32 vector ``x`` as SIMD code.

    LLVM lowers ``llvm.tanh`` on a vector to one ``tanhf`` call per lane (an elementwise chain
    with a tanh ran at 0.46x numpy, whose tanh is SIMD).  This is Cephes' ``tanhf``: an odd
    polynomial below ``|x| = 0.625``, else ``1 - 2 / (exp(2|x|) + 1)`` (:func:`vector_exp`),
    each lane taking its branch by a select, then the sign of ``x``.  ``exp`` overflows to inf
    for large ``|x|``, which gives exactly 1; NaN stays NaN and -0.0 stays -0.0.  Within 2 ulp of
    tanh in tests/test_promote.py (which allows 3).
    """
    b, n = fg.b, x.type.count
    f = lambda v: _splat(F32, v, n)                     # noqa: E731
    fl = dict(flags=FP_FLAGS)
    a = fg.call_intrinsic(f"llvm.fabs.v{n}f32", x.type, [x])
    e = vector_exp(fg, b.fmul(a, f(2.0), **fl))
    big = b.fsub(f(1.0), b.fdiv(f(2.0), b.fadd(e, f(1.0), **fl), **fl), **fl)
    s = b.fmul(x, x, **fl)
    p = f(-5.70498872745e-3)
    for c in (2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1):
        p = fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", x.type, [p, s, f(c)])
    small = fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", x.type, [b.fmul(p, s, **fl), x, x])
    out = b.select(b.fcmp_ordered("<", a, f(0.625)), small, big)
    return fg.call_intrinsic(f"llvm.copysign.v{n}f32", x.type, [out, x])    # odd: the sign of x, -0.0 too


def vector_log(fg: FunctionGen, x):
    """``log(x)`` of a float32 vector ``x`` as SIMD code (LLVM calls ``logf`` once per lane).

    Cephes' ``logf``: ``x = m * 2**e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` read off the
    exponent bits (denormals scaled by ``2**23`` first), a degree-9 polynomial for
    ``log(m)``, and ``e * ln2`` added in two parts.  ``log(0) = -inf``, ``log(inf) = inf``,
    NaN for negative ``x`` and for NaN.  Within 1 ulp of log in tests/test_promote.py.
    """
    b, n = fg.b, x.type.count
    vty, ity = x.type, ir.VectorType(I32, n)
    f = lambda v: _splat(F32, v, n)                     # noqa: E731
    i32 = lambda v: ir.Constant(ity, [v] * n)            # noqa: E731
    fl = dict(flags=FP_FLAGS)
    den = b.fcmp_ordered("<", x, f(1.1754943508222875e-38))
    xs = b.select(den, b.fmul(x, f(8388608.0)), x)
    bits = b.bitcast(xs, ity)
    e = b.sub(b.and_(b.lshr(bits, i32(23)), i32(0xFF)), b.select(den, i32(126 + 23), i32(126)))
    m = b.bitcast(b.or_(b.and_(bits, i32(0x807FFFFF)), i32(0x3F000000)), vty)     # in [0.5, 1)
    lo = b.fcmp_ordered("<", m, f(0.707106781186547524))
    e = b.sitofp(b.sub(e, b.zext(lo, ity)), vty)
    m = b.fsub(b.select(lo, b.fadd(m, m), m), f(1.0))
    z = b.fmul(m, m, **fl)
    y = f(7.0376836292e-2)
    for c in (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
              -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1):
        y = fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", vty, [y, m, f(c)])
    y = b.fmul(b.fmul(y, m, **fl), z, **fl)
    y = fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", vty, [e, f(-2.12194440e-4), y])
    y = fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", vty, [z, f(-0.5), y])
    out = fg.call_intrinsic(f"llvm.fmuladd.v{n}f32", vty, [e, f(0.693359375), b.fadd(m, y, **fl)])
    out = b.select(b.fcmp_ordered("==", x, f(float("inf"))), x, out)
    out = b.select(b.fcmp_ordered("==", x, f(0.0)), f(float("-inf")), out)
    return b.select(b.fcmp_unordered("<", x, f(0.0)), f(float("nan")), out)     # x < 0 or NaN

