"""SIMD math for float32 vectors: exp, tanh and log as Cephes polynomials instead of one libm call per lane."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir

from tensorir.codegen.types import F32, FP_FLAGS, I32, splat

if TYPE_CHECKING:
    from tensorir.codegen.function import FunctionGen


def vector_exp(fg: FunctionGen, x):
    """``exp(x)`` of a float32 vector ``x`` as a SIMD polynomial.

    LLVM lowers ``llvm.exp`` on a vector to one ``expf`` call per lane.  Here ``x = k*ln2 + r``
    with ``|r| <= ln2/2`` (``k`` rounded by adding 1.5 * 2**23, whose low bits then hold it),
    ``exp(r) - 1 = r + r**2 * q(r)`` with ``q`` a degree-4 fit (relative error 0.07 ulp), and
    ``2**k`` built in the exponent bits as two factors so results down to the smallest denormal
    are right.  No selects: ``x`` is clamped to ``[-110, 89]``, where ``2**k`` overflows to inf
    or underflows to 0 by itself, and the clamp keeps a NaN (both compares are false for it).
    Few operations and few live constants matter: an epilogue evaluates several vectors at once
    and the compiler keeps their chains in 16 registers on AVX2 (why:
    docs/decisions/067-simd-exp-fewer-operations.md).  Within 1 ulp of exp in tests/test_promote.py.
    """
    b, n = fg.b, x.type.count
    vty, ity = x.type, ir.VectorType(I32, n)
    f = lambda v: splat(F32, v, n)                     # noqa: E731
    i32 = lambda v: ir.Constant(ity, [v] * n)            # noqa: E731
    fma = lambda a, m, c: fg.call_intrinsic(f"llvm.fma.v{n}f32", vty, [a, m, c])   # noqa: E731
    hi, lo = f(89.0), f(-110.0)
    xc = b.select(b.fcmp_ordered("<", hi, x), hi, x)
    xc = b.select(b.fcmp_ordered(">", lo, xc), lo, xc)
    magic = f(12582912.0)                  # no fast-math flags here: t - magic must not fold away
    t = fma(xc, f(1.44269504088896341), magic)
    k = b.sub(b.bitcast(t, ity), i32(0x4B400000))           # in [-159, 129]
    fx = b.fsub(t, magic)
    r = fma(fx, f(-0.693359375), xc)                         # ln2 in two parts: r stays exact
    r = fma(fx, f(2.12194440e-4), r)
    q = f(float.fromhex("0x1.6a2256p-10"))
    for c in ("0x1.123b02p-7", "0x1.5558f8p-5", "0x1.555490p-3", "0x1.fffffcp-2"):
        q = fma(q, r, f(float.fromhex(c)))
    y = fma(q, b.fmul(r, r), r)                              # exp(r) - 1
    k1 = b.ashr(k, i32(1))                                   # 2**k = 2**k1 * 2**(k - k1), both normal
    s1 = b.bitcast(b.add(b.shl(k1, i32(23)), i32(0x3F800000)), vty)
    s2 = b.bitcast(b.add(b.shl(b.sub(k, k1), i32(23)), i32(0x3F800000)), vty)
    return b.fmul(fma(y, s1, s1), s2)


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

