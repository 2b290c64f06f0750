"""The ``vector_chunks`` pass: SIMD loops of a width that is not a power of two, cut into native-width pieces.

A VECTORIZED loop that code generation emits as SIMD code (:func:`tensorir.tir.ir.is_simd_loop`)
becomes one LLVM vector of ``extent`` lanes.  A power of two is split into registers by LLVM, but
any other width is legalized element by element (a ``<48 x float>`` is many times slower), so such
a loop becomes a sequence of loops over the same variable: ``native``-lane pieces, then
power-of-two remainders, each body reading the variable shifted by the piece's offset::

    for j in range(48):  # vectorized          for j in range(16):  # vectorized
      B[j] = A[j]                        ->      B[j] = A[j]
                                               for j in range(16):  # vectorized
                                                 B[j + 16] = A[j + 16]
                                               for j in range(16):  # vectorized
                                                 B[j + 32] = A[j + 32]

A last piece of one lane is a single-iteration loop (plain scalar code).

A power-of-two loop wider than the target's vectors whose body is masked (a guard, or a select
whose lanes code generation masks) is cut into ``native``-lane pieces as well: LLVM 22's x86
backend miscompiles masked loads it has to split itself (an AVX-512-width schedule on an AVX2
host: a half whose mask is all off became a plain load of the memory it must not read, and a
max pool's padding took the next row's values).  Pieces of the native width are never split.
"""
from __future__ import annotations

from tensorir.te.expr import Binary, BinOp, Const, Select, Var, children
from tensorir.tir.ir import Allocate, For, IfThenElse, PrimFunc, Seq, Store, is_simd_loop, walk_stmts
from tensorir.tir.rewrite import rewrite_stmt, substitute


def native_lanes(target) -> int:
    """The piece width for ``target``: its 32-bit lanes per vector register (at least 4)."""
    return max(4, target.lanes32)


def chunk_vectors(func: PrimFunc, native: int) -> PrimFunc:
    """The ``vector_chunks`` pass with ``native``-lane pieces; returns ``func`` itself when no loop is cut."""
    body = _chunk(func.body, native)
    return func if body is func.body else PrimFunc(func.name, func.params, body)


def vector_chunks(extent: int, native: int, masked: bool = False) -> list:
    """``[(offset, lanes)]`` covering ``range(extent)`` with vector widths LLVM handles well.

    A power-of-two extent stays one vector (LLVM splits it into registers);
    any other is cut into ``native``-lane pieces plus power-of-two remainders
    (48 -> 16+16+16, 58 -> 16+16+16+8+2): LLVM legalizes a ``<48 x float>``
    into element-by-element inserts, many times slower.  A ``masked`` loop is cut
    into ``native``-lane pieces also when its extent is a power of two.
    """
    if extent & (extent - 1) == 0 and not (masked and extent > native):
        return [(0, extent)]
    out, off = [], 0
    while extent - off >= native:
        out.append((off, native))
        off += native
    while off < extent:
        lanes = 1 << ((extent - off).bit_length() - 1)
        out.append((off, lanes))
        off += lanes
    return out


def masked_body(body) -> bool:
    """Whether a SIMD loop's ``body`` computes under a lane mask: a guard or a select."""
    for s in walk_stmts(body):
        if isinstance(s, IfThenElse):
            return True
        if isinstance(s, Store):
            stack = [s.value, *s.indices]
            while stack:
                e = stack.pop()
                if isinstance(e, Select):
                    return True
                stack.extend(children(e))
    return False


def shift_var(body, var: Var, off: int):
    """``body`` with ``var`` replaced by ``var + off``."""
    shifted = {var: Binary(BinOp.ADD, var, Const(off, "int32"))}
    return rewrite_stmt(body, lambda e: substitute(e, shifted))


def _chunk(s, native: int):
    if isinstance(s, For):
        if is_simd_loop(s):
            pieces = vector_chunks(s.extent, native, s.extent > native and masked_body(s.body))
            if len(pieces) == 1:
                return s
            return Seq(tuple(For(s.var, lanes, s.kind, s.body if off == 0 else shift_var(s.body, s.var, off))
                             for off, lanes in pieces))
        body = _chunk(s.body, native)
        return s if body is s.body else For(s.var, s.extent, s.kind, body)
    if isinstance(s, Seq):
        stmts = tuple(_chunk(c, native) for c in s.stmts)
        return s if all(a is b for a, b in zip(stmts, s.stmts)) else Seq(stmts)
    if isinstance(s, IfThenElse):
        then = _chunk(s.then, native)
        other = None if s.otherwise is None else _chunk(s.otherwise, native)
        return s if then is s.then and other is s.otherwise else IfThenElse(s.cond, then, other, s.skip)
    if isinstance(s, Allocate):
        body = _chunk(s.body, native)
        return s if body is s.body else Allocate(s.buffer, body)
    return s
