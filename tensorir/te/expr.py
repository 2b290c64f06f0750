"""Scalar expression IR shared by tensor expressions and the loop-nest IR.

Nodes are frozen dataclasses: structural equality and hashing come for free, so
``==`` compares structure (it does *not* build a comparison node; use
:func:`equal` / :func:`not_equal` for that).  Python operators ``+ - * / // %``,
``< <= > >=``, ``&``, ``|`` and ``~`` build new nodes.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

DTYPES = ("float32", "float64", "int32", "bool")
FLOAT_DTYPES = ("float32", "float64")
DTYPE_BYTES = {"float32": 4, "float64": 8, "int32": 4, "bool": 1}   # bytes of one element in memory


def itemsize(dtype: str) -> int:
    """Bytes of one element of ``dtype`` (one of :data:`DTYPES`)."""
    return DTYPE_BYTES[dtype]


class ExprError(TypeError):
    """An expression was built from operands of the wrong kind or type."""


class BinOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"          # true division, floats only
    FLOORDIV = "//"    # floor division, ints only
    MOD = "%"          # floor modulo, ints only
    MIN = "min"
    MAX = "max"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="
    AND = "and"
    OR = "or"


COMPARE_OPS = (BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE)
LOGIC_OPS = (BinOp.AND, BinOp.OR)


class UnOp(enum.Enum):
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    ABS = "abs"
    NOT = "not"


FLOAT_ONLY_UNOPS = (UnOp.EXP, UnOp.LOG, UnOp.SQRT, UnOp.TANH, UnOp.SIGMOID)


# Enum members are singletons: identity hashing is valid and much faster than
# Enum.__hash__ (IR nodes are hashed constantly by the simplifier and the caches).
BinOp.__hash__ = object.__hash__
UnOp.__hash__ = object.__hash__


class Expr:
    """Base class of every scalar expression node (operators build new nodes)."""

    __slots__ = ()

    def _key(self) -> tuple:  # pragma: no cover - overridden by the nodes that cache their hash
        raise NotImplementedError

    def _cached_hash(self) -> int:
        """The hash of a node's fields, computed once: a tree's nodes are hashed again and again by the
        simplifier's and code generation's caches, and a dataclass hash walks the whole subtree each time."""
        h = self._hash
        if h is None:
            h = hash(self._key())
            object.__setattr__(self, "_hash", h)
        return h

    def _rebuild(self):
        """Pickle by the fields alone: a cached hash of strings is only valid in the process that made it."""
        return type(self), self._key()

    @property
    def dtype(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def __add__(self, o): return binary(BinOp.ADD, self, o)
    def __radd__(self, o): return binary(BinOp.ADD, o, self)
    def __sub__(self, o): return binary(BinOp.SUB, self, o)
    def __rsub__(self, o): return binary(BinOp.SUB, o, self)
    def __mul__(self, o): return binary(BinOp.MUL, self, o)
    def __rmul__(self, o): return binary(BinOp.MUL, o, self)
    def __truediv__(self, o): return binary(BinOp.DIV, self, o)
    def __rtruediv__(self, o): return binary(BinOp.DIV, o, self)
    def __floordiv__(self, o): return binary(BinOp.FLOORDIV, self, o)
    def __rfloordiv__(self, o): return binary(BinOp.FLOORDIV, o, self)
    def __mod__(self, o): return binary(BinOp.MOD, self, o)
    def __rmod__(self, o): return binary(BinOp.MOD, o, self)
    def __neg__(self): return binary(BinOp.SUB, const(0, self.dtype), self)
    def __lt__(self, o): return binary(BinOp.LT, self, o)
    def __le__(self, o): return binary(BinOp.LE, self, o)
    def __gt__(self, o): return binary(BinOp.GT, self, o)
    def __ge__(self, o): return binary(BinOp.GE, self, o)
    def __and__(self, o): return binary(BinOp.AND, self, o)
    def __rand__(self, o): return binary(BinOp.AND, o, self)
    def __or__(self, o): return binary(BinOp.OR, self, o)
    def __ror__(self, o): return binary(BinOp.OR, o, self)
    def __invert__(self): return unary(UnOp.NOT, self)

    def astype(self, dtype: str) -> "Expr":
        return cast(dtype, self)

    def __str__(self) -> str:
        return expr_str(self)


@dataclass(frozen=True, slots=True, repr=False)
class Const(Expr):
    value: int | float | bool
    dtype_: str

    @property
    def dtype(self) -> str:
        return self.dtype_

    def __repr__(self):
        return f"Const({self.value!r}, {self.dtype_!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Var(Expr):
    """An integer variable (a loop or axis index); identity is its name."""
    name: str
    dtype_: str = "int32"

    @property
    def dtype(self) -> str:
        return self.dtype_

    def __repr__(self):
        return f"Var({self.name!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Binary(Expr):
    op: BinOp
    a: Expr
    b: Expr

    _hash: object = field(default=None, init=False, repr=False, compare=False)

    def _key(self):
        return (self.op, self.a, self.b,)

    __hash__ = Expr._cached_hash
    __reduce__ = Expr._rebuild

    @property
    def dtype(self) -> str:
        if self.op in COMPARE_OPS or self.op in LOGIC_OPS:
            return "bool"
        return self.a.dtype

    def __repr__(self):
        return f"Binary({self.op.name}, {self.a!r}, {self.b!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Unary(Expr):
    op: UnOp
    a: Expr

    _hash: object = field(default=None, init=False, repr=False, compare=False)

    def _key(self):
        return (self.op, self.a,)

    __hash__ = Expr._cached_hash
    __reduce__ = Expr._rebuild

    @property
    def dtype(self) -> str:
        return "bool" if self.op is UnOp.NOT else self.a.dtype

    def __repr__(self):
        return f"Unary({self.op.name}, {self.a!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Select(Expr):
    """``t if cond else f``; lazy: the loads of the branch not taken are never executed."""
    cond: Expr
    t: Expr
    f: Expr

    _hash: object = field(default=None, init=False, repr=False, compare=False)

    def _key(self):
        return (self.cond, self.t, self.f,)

    __hash__ = Expr._cached_hash
    __reduce__ = Expr._rebuild

    @property
    def dtype(self) -> str:
        return self.t.dtype

    def __repr__(self):
        return f"Select({self.cond!r}, {self.t!r}, {self.f!r})"


@dataclass(frozen=True, slots=True, repr=False)
class Cast(Expr):
    to: str
    a: Expr

    _hash: object = field(default=None, init=False, repr=False, compare=False)

    def _key(self):
        return (self.to, self.a,)

    __hash__ = Expr._cached_hash
    __reduce__ = Expr._rebuild

    @property
    def dtype(self) -> str:
        return self.to

    def __repr__(self):
        return f"Cast({self.to!r}, {self.a!r})"


# ---------------------------------------------------------------- construction

def const(value, dtype: str | None = None) -> Const:
    """A constant; the dtype defaults to int32 for ints, float32 for floats."""
    if isinstance(value, Const):
        return value if dtype in (None, value.dtype) else const(value.value, dtype)
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32"
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise ExprError(f"cannot make a constant from {type(value).__name__} {value!r}")
    if dtype not in DTYPES:
        raise ExprError(f"unsupported dtype {dtype!r}; expected one of {DTYPES}")
    if dtype == "bool":
        value = bool(value)
    elif dtype == "int32":
        if isinstance(value, float) and not value.is_integer():
            raise ExprError(f"constant {value!r} is not an integer but dtype is int32")
        value = int(value)
        if not -(2 ** 31) <= value < 2 ** 31:
            raise ExprError(f"constant {value} does not fit in int32")
    else:
        value = float(value)
    return Const(value, dtype)


def as_expr(x, like: str | None = None) -> Expr:
    """Convert a Python number (or an Expr) to an Expr; numbers adopt dtype ``like``."""
    if hasattr(x, "__tensorir_expr__"):
        return x.__tensorir_expr__()
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, int, float)):
        if like is not None and like != "bool" and not isinstance(x, bool):
            if like == "int32" and isinstance(x, float) and not float(x).is_integer():
                return const(x)  # float literal with an int expr: promoted below
            return const(x, like)
        return const(x)
    try:  # numpy scalars
        import numpy as np
        if isinstance(x, np.generic):
            return const(x.item(), str(x.dtype) if str(x.dtype) in DTYPES else None)
    except ImportError:  # pragma: no cover
        pass
    raise ExprError(f"cannot use {type(x).__name__} {x!r} in a tensor expression")


def _promote(a: Expr, b: Expr) -> tuple[Expr, Expr]:
    if a.dtype == b.dtype:
        return a, b
    da, db = a.dtype, b.dtype
    if da == "bool" or db == "bool":
        raise ExprError(f"cannot combine a boolean with a {db if da == 'bool' else da} value")
    if "float64" in (da, db):
        target = "float64"
    else:
        target = "float32"
    return (a if da == target else cast(target, a)), (b if db == target else cast(target, b))


def _unwrap(x):
    return x.__tensorir_expr__() if hasattr(x, "__tensorir_expr__") else x


def binary(op: BinOp, a, b) -> Expr:
    a, b = _unwrap(a), _unwrap(b)
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = as_expr(a)
    if isinstance(a, Expr):
        b = as_expr(b, a.dtype)
        a = as_expr(a)
    else:
        a = as_expr(a, b.dtype)
    if op in LOGIC_OPS:
        if a.dtype != "bool" or b.dtype != "bool":
            raise ExprError(f"'{op.value}' needs boolean operands (comparisons), got {a.dtype} and {b.dtype}")
        return Binary(op, a, b)
    if "bool" in (a.dtype, b.dtype) and op not in (BinOp.EQ, BinOp.NE):
        raise ExprError(f"'{op.value}' on a boolean (a comparison result): use te.if_then_else(cond, 1, 0) "
                        "to turn a condition into a number")
    a, b = _promote(a, b)
    if op is BinOp.DIV and a.dtype not in FLOAT_DTYPES:
        raise ExprError("'/' on integers is ambiguous: use '//' (floor division) or cast to a float dtype")
    if op in (BinOp.FLOORDIV, BinOp.MOD) and a.dtype in FLOAT_DTYPES:
        raise ExprError(f"'{op.value}' is defined for integers only, got {a.dtype}")
    return Binary(op, a, b)


def unary(op: UnOp, a) -> Expr:
    a = as_expr(a)
    if op in FLOAT_ONLY_UNOPS and a.dtype not in FLOAT_DTYPES:
        raise ExprError(f"{op.value}() needs a float argument, got {a.dtype} (cast it first)")
    if op is UnOp.NOT and a.dtype != "bool":
        raise ExprError(f"'~' (not) needs a boolean operand, got {a.dtype}")
    return Unary(op, a)


def cast(dtype: str, a) -> Expr:
    if dtype not in DTYPES:
        raise ExprError(f"unsupported dtype {dtype!r}; expected one of {DTYPES}")
    a = as_expr(a)
    if a.dtype == dtype:
        return a
    if isinstance(a, Const):
        v = a.value
        if dtype == "int32":
            v = int(math.trunc(v))
        return const(v, dtype)
    return Cast(dtype, a)


def select(cond, t, f) -> Expr:
    cond, t, f = as_expr(cond), _unwrap(t), _unwrap(f)
    if cond.dtype != "bool":
        raise ExprError(f"if_then_else condition must be boolean (a comparison), got {cond.dtype}")
    if isinstance(t, Expr) or not isinstance(f, Expr):
        t = as_expr(t)
        f = as_expr(f, t.dtype)
    else:
        f = as_expr(f)
        t = as_expr(t, f.dtype)
    t, f = _promote(t, f)
    return Select(cond, t, f)


def equal(a, b) -> Expr:
    return binary(BinOp.EQ, a, b)


def not_equal(a, b) -> Expr:
    return binary(BinOp.NE, a, b)


def emax(a, b) -> Expr:
    return binary(BinOp.MAX, a, b)


def emin(a, b) -> Expr:
    return binary(BinOp.MIN, a, b)


def children(e: Expr) -> tuple:
    """Direct sub-expressions of a node (generic traversal helper)."""
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    sub = getattr(e, "sub_exprs", None)
    return sub() if sub else ()


# ---------------------------------------------------------------- printing

_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.LT: 3, BinOp.LE: 3, BinOp.GT: 3, BinOp.GE: 3,
         BinOp.EQ: 3, BinOp.NE: 3, BinOp.ADD: 4, BinOp.SUB: 4, BinOp.MUL: 5, BinOp.DIV: 5,
         BinOp.FLOORDIV: 5, BinOp.MOD: 5}


def expr_str(e, prec: int = 0) -> str:
    if isinstance(e, Const):
        if e.dtype in ("float32", "float64") and e.value in (float("inf"), float("-inf")):
            return "-inf" if e.value < 0 else "inf"
        if e.dtype == "float32":
            return f"{e.value!r}f"
        return repr(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Binary):
        if e.op in (BinOp.MIN, BinOp.MAX):
            return f"{e.op.value}({expr_str(e.a)}, {expr_str(e.b)})"
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op.value} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, Unary):
        if e.op is UnOp.NOT:
            return f"not {expr_str(e.a, 6)}"
        return f"{e.op.value}({expr_str(e.a)})"
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, Cast):
        return f"{e.to}({expr_str(e.a)})"
    if hasattr(e, "text"):          # nodes defined above this module (tensor reads, reductions, loop-IR loads) print themselves
        return e.text()
    return repr(e)
