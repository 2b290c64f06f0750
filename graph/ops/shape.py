"""Data movement (Pattern.INJECTIVE): Transpose, Reshape, Concat, Slice, Gather, Expand.

Their shape-like arguments are static attributes, normalized by the importer: Reshape and
Expand carry the final output shape (no 0 or -1), axes are non-negative, Slice's bounds are
clamped into the dimension.
"""
from __future__ import annotations

import math

import numpy as np

from graph.ir import TensorType
from graph.ops.registry import REQUIRED, OpDef, OpError, Pattern, register, same_type


def _fail(node, message: str):
    raise OpError(f"node {node.name} ({node.op}): {message}")


def _axis(node, axis, rank: int, what: str = "axis") -> int:
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < rank:
        _fail(node, f"{what} {axis!r} is not in [0, {rank}) (axes are normalized to non-negative ints)")
    return axis


def _int_tuple(node, key: str) -> tuple:
    value = node.attr(key)
    if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool)
                                               for v in value):
        _fail(node, f"{key} must be a tuple of ints, got {value!r}")
    return value


# ------------------------------------------------------------------ Transpose

def _transpose_infer(node, types):
    x = types[0]
    perm = _int_tuple(node, "perm")
    if sorted(perm) != list(range(x.rank)):
        _fail(node, f"perm {perm} is not a permutation of the {x.rank} axes of {x.shape}")
    return [same_type(x, shape=tuple(x.shape[p] for p in perm))]


register(OpDef("Transpose", ("data",), _transpose_infer,
               lambda node, a: [np.ascontiguousarray(np.transpose(a[0], node.attr("perm")))],
               Pattern.INJECTIVE, {"perm": REQUIRED}, doc="axes permuted: out.shape[i] = in.shape[perm[i]]"))


# ------------------------------------------------------------------ Reshape

def _reshape_infer(node, types):
    x = types[0]
    shape = _int_tuple(node, "shape")
    if any(d < 0 for d in shape) or math.prod(shape) != x.size:
        _fail(node, f"cannot reshape {x.shape} ({x.size} elements) to {shape} (the final shape, no 0 or -1)")
    return [same_type(x, shape=shape)]


register(OpDef("Reshape", ("data",), _reshape_infer,
               lambda node, a: [np.reshape(a[0], node.attr("shape"))], Pattern.INJECTIVE,
               {"shape": REQUIRED}, doc="row-major reshape to the static `shape`"))


# ------------------------------------------------------------------ Concat

def _concat_infer(node, types):
    first = types[0]
    axis = _axis(node, node.attr("axis"), first.rank)
    total = 0
    for t in types:
        if t.dtype != first.dtype:
            _fail(node, f"inputs have different dtypes ({first.dtype}, {t.dtype})")
        if t.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape))
                                       if i != axis):
            _fail(node, f"shapes {first.shape} and {t.shape} differ off axis {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [same_type(first, shape=tuple(shape))]


register(OpDef("Concat", ("inputs*",), _concat_infer,
               lambda node, a: [np.concatenate(a, axis=node.attr("axis"))], Pattern.INJECTIVE,
               {"axis": REQUIRED}, doc="inputs joined along `axis`"))


# ------------------------------------------------------------------ Slice

def slice_length(start: int, end: int, step: int) -> int:
    """Elements of ``range(start, end, step)`` (normalized bounds: end may be -1 for step < 0)."""
    return len(range(start, end, step))


def _slice_infer(node, types):
    x = types[0]
    starts, ends, axes, steps = (_int_tuple(node, k) for k in ("starts", "ends", "axes", "steps"))
    if not len(starts) == len(ends) == len(axes) == len(steps):
        _fail(node, "starts, ends, axes and steps differ in length")
    if len(set(axes)) != len(axes):
        _fail(node, f"axes {axes} repeat an axis")
    shape = list(x.shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = x.shape[_axis(node, a, x.rank)]
        lo_end = -1 if st < 0 else 0
        if st == 0 or not (0 <= s <= d and lo_end <= e <= d):
            _fail(node, f"bounds start={s} end={e} step={st} on axis {a} (size {d}) are not normalized "
                        "(0 <= start <= size, -1 <= end <= size with -1 only for negative steps, step != 0)")
        shape[a] = slice_length(s, e, st)
    return [same_type(x, shape=tuple(shape))]


def _slice_eval(node, arrays):
    index = [slice(None)] * arrays[0].ndim
    for s, e, a, st in zip(*(node.attr(k) for k in ("starts", "ends", "axes", "steps"))):
        index[a] = slice(s, None if e < 0 else e, st)    # end -1 with a negative step: through index 0
    return [np.ascontiguousarray(arrays[0][tuple(index)])]


register(OpDef("Slice", ("data",), _slice_infer, _slice_eval, Pattern.INJECTIVE,
               {"starts": REQUIRED, "ends": REQUIRED, "axes": REQUIRED, "steps": REQUIRED},
               doc="range(start, end, step) along each axis; bounds clamped into the dimension"))


# ------------------------------------------------------------------ Gather

def _gather_infer(node, types):
    data, indices = types
    axis = _axis(node, node.attr("axis", 0), data.rank)
    if indices.dtype not in ("int32", "int64"):
        _fail(node, f"indices must be int32 or int64, got {indices.dtype}")
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
    return [TensorType(shape, data.dtype)]


def _gather_eval(node, arrays):
    data, indices = arrays
    axis = node.attr("axis", 0)
    n = data.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        _fail(node, f"an index is out of range for axis {axis} of size {n}")
    return [np.take(data, indices.astype(np.int64), axis=axis)]


register(OpDef("Gather", ("data", "indices"), _gather_infer, _gather_eval, Pattern.INJECTIVE,
               {"axis": 0}, doc="np.take(data, indices, axis); negative indices count from the end"))


# ------------------------------------------------------------------ Expand

def _expand_infer(node, types):
    x = types[0]
    shape = _int_tuple(node, "shape")
    try:
        ok = tuple(np.broadcast_shapes(x.shape, shape)) == shape
    except ValueError:
        ok = False
    if not ok:
        _fail(node, f"{x.shape} does not broadcast to {shape} (the final shape)")
    return [same_type(x, shape=shape)]


register(OpDef("Expand", ("input",), _expand_infer,
               lambda node, a: [np.ascontiguousarray(np.broadcast_to(a[0], node.attr("shape")))],
               Pattern.INJECTIVE, {"shape": REQUIRED}, doc="input broadcast to the static `shape`"))
