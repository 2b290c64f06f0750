"""SIMD math for float32 vectors: exp, tanh and log as Cephes polynomials instead of one libm call per lane."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from tensorir.codegen.types import F32, FP_FLAGS, I32, splat

if TYPE_CHECKING:
    from tensorir.codegen.function import FunctionGen


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
    f = lambda v: splat(F32, v, n)                     # noqa: E731
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

    LLVM lowers ``llvm.tanh`` on a vector to one ``tanhf`` call per lane, several times slower
    than numpy's SIMD tanh (why: docs/decisions/018-simd-tanh-log-exp.md).  This is Cephes' ``tanhf``: an odd
    polynomial below ``|x| = 0.625``, else ``1 - 2 / (exp(2|x|) + 1)`` (:func:`vector_exp`),
    each lane taking its branch by a select, then the sign of ``x``.  ``exp`` overflows to inf
    for large ``|x|``, which gives exactly 1; NaN stays NaN and -0.0 stays -0.0.  Within 2 ulp of
    tanh in tests/test_promote.py (which allows 3).
    """
    b, n = fg.b, x.type.count
    f = lambda v: splat(F32, v, n)                     # noqa: E731
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
    f = lambda v: splat(F32, v, n)                     # noqa: E731
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

