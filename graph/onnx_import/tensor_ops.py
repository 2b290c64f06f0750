"""Converters of data movement, shape plumbing, reductions and the ops that vanish at import
(Identity, Dropout, Constant). Attribute-like inputs (shapes, axes, bounds) are read as import-time
constants; values computable from static shapes (Shape, ConstantOfShape, Range) are folded."""
from __future__ import annotations

import math

import numpy as np
from onnx import helper, numpy_helper

from graph.onnx_import.nn_ops import axis_of
from graph.onnx_import.registry import converter
from graph.ops.elementwise import DTYPES


def _ints(array) -> list:
    return [int(v) for v in np.asarray(array).reshape(-1)]


def _raw_axes(ctx, node, index: int, attr: str = "axes"):
    """Axes from the attribute (older opsets) or the input ``index``; None when neither is given."""
    if attr in node.attrs:
        return list(node.attrs[attr])
    if node.input(index):
        return _ints(ctx.const(node, node.input(index), attr))
    return None


def _axes(ctx, node, rank: int, index: int):
    """The node's axes made non-negative for ``rank``; None when it has none."""
    raw = _raw_axes(ctx, node, index)
    if raw is None:
        return None
    axes = [axis_of(node, a, rank) for a in raw]
    if len(set(axes)) != len(axes):
        raise node.error(f"axes {raw} repeat an axis")
    return axes


def _cast_to(value):
    return None if helper.tensor_dtype_to_np_dtype(value).name in DTYPES else \
        f"is not supported (supported: {', '.join(DTYPES)})"


def _cast_check(value):
    try:
        return _cast_to(value)
    except (KeyError, TypeError, ValueError):
        return "is not a supported element type"


# ------------------------------------------------------------------ vanishing ops

@converter("Identity")
def _identity(ctx, node):
    ctx.alias(node.outputs[0], node.input(0))


@converter("Dropout", attrs={"seed": None})
def _dropout(ctx, node):
    # inference: the ratio does not matter, training_mode must be (constant) false
    if node.input(2) and bool(np.any(ctx.const(node, node.input(2), "training_mode"))):
        raise node.error("training_mode=true is not supported (inference only)")
    ctx.alias(node.outputs[0], node.input(0))
    if node.output(1):
        ctx.set_known(node.output(1), np.ones(ctx.type(node.input(0)).shape, bool))


def _tensor_type_check(value):
    """An attribute check for a TensorProto value: its element type must be one the graph holds."""
    if _cast_check(value.data_type) is None:
        return None
    return f"has the element type {helper.tensor_dtype_to_string(value.data_type)} (supported: {', '.join(DTYPES)})"


@converter("Constant", attrs={"value": _tensor_type_check, "value_float": None, "value_floats": None,
                              "value_int": None, "value_ints": None})
def _constant(ctx, node):
    if len(node.attrs) != 1:
        raise node.error("needs exactly one value attribute")
    (key, value), = node.attrs.items()
    if key == "value":
        array = numpy_helper.to_array(value)
    else:
        array = np.asarray(value, np.float32 if "float" in key else np.int64)
    ctx.set_known(node.outputs[0], array)


# ------------------------------------------------------------------ shape plumbing (folded)

@converter("Shape", attrs={"start": None, "end": None})
def _shape(ctx, node):
    shape = ctx.type(node.input(0)).shape
    start, end = node.attr("start", 0), node.attr("end", len(shape))
    ctx.set_known(node.outputs[0], np.array(shape[start:end], np.int64))


@converter("Size")
def _size(ctx, node):
    ctx.set_known(node.outputs[0], np.array(ctx.type(node.input(0)).size, np.int64))


@converter("ConstantOfShape", attrs={"value": _tensor_type_check})
def _constant_of_shape(ctx, node):
    shape = _ints(ctx.const(node, node.input(0), "shape"))
    value = numpy_helper.to_array(node.attrs["value"]) if "value" in node.attrs else np.zeros(1, np.float32)
    ctx.set_known(node.outputs[0], np.full(shape, value.reshape(-1)[0], value.dtype))


@converter("Range")
def _range(ctx, node):
    start, limit, delta = (ctx.const(node, node.input(i), k) for i, k in enumerate(("start", "limit", "delta")))
    ctx.set_known(node.outputs[0], np.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype))


# ------------------------------------------------------------------ reshapes

def _reshape_to(ctx, node, shape) -> None:
    ctx.emit(node, "Reshape", [node.input(0)], node.outputs[0], shape=tuple(int(d) for d in shape))


@converter("Reshape", attrs={"allowzero": None})
def _reshape(ctx, node):
    x = ctx.type(node.input(0))
    spec = _ints(ctx.const(node, node.input(1), "shape"))
    if not node.attr("allowzero", 0):
        spec = [x.shape[i] if d == 0 and i < x.rank else d for i, d in enumerate(spec)]
    if spec.count(-1) > 1 or any(d < -1 for d in spec):
        raise node.error(f"shape {spec} has more than one -1 or a negative dimension")
    if -1 in spec:
        rest = math.prod(d for d in spec if d != -1)
        if rest == 0 or x.size % rest:
            raise node.error(f"cannot reshape {x.shape} to {spec}")
        spec[spec.index(-1)] = x.size // rest
    _reshape_to(ctx, node, spec)


