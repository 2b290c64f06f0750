"""Tensor expressions: declare *what* to compute (TVM's ``te`` language).

>>> from tensorir import te
>>> A = te.placeholder((64, 32), "float32", "A")
>>> B = te.placeholder((32, 48), "float32", "B")
>>> k = te.reduce_axis(32, "k")
>>> C = te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")

A workload is the list of its tensors, inputs first then outputs: ``[A, B, C]``.

Semantics that differ from numpy, as in C and TVM: int32 arithmetic that
overflows is undefined (compiled code assumes it does not, so
``(x * 4) // 4`` may simplify to ``x``), and float ``max``/``min`` follow the
CPU's compare-and-select when an operand is NaN (see :func:`max`).
"""
from __future__ import annotations

import enum
import inspect
import math
from dataclasses import dataclass, field

from tensorir.te import expr as E
from tensorir.te.expr import (Binary, BinOp, Const, Expr, ExprError, Select, UnOp, Var,
                   as_expr, cast, const, select)


class TEError(ValueError):
    """A tensor expression was declared wrongly (bad shape, unknown axis, ...)."""


class AxisKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


@dataclass(frozen=True, slots=True)
class IterVar:
    """An axis of a computation: a variable with a constant extent ``[0, extent)``."""
    var: Var
    extent: int
    kind: AxisKind = AxisKind.SPATIAL

    @property
    def name(self) -> str:
        return self.var.name

    def __tensorir_expr__(self) -> Var:
        return self.var

    # arithmetic on an axis works on its variable
    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __rfloordiv__(self, o): return o // self.var
    def __mod__(self, o): return self.var % o
    def __rmod__(self, o): return o % self.var
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o


