"""What lowering an op to a tensor expression works with: values, storage dtypes, indexing helpers.

A graph value becomes a :class:`Val`: a ``te.Tensor`` (a placeholder or a compute stage) read
through ``val(*indices)``, which returns the value with its *graph* dtype's meaning. Tensor
expressions hold float32, float64 and int32 only, so values are stored in a kernel dtype
(:func:`storage_dtype`): int64 as int32 (indices, shapes), bool as int32 0/1. A rank-0 value is
stored with shape ``(1,)``. Lowering functions build stages with :meth:`Ctx.emit`, which converts
the result to the stage's storage dtype, and may add constant inputs (``Ctx.constant``).

Stage names are canonical per fused group (op kind and position in the group, never a model's
value names), so two structurally identical groups give the same workload, stage names included
(the names tuning traces refer to).
"""
from __future__ import annotations

import numpy as np

from graph.ir import GraphError
from tensorir import te
from tensorir.te.expr import Binary, BinOp, Const

NHWC = "nhwc"
"""A rank-4 value (N, C, H, W) stored as (N, H*W, C), channels innermost: a conv written this way
is a matrix product with the channels as its vector axis; off by default (decision 024)."""


def blocked(block: int) -> str:
    """The blocked layout NCHW[block]c: (N, C, H, W) stored as (N, C/block, H, W, block), the layout
    the convolution rule computes in (oneDNN's nChw16c), kept between convolutions (decision 035)."""
    return f"nchw{block}c"


def block_of(layout) -> int | None:
    """The channel block of a blocked layout (:func:`blocked`), else None."""
    if isinstance(layout, str) and layout.startswith("nchw") and layout.endswith("c") and layout[4:-1].isdigit():
        return int(layout[4:-1])
    return None

STORAGE = {"float32": "float32", "float64": "float64", "int32": "int32", "int64": "int32", "bool": "int32"}
"""Graph dtype -> the tensor-expression dtype its values are stored in."""


class LoweringError(GraphError):
    """An op, attribute or dtype the lowering does not support; one line naming the node."""


def storage_dtype(dtype: str) -> str:
    """The kernel dtype of values of graph dtype ``dtype`` (LoweringError if there is none)."""
    try:
        return STORAGE[np.dtype(dtype).name]
    except KeyError:
        raise LoweringError(f"dtype {dtype} has no kernel dtype (supported: {', '.join(STORAGE)})") from None


def storage_shape(shape: tuple, layout: str | None = None) -> tuple:
    """The shape a value is stored with: rank 0 becomes ``(1,)``; NHWC (N, C, H, W) is (N, H*W, C)."""
    if layout == NHWC:
        n, c, h, w = shape
        return (n, h * w, c)
    b = block_of(layout)
    if b:
        n, c, h, w = shape
        return (n, c // b, h, w, b)
    return tuple(shape) if shape else (1,)


def to_storage(array: np.ndarray, layout: str | None = None) -> np.ndarray:
    """``array`` as its kernel dtype, layout and shape (LoweringError if an int64 value does not fit int32)."""
    a = np.asarray(array)
    dt = storage_dtype(a.dtype.name)
    if a.dtype.name == "int64" and a.size and (a.min() < -2 ** 31 or a.max() >= 2 ** 31):
        raise LoweringError(f"an int64 constant holds {a.min()}..{a.max()}, outside the int32 range kernels use")
    if layout == NHWC:
        a = a.transpose(0, 2, 3, 1)
    b = block_of(layout)
    if b:
        n, c, h, w = a.shape
        a = a.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2)
    return np.ascontiguousarray(a.astype(dt, copy=False).reshape(storage_shape(array.shape, layout)))


