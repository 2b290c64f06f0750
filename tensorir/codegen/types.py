"""LLVM types, constants and small helpers shared by the code generator's modules."""
from __future__ import annotations

import contextlib
import math

from llvmlite import ir

from tensorir.te.expr import DTYPE_BYTES
from tensorir.tir.ir import Buffer


I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()
LLTYPE = {"float32": F32, "float64": F64, "int32": I32, "bool": I1}
ITEMSIZE = DTYPE_BYTES          # element sizes, which are also the alignments of loads and stores
FP_FLAGS = ("contract",)        # lets LLVM fuse a*b+c into an FMA, nothing else


class CodegenError(ValueError):
    """The loop IR cannot be compiled (unbound variable, type mismatch, ...)."""


def splat(ty, value, lanes: int) -> ir.Constant:
    zero = value == 0 and math.copysign(1.0, value) > 0      # not -0.0
    return ir.Constant(ir.VectorType(ty, lanes), None if zero else [value] * lanes)


def is_scalar_const(v) -> bool:
    return isinstance(v, ir.Constant) and not isinstance(v.type, ir.VectorType)


def strides(buf: Buffer) -> list:
    out, acc = [], 1
    for extent in reversed(buf.shape):
        out.append(acc)
        acc *= extent
    return out[::-1]


@contextlib.contextmanager
def scoped(mapping: dict, key, value):
    """Bind ``mapping[key] = value`` for the duration of a ``with`` block."""
    old = mapping.get(key)
    mapping[key] = value
    yield
    if old is None:
        del mapping[key]
    else:
        mapping[key] = old


def type_suffix(ty) -> str:
    """LLVM intrinsic name mangling for a (vector of) scalar type."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.PointerType):
        return "p0"
    return {F32: "f32", F64: "f64"}.get(ty) or f"i{ty.width}"
