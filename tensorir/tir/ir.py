"""Loop-nest IR: what a schedule lowers to and what codegen consumes.

Every node is a frozen dataclass, so a whole lowered function is hashable and
comparable structurally (the kernel cache keys on it).  Loops always run from 0
to a constant extent; tails and partial tiles are expressed with ``IfThenElse``
guards.  Buffers are dense, row-major, and indexed with one index per dimension.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tensorir.te.expr import Expr, Var, expr_str, itemsize


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

    _hash: object = field(default=None, init=False, repr=False, compare=False)

    def _key(self):
        return (self.buffer, self.indices,)

    __hash__ = Expr._cached_hash
    __reduce__ = Expr._rebuild

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
    """``if cond: then else: otherwise``.  ``skip``: the branch only skips work that would change nothing
    (a convolution's taps that read only zero padding, :mod:`schedules.skip`); running ``then``
    regardless would leave the same state, so a pass may treat what it writes as written
    unconditionally (register promotion does)."""
    cond: Expr
    then: Stmt
    otherwise: Stmt | None = None
    skip: bool = False


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    stmts: tuple


@dataclass(frozen=True, slots=True)
class Prefetch(Stmt):
    """A hint to bring the cache line holding the byte ``offset`` bytes past ``buffer[indices]``
    into the data cache (``llvm.prefetch``, a read).

    It never faults, so the address may lie anywhere: indices past the buffer's extents (they
    are flattened row-major like a load's) or an offset past its end are allowed.  It is not a
    memory access: code generation neither checks nor guards it, and analyses that decide
    correctness (register promotion, bounds checks) ignore it.  ``locality`` is LLVM's: 3 keeps
    the line in every level (``prefetcht0``), 0 in none (``prefetchnta``).
    """
    buffer: Buffer
    indices: tuple
    offset: int = 0          # bytes past buffer[indices]
    locality: int = 3


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


# ---------------------------------------------------------------- printing (Halide's print_loop_nest style)

def stmt_lines(s, indent: int = 0) -> list:
    pad = "  " * indent
    if isinstance(s, Seq):
        out = []
        for c in s.stmts:
            out.extend(stmt_lines(c, indent))
        return out
    if isinstance(s, For):
        tag = "" if s.kind is ForKind.SERIAL else f"  # {s.kind.value}"
        return [f"{pad}for {s.var.name} in range({s.extent}):{tag}"] + stmt_lines(s.body, indent + 1)
    if isinstance(s, IfThenElse):
        out = [f"{pad}if {expr_str(s.cond)}:{'  # skip' if s.skip else ''}"] + stmt_lines(s.then, indent + 1)
        if s.otherwise is not None:
            out += [f"{pad}else:"] + stmt_lines(s.otherwise, indent + 1)
        return out
    if isinstance(s, Allocate):
        b = s.buffer
        return [f"{pad}{b.name} = alloc_{b.scope.value}({list(b.shape)}, {b.dtype})"] + stmt_lines(s.body, indent)
    if isinstance(s, Store):
        return [f"{pad}{s.buffer.name}[{', '.join(expr_str(i) for i in s.indices)}] = {expr_str(s.value)}"]
    if isinstance(s, Prefetch):
        where = f"{s.buffer.name}[{', '.join(expr_str(i) for i in s.indices)}]"
        if s.offset:
            where += f" + {s.offset} bytes"
        tag = "" if s.locality == 3 else f", locality={s.locality}"
        return [f"{pad}prefetch({where}{tag})"]
    return [f"{pad}{s!r}"]


def stmt_str(s) -> str:
    return "\n".join(stmt_lines(s))


def func_str(f) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.params)
    return "\n".join([f"def {f.name}({params}):"] + stmt_lines(f.body, 1))
def is_simd_loop(s: Stmt) -> bool:
    """Whether code generation emits ``s`` as SIMD code: a VECTORIZED loop of 2 to
    :data:`MAX_SIMD_LANES` lanes whose body holds only unrolled (or single-iteration) loops.
    Other VECTORIZED loops run as serial loops."""
    return (isinstance(s, For) and s.kind is ForKind.VECTORIZED and 1 < s.extent <= MAX_SIMD_LANES
            and all(not isinstance(x, For) or x.kind is ForKind.UNROLLED or x.extent <= 1
                    for x in walk_stmts(s.body)))