@converter("Flatten", attrs={"axis": None})
def _flatten(ctx, node):
    shape = ctx.type(node.input(0)).shape
    axis = node.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise node.error(f"axis {node.attr('axis')} is out of range for rank {len(shape)}")
    _reshape_to(ctx, node, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@converter("Squeeze", attrs={"axes": None})
def _squeeze(ctx, node):
    shape = ctx.type(node.input(0)).shape
    axes = _axes(ctx, node, len(shape), 1)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    if any(shape[a] != 1 for a in axes):
        raise node.error(f"cannot squeeze axes {axes} of shape {shape}: not all have size 1")
    _reshape_to(ctx, node, [d for i, d in enumerate(shape) if i not in axes])


@converter("Unsqueeze", attrs={"axes": None})
def _unsqueeze(ctx, node):
    shape = list(ctx.type(node.input(0)).shape)
    raw = _raw_axes(ctx, node, 1)
    if raw is None:
        raise node.error("axes are required")
    axes = _axes(ctx, node, len(shape) + len(raw), 1)
    for a in sorted(axes):
        shape.insert(a, 1)
    _reshape_to(ctx, node, shape)


# ------------------------------------------------------------------ data movement

@converter("Transpose", attrs={"perm": None})
def _transpose(ctx, node):
    rank = ctx.type(node.input(0)).rank
    perm = tuple(node.attr("perm", range(rank - 1, -1, -1)))
    ctx.emit(node, "Transpose", [node.input(0)], node.outputs[0], perm=perm)


@converter("Concat", attrs={"axis": None})
def _concat(ctx, node):
    rank = ctx.type(node.input(0)).rank
    ctx.emit(node, "Concat", node.inputs, node.outputs[0], axis=axis_of(node, node.attrs["axis"], rank))


@converter("Slice")
def _slice(ctx, node):
    shape = ctx.type(node.input(0)).shape
    starts = _ints(ctx.const(node, node.input(1), "starts"))
    ends = _ints(ctx.const(node, node.input(2), "ends"))
    axes = _axes(ctx, node, len(shape), 3) or list(range(len(starts)))
    steps = _ints(ctx.const(node, node.input(4), "steps")) if node.input(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        raise node.error("starts, ends, axes and steps must have one entry per axis, steps non-zero")
    norm = {}
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = shape[a]
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        norm[a] = (s, e, st)
    order = sorted(norm)
    ctx.emit(node, "Slice", [node.input(0)], node.outputs[0], starts=tuple(norm[a][0] for a in order),
             ends=tuple(norm[a][1] for a in order), axes=tuple(order), steps=tuple(norm[a][2] for a in order))


@converter("Gather", attrs={"axis": None})
def _gather(ctx, node):
    shape = ctx.type(node.input(0)).shape
    axis = axis_of(node, node.attr("axis", 0), len(shape))
    indices = node.input(1)
    if ctx.is_known(indices):
        idx = ctx.known[indices]
        if idx.size and (idx.min() < -shape[axis] or idx.max() >= shape[axis]):
            raise node.error(f"an index is out of range for axis {axis} of size {shape[axis]}")
        if idx.size and idx.min() < 0:
            # the canonical Gather reads constant indices non-negative
            indices = ctx.fresh(f"{indices}/nonneg")
            ctx.set_known(indices, np.where(idx < 0, idx + shape[axis], idx).astype(idx.dtype))
    ctx.emit(node, "Gather", [node.input(0), indices], node.outputs[0], axis=axis)


@converter("Expand")
def _expand(ctx, node):
    x = ctx.type(node.input(0))
    spec = tuple(_ints(ctx.const(node, node.input(1), "shape")))
    try:
        shape = tuple(np.broadcast_shapes(x.shape, spec))
    except ValueError:
        raise node.error(f"{x.shape} does not broadcast with {spec}") from None
    ctx.emit(node, "Expand", [node.input(0)], node.outputs[0], shape=shape)


@converter("Cast", attrs={"to": _cast_check, "saturate": None})
def _cast(ctx, node):
    # saturate only changes casts to float8 types, which `to` refuses
    to = helper.tensor_dtype_to_np_dtype(node.attrs["to"]).name
    ctx.emit(node, "Cast", [node.input(0)], node.outputs[0], to=to)


# ------------------------------------------------------------------ reductions

@converter("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceSumSquare", attrs={"axes": None, "keepdims": None, "noop_with_empty_axes": None})
def _reduce(ctx, node):
    rank = ctx.type(node.input(0)).rank
    axes = _axes(ctx, node, rank, 1)
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            ctx.alias(node.outputs[0], node.input(0))
            return
        axes = range(rank)
    ctx.emit(node, node.op_type, [node.input(0)], node.outputs[0], axes=tuple(sorted(axes)),
             keepdims=int(node.attr("keepdims", 1)))
