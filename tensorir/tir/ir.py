"""Loop-nest IR: what a schedule lowers to and what codegen consumes.

Every node is a frozen dataclass, so a whole lowered function is hashable and
comparable structurally (the kernel cache keys on it).  Loops always run from 0
to a constant extent; tails and partial tiles are expressed with ``IfThenElse``
guards.  Buffers are dense, row-major, and indexed with one index per dimension.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from tensorir.te.expr import Expr, Var, itemsize
from tensorir.te.printer import expr_str


class Scope(enum.Enum):
    PARAM = "param"      # a kernel argument (input or output array)
    GLOBAL = "global"    # an intermediate allocated once per kernel call (heap)
    LOCAL = "local"      # a small per-thread scratch buffer (stack when small)


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    shape: tuple
    dtype: str
    scope: Scope = Scope.PARAM

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.size * itemsize(self.dtype)


@dataclass(frozen=True, slots=True, repr=False)
class Load(Expr):
    buffer: Buffer
    indices: tuple

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    def sub_exprs(self):
        return self.indices

    def __repr__(self):
        return f"Load({self.buffer.name}, {self.indices!r})"

    def text(self) -> str:
        return f"{self.buffer.name}[{', '.join(expr_str(i) for i in self.indices)}]"


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"        # iterations split across threads (static chunks)
    VECTORIZED = "vectorized"    # one SIMD instruction per statement, lanes = extent (see is_simd_loop)
    UNROLLED = "unrolled"        # body emitted `extent` times


# Code generation emits a VECTORIZED loop of at most this many lanes as SIMD code; wider ones run
# serially (LLVM's legalization of very wide vectors is slow).  Schedules stay far below it: the
# widest loop a schedule may vectorize is schedules.lowering.checks.MAX_VECTOR_LANES.
MAX_SIMD_LANES = 256


class Stmt:
    __slots__ = ()

    def __str__(self) -> str:
        from tensorir.tir.printer import stmt_str
        return stmt_str(self)


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr


@dataclass(frozen=True, slots=True)
class For(Stmt):
    var: Var
    extent: int
    kind: ForKind
    body: Stmt


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    otherwise: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    stmts: tuple


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """``buffer`` (scope GLOBAL or LOCAL) exists for the duration of ``body``."""
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class PrimFunc:
    """A lowered kernel: ``params`` are the workload tensors in order."""
    name: str
    params: tuple   # tuple[Buffer, ...], scope PARAM
    body: Stmt

    def __str__(self) -> str:
        from tensorir.tir.printer import func_str
        return func_str(self)


def seq(*stmts) -> Stmt:
    """Flatten nested sequences; a single statement stays itself."""
    out = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            out.extend(s.stmts)
        else:
            out.append(s)
    if len(out) == 1:
        return out[0]
    return Seq(tuple(out))


def stmt_children(s: Stmt) -> tuple:
    if isinstance(s, (For, Allocate)):
        return (s.body,)
    if isinstance(s, IfThenElse):
        return (s.then,) if s.otherwise is None else (s.then, s.otherwise)
    if isinstance(s, Seq):
        return s.stmts
    return ()


def walk_stmts(s: Stmt):
    stack = [s]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(stmt_children(n)))


def is_simd_loop(s: Stmt) -> bool:
    """Whether code generation emits ``s`` as SIMD code: a VECTORIZED loop of 2 to
    :data:`MAX_SIMD_LANES` lanes whose body holds only unrolled (or single-iteration) loops.
    Other VECTORIZED loops run as serial loops."""
    return (isinstance(s, For) and s.kind is ForKind.VECTORIZED and 1 < s.extent <= MAX_SIMD_LANES
            and all(not isinstance(x, For) or x.kind is ForKind.UNROLLED or x.extent <= 1
                    for x in walk_stmts(s.body)))
