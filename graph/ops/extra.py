"""More ONNX compute ops: Max, Min, PRelu, LessOrEqual, GreaterOrEqual, And, Or, Xor, Mod
(Pattern.BROADCAST), Not and Trilu (Pattern.ELEMWISE), Pad, Tile and GatherElements
(Pattern.INJECTIVE), LRN (Pattern.REDUCE:
a window sum across channels), LogSoftmax and CumSum (Pattern.REDUCE).

ONNX's variadic Sum, Mean, Max and Min are imported as chains of the binary Add, Max, Min (and a
Div for Mean); Split becomes one Slice per output.
"""
from __future__ import annotations

import numpy as np

from graph.ir import TensorType
from graph.ops.elementwise import broadcast_shape
from graph.ops.registry import REQUIRED, OpDef, OpError, Pattern, register, same_type


def _fail(node, message: str):
    raise OpError(f"node {node.name} ({node.op}): {message}")


def _ints(node, key: str, length: int | None = None) -> tuple:
    value = node.attr(key)
    if not isinstance(value, tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        _fail(node, f"{key} must be a tuple of ints, got {value!r}")
    if length is not None and len(value) != length:
        _fail(node, f"{key} {value} must have {length} entries")
    return value


# ------------------------------------------------------------------ Max, Min, PRelu

def _minmax_infer(node, types):
    a, b = types
    if a.dtype != b.dtype:
        _fail(node, f"inputs have different dtypes ({a.dtype}, {b.dtype})")
    if a.dtype == "bool":
        _fail(node, "needs numeric inputs, got bool")
    return [TensorType(broadcast_shape(node, a.shape, b.shape), a.dtype)]


register(OpDef("Max", ("A", "B"), _minmax_infer, lambda node, a: [np.maximum(a[0], a[1])], Pattern.BROADCAST,
               doc="elementwise maximum, broadcasting (ONNX's variadic Max is a chain of these)"))
register(OpDef("Min", ("A", "B"), _minmax_infer, lambda node, a: [np.minimum(a[0], a[1])], Pattern.BROADCAST,
               doc="elementwise minimum, broadcasting (ONNX's variadic Min is a chain of these)"))


def _prelu_infer(node, types):
    x, slope = types
    if x.dtype != slope.dtype or x.dtype[0] != "f":
        _fail(node, f"needs float X and slope of one dtype, got {x.dtype} and {slope.dtype}")
    if broadcast_shape(node, x.shape, slope.shape) != x.shape:
        _fail(node, f"slope {slope.shape} does not broadcast to X {x.shape}")
    return [same_type(x)]


register(OpDef("PRelu", ("X", "slope"), _prelu_infer,
               lambda node, a: [np.where(a[0] < 0, a[1] * a[0], a[0]).astype(a[0].dtype)], Pattern.BROADCAST,
               doc="x, slope * x below 0 (slope broadcast to x)"))


# ------------------------------------------------------------------ comparisons and logic

def _compare_infer(node, types):
    a, b = types
    if a.dtype != b.dtype:
        _fail(node, f"inputs have different dtypes ({a.dtype}, {b.dtype})")
    if node.op in ("And", "Or", "Xor") and a.dtype != "bool":
        _fail(node, f"needs bool inputs, got {a.dtype}")
    return [TensorType(broadcast_shape(node, a.shape, b.shape), "bool")]


for _kind, _fn in (("LessOrEqual", np.less_equal), ("GreaterOrEqual", np.greater_equal), ("And", np.logical_and),
                   ("Or", np.logical_or), ("Xor", np.logical_xor)):
    register(OpDef(_kind, ("A", "B"), _compare_infer, lambda node, a, fn=_fn: [np.asarray(fn(a[0], a[1]))],
                   Pattern.BROADCAST, doc=f"bool {_fn.__name__}, broadcasting"))


def _not_infer(node, types):
    if types[0].dtype != "bool":
        _fail(node, f"needs a bool input, got {types[0].dtype}")
    return [same_type(types[0])]


register(OpDef("Not", ("X",), _not_infer, lambda node, a: [np.logical_not(a[0])], Pattern.ELEMWISE,
               doc="logical not"))


def _mod_infer(node, types):
    (out,) = _minmax_infer(node, types)
    if node.attr("fmod", 0) not in (0, 1) or (out.dtype[0] == "f" and not node.attr("fmod", 0)):
        _fail(node, f"fmod must be 0 or 1, and 1 for floats (ONNX), got {node.attr('fmod', 0)!r} on {out.dtype}")
    return [out]


def _mod_eval(node, arrays):
    a, b = arrays
    with np.errstate(divide="ignore", invalid="ignore"):
        return [np.asarray(np.fmod(a, b) if node.attr("fmod", 0) else np.mod(a, b)).astype(a.dtype)]


register(OpDef("Mod", ("A", "B"), _mod_infer, _mod_eval, Pattern.BROADCAST, {"fmod": 0},
               doc="remainder: with the divisor's sign (fmod=0, integers) or the dividend's (fmod=1)"))


# ------------------------------------------------------------------ Trilu

def _trilu_infer(node, types):
    x = types[0]
    if x.rank < 2 or node.attr("upper", 1) not in (0, 1) or isinstance(node.attr("k", 0), bool) or \
            not isinstance(node.attr("k", 0), int):
        _fail(node, f"needs rank >= 2, upper in (0, 1) and an int k, got {list(x.shape)}, {dict(node.attrs)}")
    return [same_type(x)]


def _trilu_eval(node, arrays):
    x = arrays[0]
    fn = np.triu if node.attr("upper", 1) else np.tril
    return [np.ascontiguousarray(fn(x, node.attr("k", 0)))]


register(OpDef("Trilu", ("input",), _trilu_infer, _trilu_eval, Pattern.ELEMWISE, {"upper": 1, "k": 0},
               doc="the upper (or lower) triangle of the last two axes from diagonal k, zeros elsewhere"))


# ------------------------------------------------------------------ LogSoftmax

def _log_softmax_eval(node, arrays):
    x = arrays[0]
    axis = node.attr("axis")
    d = x.astype(np.float64) - np.max(x, axis=axis, keepdims=True)
    return [(d - np.log(np.exp(d).sum(axis=axis, keepdims=True))).astype(x.dtype)]


def _log_softmax_infer(node, types):
    x, axis = types[0], node.attr("axis")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < x.rank:
        _fail(node, f"axis {axis!r} is not in [0, {x.rank})")
    if x.dtype[0] != "f":
        _fail(node, f"needs a float input, got {x.dtype}")
    return [same_type(x)]


register(OpDef("LogSoftmax", ("input",), _log_softmax_infer, _log_softmax_eval,
               Pattern.REDUCE, {"axis": REQUIRED}, doc="x - max - log(sum(exp(x - max))) along `axis` (ONNX 13)"))


# ------------------------------------------------------------------ Pad

PAD_MODES = ("constant", "reflect", "edge")


def _pad_infer(node, types):
    x = types[0]
    pads = _ints(node, "pads", 2 * x.rank)
    mode = node.attr("mode", "constant")
    if mode not in PAD_MODES:
        _fail(node, f"mode {mode!r} is not one of {', '.join(PAD_MODES)}")
    value = node.attr("value", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(node, f"value must be a number, got {value!r}")
    shape = []
    for d, lo, hi in zip(x.shape, pads[:x.rank], pads[x.rank:]):
        if mode != "constant" and (min(lo, hi) < 0 or (max(lo, hi) > 0 and d == 0)):
            _fail(node, f"{mode} padding needs non-negative pads and non-empty dimensions, got pads {pads} "
                        f"on {x.shape}")
        if mode == "reflect" and max(lo, hi) > d - 1:
            _fail(node, f"reflect pads {pads} must be smaller than the dimensions {x.shape}")
        if d + lo + hi < 0:
            _fail(node, f"pads {pads} crop more than the dimensions {x.shape}")
        shape.append(d + lo + hi)
    return [same_type(x, shape=tuple(shape))]


def _pad_eval(node, arrays):
    x = arrays[0]
    rank = x.ndim
    pads = node.attr("pads")
    lo, hi = pads[:rank], pads[rank:]
    # negative pads crop first (constant mode only)
    x = x[tuple(slice(max(0, -a), d - max(0, -b)) for d, a, b in zip(x.shape, lo, hi))]
    width = [(max(0, a), max(0, b)) for a, b in zip(lo, hi)]
    mode = node.attr("mode", "constant")
    if mode == "constant":
        return [np.pad(x, width, constant_values=np.asarray(node.attr("value", 0.0)).astype(x.dtype))]
    return [np.pad(x, width, mode=mode)]


register(OpDef("Pad", ("data",), _pad_infer, _pad_eval, Pattern.INJECTIVE,
               {"pads": REQUIRED, "mode": "constant", "value": 0.0},
               doc="pads (begins of every axis, then ends; negative crops) filled by mode: constant `value`, "
                   "reflect, edge"))


# ------------------------------------------------------------------ GatherElements

def _gather_elements_infer(node, types):
    data, indices = types
    axis = node.attr("axis", 0)
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < data.rank:
        _fail(node, f"axis {axis!r} is not in [0, {data.rank})")
    if indices.dtype not in ("int32", "int64") or indices.rank != data.rank:
        _fail(node, f"indices must be int32/int64 of the data's rank, got {indices.dtype}{list(indices.shape)}")
    if any(i > d for n, (i, d) in enumerate(zip(indices.shape, data.shape)) if n != axis):
        _fail(node, f"indices {indices.shape} exceed the data {data.shape} off axis {axis}")
    return [TensorType(indices.shape, data.dtype)]


def _gather_elements_eval(node, arrays):
    data, indices = arrays
    axis, n = node.attr("axis", 0), data.shape[node.attr("axis", 0)]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        _fail(node, f"an index is out of range for axis {axis} of size {n}")
    idx = np.where(indices < 0, indices + n, indices).astype(np.int64)
    lead = data[tuple(slice(0, d) if k != axis else slice(None) for k, d in enumerate(indices.shape))]
    return [np.take_along_axis(lead, idx, axis=axis)]


register(OpDef("GatherElements", ("data", "indices"), _gather_elements_infer, _gather_elements_eval,
               Pattern.INJECTIVE, {"axis": 0},
               doc="out[i] = data[i with the axis index replaced by indices[i]] (negative counts from the end)"))


# ------------------------------------------------------------------ Tile

def _tile_infer(node, types):
    x = types[0]
    repeats = _ints(node, "repeats", x.rank)
    if any(r < 0 for r in repeats):
        _fail(node, f"repeats {repeats} must be non-negative")
    return [same_type(x, shape=tuple(d * r for d, r in zip(x.shape, repeats)))]


register(OpDef("Tile", ("input",), _tile_infer, lambda node, a: [np.tile(a[0], node.attr("repeats"))],
               Pattern.INJECTIVE, {"repeats": REQUIRED}, doc="input repeated `repeats` times along each axis"))


# ------------------------------------------------------------------ LRN

def lrn_window(size: int) -> tuple:
    """Channels before and after each channel in an LRN window of ``size`` (ONNX's floor/ceil split)."""
    return (size - 1) // 2, size - 1 - (size - 1) // 2


def _lrn_infer(node, types):
    x = types[0]
    size = node.attr("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        _fail(node, f"size must be a positive int, got {size!r}")
    if x.rank < 3 or x.dtype[0] != "f":
        _fail(node, f"needs float N x C x spatial data, got {x.dtype}{list(x.shape)}")
    return [same_type(x)]


def _lrn_eval(node, arrays):
    x = arrays[0]
    size = node.attr("size")
    alpha, beta, bias = (float(node.attr(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    before, after = lrn_window(size)
    sq = np.square(x.astype(np.float64))
    padded = np.pad(sq, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    total = sum(padded[:, i:i + c] for i in range(size))
    return [(x / (bias + alpha / size * total) ** beta).astype(x.dtype)]


register(OpDef("LRN", ("X",), _lrn_infer, _lrn_eval, Pattern.REDUCE,
               {"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
               doc="x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ^ beta"))


# ------------------------------------------------------------------ CumSum

def _cumsum_infer(node, types):
    x, axis = types[0], node.attr("axis")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < max(x.rank, 1):
        _fail(node, f"axis {axis!r} is not in [0, {x.rank})")
    if x.dtype == "bool" or node.attr("exclusive", 0) not in (0, 1) or node.attr("reverse", 0) not in (0, 1):
        _fail(node, f"needs a numeric input and exclusive, reverse in (0, 1), got {x.dtype}")
    return [same_type(x)]


def _cumsum_eval(node, arrays):
    x = arrays[0]
    axis = node.attr("axis")
    acc = x.astype(np.float64) if x.dtype.kind == "f" else x
    if node.attr("reverse", 0):
        acc = np.flip(acc, axis)
    out = np.cumsum(acc, axis=axis)
    if node.attr("exclusive", 0):
        out = out - acc
    if node.attr("reverse", 0):
        out = np.flip(out, axis)
    return [np.ascontiguousarray(out).astype(x.dtype)]


register(OpDef("CumSum", ("x",), _cumsum_infer, _cumsum_eval, Pattern.REDUCE,
               {"axis": REQUIRED, "exclusive": 0, "reverse": 0},
               doc="running sum along `axis` (exclusive: without the element itself; reverse: from the end)"))