class Reducer(enum.Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"

    def identity(self, dtype: str) -> Const:
        """The reduction's identity element: 0, or the lowest / highest value of ``dtype``."""
        if self is Reducer.SUM:
            return const(0, dtype)
        big = math.inf if dtype != "int32" else 2 ** 31 - 1
        if self is Reducer.MAX:
            return const(-big if dtype != "int32" else -(2 ** 31), dtype)
        return const(big, dtype)

    def combine(self, acc: Expr, x: Expr) -> Expr:
        """One reduction step: ``acc + x``, ``max(acc, x)`` or ``min(acc, x)``."""
        if self is Reducer.SUM:
            return Binary(BinOp.ADD, acc, x)
        return Binary(BinOp.MAX if self is Reducer.MAX else BinOp.MIN, acc, x)


@dataclass(frozen=True, slots=True, repr=False)
class Reduce(Expr):
    """A reduction of ``source`` over ``axes``; allowed only as a compute's whole body."""
    reducer: Reducer
    source: Expr
    axes: tuple  # tuple[IterVar, ...]

    @property
    def dtype(self) -> str:
        return self.source.dtype

    def sub_exprs(self):
        return (self.source,)

    def __repr__(self):
        return f"Reduce({self.reducer.value}, {self.source!r}, {[a.name for a in self.axes]})"

    def text(self) -> str:
        return f"{self.reducer.value}({E.expr_str(self.source)}, axis=[{', '.join(a.name for a in self.axes)}])"


@dataclass(frozen=True, slots=True, repr=False)
class TensorRead(Expr):
    """``tensor[indices]`` inside a tensor expression."""
    tensor: "Tensor"
    indices: tuple

    _hash: object = field(default=None, init=False, repr=False, compare=False)

    def _key(self):
        return (self.tensor, self.indices,)

    __hash__ = Expr._cached_hash
    __reduce__ = Expr._rebuild

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def sub_exprs(self):
        return self.indices

    def __repr__(self):
        return f"{self.tensor.name}[{', '.join(map(repr, self.indices))}]"

    def text(self) -> str:
        return f"{self.tensor.name}[{', '.join(E.expr_str(i) for i in self.indices)}]"


@dataclass(frozen=True, slots=True)
class PlaceholderOp:
    pass


@dataclass(frozen=True, slots=True)
class ComputeOp:
    axes: tuple           # tuple[IterVar, ...] spatial axes, one per output dimension
    body: Expr            # a Reduce or a plain expression

    @property
    def reduce_axes(self) -> tuple:
        return self.body.axes if isinstance(self.body, Reduce) else ()


@dataclass(frozen=True, eq=False)
class Tensor:
    """A placeholder (input) or computed tensor.  Compared by identity."""
    shape: tuple
    dtype: str
    name: str
    op: PlaceholderOp | ComputeOp = field(repr=False)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def inputs(self) -> tuple:
        """Tensors this one reads directly (in first-read order, unique)."""
        if self.is_placeholder:
            return ()
        seen: dict = {}
        for r in reads(self.op.body):
            seen.setdefault(id(r.tensor), r.tensor)
        return tuple(seen.values())

    def __getitem__(self, indices) -> TensorRead:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TEError(f"tensor {self.name!r} has {self.ndim} dimension(s) {self.shape}, "
                          f"indexed with {len(indices)} index(es)")
        idx = []
        for d, x in enumerate(indices):
            if isinstance(x, slice):
                raise TEError(f"tensor {self.name!r}: slices are not supported in indices (dimension {d})")
            e = as_expr(x)
            if e.dtype != "int32":
                raise TEError(f"tensor {self.name!r}: index {d} must be an integer expression, got {e.dtype}")
            idx.append(e)
        return TensorRead(self, tuple(idx))

    def __repr__(self):
        kind = "placeholder" if self.is_placeholder else "compute"
        return f"Tensor({self.name!r}, {kind}, shape={self.shape}, dtype={self.dtype})"


# -------------------------------------------------------------------- helpers

def _check_shape(shape, what: str) -> tuple:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TEError(f"{what}: shape must be a tuple of positive ints, got {shape!r}") from None
    out = []
    for s in shape:
        if hasattr(s, "__index__") and not isinstance(s, bool):
            s = int(s.__index__())
        else:
            raise TEError(f"{what}: shape must be a tuple of positive ints (static shapes), got {shape!r}")
        if s <= 0:
            raise TEError(f"{what}: every dimension must be positive, got {shape!r}")
        out.append(s)
    return tuple(out)


def _check_dtype(dtype: str, what: str) -> str:
    if dtype not in ("float32", "float64", "int32"):
        raise TEError(f"{what}: unsupported dtype {dtype!r}; expected float32, float64 or int32")
    return dtype


def _check_name(name, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise TEError(f"{what}: name must be a non-empty string, got {name!r}")
    return name


def walk(e: Expr):
    """Yield every node of an expression tree (pre-order)."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(E.children(n)))


def reads(e: Expr) -> list:
    return [n for n in walk(e) if isinstance(n, TensorRead)]


def free_vars(e: Expr) -> set:
    return {n for n in walk(e) if isinstance(n, Var)}


# ------------------------------------------------------------------ public API

def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of a static ``shape``."""
    name = _check_name(name, "placeholder")
    return Tensor(_check_shape(shape, f"placeholder {name!r}"), _check_dtype(dtype, f"placeholder {name!r}"),
                  name, PlaceholderOp())


def reduce_axis(extent, name: str = "k") -> IterVar:
    """A reduction axis ``[0, extent)`` (``extent`` may also be a ``(0, n)`` pair)."""
    if isinstance(extent, (tuple, list)):
        if len(extent) != 2 or extent[0] != 0:
            raise TEError(f"reduce_axis {name!r}: range must start at 0, got {extent!r}")
        extent = extent[1]
    (extent,) = _check_shape((extent,) if not isinstance(extent, (tuple, list)) else extent,
                             f"reduce_axis {name!r}")
    return IterVar(Var(_check_name(name, "reduce_axis")), extent, AxisKind.REDUCE)


def compute(shape, fcompute, name: str = "compute", dtype: str | None = None) -> Tensor:
    """A tensor whose element ``[i, j, ...]`` is ``fcompute(i, j, ...)``.

    The body may be a plain expression or a single reduction (``te.sum``,
    ``te.max``, ``te.min``) over one or more reduce axes.
    """
    name = _check_name(name, "compute")
    shape = _check_shape(shape, f"compute {name!r}")
    try:
        params = [p for p in inspect.signature(fcompute).parameters.values()
                  if p.default is p.empty or p.kind is p.VAR_POSITIONAL]
    except (TypeError, ValueError):
        raise TEError(f"compute {name!r}: fcompute must be a function of the {len(shape)} output indices") from None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        arg_names = [f"i{d}" for d in range(len(shape))]
    else:
        if len(params) != len(shape):
            raise TEError(f"compute {name!r}: shape {shape} has {len(shape)} dimension(s) but fcompute takes "
                          f"{len(params)} argument(s)")
        arg_names = [p.name for p in params]
    if len(set(arg_names)) != len(arg_names):
        arg_names = [f"{a}{d}" for d, a in enumerate(arg_names)]
    axes = tuple(IterVar(Var(a), n) for a, n in zip(arg_names, shape))
    try:
        body = fcompute(*[ax.var for ax in axes])
    except (ExprError, TEError) as err:
        raise TEError(f"compute {name!r}: {err}") from None
    if isinstance(body, Tensor):
        raise TEError(f"compute {name!r}: fcompute returned the tensor {body.name!r}; index it, e.g. {body.name}[i, j]")
    try:
        body = as_expr(body)
    except ExprError as err:
        raise TEError(f"compute {name!r}: fcompute must return an expression: {err}") from None
    if dtype is not None:
        body = _cast_body(body, _check_dtype(dtype, f"compute {name!r}"))
    if body.dtype not in ("float32", "float64", "int32"):
        raise TEError(f"compute {name!r}: body has dtype {body.dtype}; tensors hold float32, float64 or int32 "
                      "(wrap a condition in te.if_then_else)")
    _validate_body(name, axes, body)
    return Tensor(shape, body.dtype, name, ComputeOp(axes, body))


def _cast_body(body: Expr, dtype: str) -> Expr:
    if isinstance(body, Reduce):
        return Reduce(body.reducer, cast(dtype, body.source), body.axes)
    return cast(dtype, body)


def _validate_body(name: str, axes: tuple, body: Expr) -> None:
    raxes = body.axes if isinstance(body, Reduce) else ()
    nested = [n for n in walk(body.source if isinstance(body, Reduce) else body) if isinstance(n, Reduce)]
    if nested:
        raise TEError(f"compute {name!r}: a reduction (te.{nested[0].reducer.value}) must be the whole body of a "
                      "compute; put surrounding arithmetic in a separate compute stage")
    allowed = {ax.var for ax in axes} | {ax.var for ax in raxes}
    for v in free_vars(body):
        if v not in allowed:
            raise TEError(f"compute {name!r}: the body uses axis {v.name!r}, which is neither an index of this "
                          "compute nor one of its reduce axes (did you forget axis=... in te.sum?)")
    spatial_names = {ax.name for ax in axes}
    for ax in raxes:
        if ax.name in spatial_names:
            raise TEError(f"compute {name!r}: reduce axis {ax.name!r} has the same name as an index")


def _reduction(reducer: Reducer, source, axis) -> Reduce:
    if axis is None:
        raise TEError(f"te.{reducer.value} needs axis=<reduce axis or list of them>")
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    if not axes:
        raise TEError(f"te.{reducer.value}: axis list is empty")
    for a in axes:
        if not isinstance(a, IterVar) or a.kind is not AxisKind.REDUCE:
            raise TEError(f"te.{reducer.value}: axis must be made by te.reduce_axis, got {a!r}")
    if len({a.var for a in axes}) != len(axes):
        raise TEError(f"te.{reducer.value}: the same reduce axis is listed twice")
    source = as_expr(source)
    if source.dtype == "bool":
        raise TEError(f"te.{reducer.value}: cannot reduce a boolean; use te.if_then_else(cond, 1, 0)")
    return Reduce(reducer, source, axes)


def sum(source, axis=None) -> Reduce:  # noqa: A001 - mirrors tvm.te.sum
    """Sum reduction of ``source`` over ``axis`` (a reduce axis or a list of them)."""
    return _reduction(Reducer.SUM, source, axis)


def max(a, b=None, axis=None):  # noqa: A001
    """``te.max(x, axis=k)`` is a max-reduction; ``te.max(a, b)`` is elementwise.

    Elementwise, a NaN operand gives NaN in compiled code, as numpy's ``np.maximum`` (and
    :mod:`tensorir.te.evaluate`) and onnxruntime's Relu, Clip and Max do. A compiled
    reduction's step (``acc = max(acc, x)``) stays the CPU's compare-and-select (``maxps``):
    a NaN among the elements may be dropped where ``np.max`` returns NaN. Testing each step
    for NaN made a softmax's row max 1.3x as slow; onnxruntime's ReduceMax and MaxPool skip
    NaNs too.
    """
    if b is not None and axis is None:
        return E.emax(a, b)
    return _reduction(Reducer.MAX, a, axis if axis is not None else b)


def min(a, b=None, axis=None):  # noqa: A001
    """``te.min(x, axis=k)`` is a min-reduction; ``te.min(a, b)`` is elementwise (NaN: see :func:`max`)."""
    if b is not None and axis is None:
        return E.emin(a, b)
    return _reduction(Reducer.MIN, a, axis if axis is not None else b)


def exp(x): return E.unary(UnOp.EXP, x)
def log(x): return E.unary(UnOp.LOG, x)
def sqrt(x): return E.unary(UnOp.SQRT, x)
def tanh(x): return E.unary(UnOp.TANH, x)
def sigmoid(x): return E.unary(UnOp.SIGMOID, x)
def abs(x): return E.unary(UnOp.ABS, x)  # noqa: A001


def if_then_else(cond, t, f) -> Expr:
    """``t`` where ``cond`` holds, else ``f`` (out-of-range reads in the unused branch are safe)."""
    return select(cond, t, f)


def all(*conds) -> Expr:  # noqa: A001
    """Logical and of several conditions."""
    out = as_expr(conds[0])
    for c in conds[1:]:
        out = out & c
    return out


equal = E.equal
not_equal = E.not_equal

__all__ = ["placeholder", "compute", "reduce_axis", "sum", "max", "min", "exp", "log", "sqrt", "tanh",
           "sigmoid", "abs", "if_then_else", "all", "const", "cast", "equal", "not_equal", "Tensor",
           "IterVar", "Reduce", "TensorRead", "TEError", "Expr", "Var", "Const", "Binary", "Select"]