def from_storage(array: np.ndarray, dtype: str, shape: tuple, layout: str | None = None) -> np.ndarray:
    """A kernel buffer as the graph value of dtype ``dtype`` and shape ``shape``."""
    if layout == NHWC:
        n, c, h, w = shape
        a = np.asarray(array).reshape(n, h, w, c).transpose(0, 3, 1, 2)
    elif block_of(layout):
        n, c, h, w = shape
        b = block_of(layout)
        a = np.asarray(array).reshape(n, c // b, h, w, b).transpose(0, 1, 4, 2, 3).reshape(shape)
    else:
        a = np.asarray(array).reshape(shape)
    if dtype == "bool":
        return a != 0
    return a.astype(dtype, copy=False)


def _flat(h, w, width: int):
    """The flat index ``h * width + w``; ``j`` itself when ``h, w`` are ``j // width, j % width``."""
    if (isinstance(h, Binary) and isinstance(w, Binary) and h.op is BinOp.FLOORDIV and w.op is BinOp.MOD
            and h.a == w.a and h.b == w.b and isinstance(h.b, Const) and h.b.value == width):
        return h.a
    return h * width + w if width != 1 else h


def split_channel(c, block: int) -> tuple:
    """``(c // block, c % block)``; ``(co, ci)`` themselves when ``c`` is ``co * block + ci`` (the index
    a blocked stage computes its channel from), so a same-layout read stays ``X[n, co, h, w, ci]``."""
    if isinstance(c, Binary) and c.op is BinOp.ADD and isinstance(c.a, Binary) and c.a.op is BinOp.MUL \
            and isinstance(c.a.b, Const) and c.a.b.value == block:
        return c.a.a, c.b
    if block == 1:
        return c, 0
    return c // block, c % block


def join_channel(co, ci, block: int):
    """The channel index ``co * block + ci`` of a blocked index (see :func:`split_channel`)."""
    return co * block + ci


class Val:
    """A graph value inside a workload: its stored tensor, graph dtype and graph shape."""

    def __init__(self, tensor: te.Tensor, dtype: str, shape: tuple, layout: str | None = None):
        self.tensor, self.dtype, self.shape, self.layout = tensor, dtype, tuple(shape), layout

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __call__(self, *idx):
        """The element at ``idx`` (graph rank) with the graph dtype's meaning (bool: a condition)."""
        if len(idx) != self.rank:
            raise LoweringError(f"internal: {self.tensor.name} has rank {self.rank}, indexed with {len(idx)}")
        if self.layout == NHWC:
            n, c, h, w = idx
            idx = (n, _flat(h, w, self.shape[3]), c)
        elif block_of(self.layout):
            n, c, h, w = idx
            co, ci = split_channel(c, block_of(self.layout))
            idx = (n, co, h, w, ci)
        read = self.tensor[tuple(idx) if idx else (0,)]
        return te.not_equal(read, 0) if self.dtype == "bool" else read

    def at(self, out_idx, out_shape: tuple):
        """The element broadcast to an output index (numpy's right-aligned broadcasting)."""
        return self(*broadcast_index(out_idx, self.shape, out_shape))


def broadcast_index(out_idx, shape: tuple, out_shape: tuple) -> list:
    """Indices into a tensor of ``shape`` for an index of ``out_shape`` it broadcasts to: a size-1
    dimension reads 0 where the output's is wider, else the output's own index (so a read of a
    same-shape operand stays ``X[i0, i1, ...]``, which the space recognizes as an epilogue read)."""
    out_idx = list(out_idx)
    lead = len(out_idx) - len(shape)
    return [0 if d == 1 and out_shape[lead + n] != 1 else out_idx[lead + n] for n, d in enumerate(shape)]


def lit(value, dtype: str):
    """A constant of the kernel dtype of graph dtype ``dtype``."""
    return te.const(value, storage_dtype(dtype) if dtype != "bool" else "bool")


class Ctx:
    """The state of lowering one fused group: stage names, extra constant inputs."""

    def __init__(self, graph=None):
        self.graph = graph
        self.counts: dict = {}
        self.constants: list = []          # (placeholder, array) added by lowerings
        self.nhwc_shape = None             # stages of this (N, C, H, W) shape are computed in NHWC
        self.blocked_shape = None          # stages of this (N, C, H, W) shape are computed in
        self.blocked_layout = None         # this blocked layout (the group's output's)

    def constant_value(self, value: str):
        """The array of graph constant ``value``, or None (not a constant, or no graph)."""
        if self.graph is None or not value or value not in self.graph.constants:
            return None
        return self.graph.constants[value]

    def scalar_constant(self, value: str):
        """The single number of a one-element graph constant ``value``, else None."""
        a = self.constant_value(value)
        return None if a is None or a.size != 1 else a.reshape(-1)[0].item()

    def name(self, base: str) -> str:
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return f"{base}{n}"

    def constant(self, array: np.ndarray, base: str = "const") -> Val:
        """A constant input of the workload (e.g. a divisor map), passed by the runtime."""
        a = np.asarray(array)
        stored = to_storage(a)
        ph = te.placeholder(stored.shape, stored.dtype.name, self.name(base))
        self.constants.append((ph, stored))
        return Val(ph, a.dtype.name, a.shape)

    def layout_for(self, shape: tuple):
        """The layout a stage of graph ``shape`` is computed in (that of the group's output)."""
        if self.nhwc_shape is not None and tuple(shape) == self.nhwc_shape:
            return NHWC
        if self.blocked_shape is not None and tuple(shape) == self.blocked_shape:
            return self.blocked_layout
        return None

    def emit(self, shape: tuple, dtype: str, fcompute, base: str, layout="auto") -> Val:
        """A compute stage of graph ``shape`` and ``dtype``: ``fcompute(*idx)`` -> the element.

        The result is converted to the storage dtype (a condition to 1/0, int64 math is int32).
        A rank-0 value is computed with one index that ``fcompute`` does not see. ``layout``: the
        stage's layout (default: the group output's for a stage of its shape, else row-major).
        """
        if any(d == 0 for d in shape):
            raise LoweringError(f"a value of shape {shape} is empty; kernels need non-empty tensors")
        sdt = storage_dtype(dtype)
        if layout == "auto":
            layout = self.layout_for(shape)
        block = block_of(layout)

        def body(*idx):
            if layout == NHWC:      # (n, j, c) -> the graph index (n, c, j // W, j % W)
                n, j, c = idx
                idx = (n, c, j // shape[3], j % shape[3])
            elif block:             # (n, co, h, w, ci) -> (n, co * block + ci, h, w)
                n, co, h, w, ci = idx
                idx = (n, join_channel(co, ci, block), h, w)
            e = fcompute(*(idx if shape else ()))
            if isinstance(e, te.Reduce):
                return e if e.dtype == sdt else te.Reduce(e.reducer, te.cast(sdt, e.source), e.axes)
            e = te.const(e) if isinstance(e, (int, float, bool)) else e
            if e.dtype == "bool":
                return te.if_then_else(e, te.const(1, sdt), te.const(0, sdt))
            return te.cast(sdt, e)
        t = te.compute(storage_shape(shape, layout), body, self.name(base))
        return Val(t, dtype, shape, layout)
