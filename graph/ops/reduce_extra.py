"""More reductions (Pattern.REDUCE): ReduceMin, ReduceProd, ReduceL1, ReduceL2, ReduceSumSquare
(``axes``/``keepdims`` as for ReduceSum), ArgMax, ArgMin (axis >= 0, keepdims, select_last_index;
int64 indices) and TopK.

ONNX's two-output TopK is imported as one single-output ``TopK`` node per output it uses:
``output=0`` gives the k values, ``output=1`` their int64 indices, both sorted (largest first, or
smallest first with ``largest=0``; equal values by increasing index, as ONNX specifies).
"""
from __future__ import annotations

import numpy as np

from graph.ir import TensorType
from graph.ops.reduce import reducer
from graph.ops.registry import REQUIRED, OpDef, OpError, Pattern, get_op, register


def _reduce_infer(node, types):
    # the same checks and output shape as the core reductions
    (out,) = get_op("ReduceSum").infer(node, types)
    x = types[0]
    if node.op in ("ReduceMin", "ReduceProd") and any(x.shape[a] == 0 for a in node.attr("axes")):
        raise OpError(f"node {node.name} ({node.op}): axis of size 0 in {x.shape}")
    if node.op == "ReduceL2" and x.dtype[0] != "f":
        raise OpError(f"node {node.name} (ReduceL2): needs a float input, got {x.dtype}")
    return [out]



REDUCTIONS = {
    "ReduceMin": (np.min, "minimum"),
    "ReduceProd": (np.prod, "product"),
    "ReduceL1": (lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims), "sum of |x|"),
    "ReduceL2": (lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)),
                 "square root of the sum of x^2"),
    "ReduceSumSquare": (lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims), "sum of x^2"),
}

for _kind, (_fn, _doc) in REDUCTIONS.items():
    register(OpDef(_kind, ("data",), _reduce_infer, reducer(_fn), Pattern.REDUCE,
                   {"axes": REQUIRED, "keepdims": 1}, doc=f"{_doc} over `axes`"))


def _arg_infer(node, types):
    x = types[0]
    axis, keepdims, last = node.attr("axis"), node.attr("keepdims", 1), node.attr("select_last_index", 0)
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < x.rank:
        raise OpError(f"node {node.name} ({node.op}): axis {axis!r} is not in [0, {x.rank})")
    if keepdims not in (0, 1) or last not in (0, 1):
        raise OpError(f"node {node.name} ({node.op}): keepdims and select_last_index must be 0 or 1")
    if x.dtype == "bool" or x.shape[axis] == 0:
        raise OpError(f"node {node.name} ({node.op}): needs a numeric input with a non-empty axis {axis}, "
                      f"got {x.dtype}{list(x.shape)}")
    shape = x.shape[:axis] + ((1,) if keepdims else ()) + x.shape[axis + 1:]
    return [TensorType(shape, "int64")]


def _arg_eval(node, arrays):
    x = arrays[0]
    axis = node.attr("axis")
    pick = np.argmax if node.op == "ArgMax" else np.argmin
    if node.attr("select_last_index", 0):
        n = x.shape[axis]
        out = n - 1 - pick(np.flip(x, axis=axis), axis=axis)
    else:
        out = pick(x, axis=axis)
    if node.attr("keepdims", 1):
        out = np.expand_dims(out, axis)
    return [np.asarray(out, np.int64)]


for _kind, _doc in (("ArgMax", "largest"), ("ArgMin", "smallest")):
    register(OpDef(_kind, ("data",), _arg_infer, _arg_eval, Pattern.REDUCE,
                   {"axis": REQUIRED, "keepdims": 1, "select_last_index": 0},
                   doc=f"index (int64) of the {_doc} element along `axis`, the first one unless "
                       "select_last_index"))


def _topk_infer(node, types):
    x = types[0]
    axis, k = node.attr("axis"), node.attr("k")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < x.rank:
        raise OpError(f"node {node.name} (TopK): axis {axis!r} is not in [0, {x.rank})")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= x.shape[axis]:
        raise OpError(f"node {node.name} (TopK): k={k!r} must be in [1, {x.shape[axis]}]")
    if node.attr("largest", 1) not in (0, 1) or node.attr("output", 0) not in (0, 1) or x.dtype == "bool":
        raise OpError(f"node {node.name} (TopK): needs a numeric input, largest and output in (0, 1)")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [TensorType(shape, x.dtype if node.attr("output", 0) == 0 else "int64")]


def _topk_eval(node, arrays):
    x = arrays[0]
    axis, k = node.attr("axis"), node.attr("k")
    key = -x if node.attr("largest", 1) else x
    if x.dtype.kind == "u":
        key = np.iinfo(x.dtype).max - x if node.attr("largest", 1) else x
    order = np.take(np.argsort(key, axis=axis, kind="stable"), np.arange(k), axis=axis)
    if node.attr("output", 0) == 1:
        return [order.astype(np.int64)]
    return [np.take_along_axis(x, order, axis=axis)]


register(OpDef("TopK", ("X",), _topk_infer, _topk_eval, Pattern.REDUCE,
               {"axis": REQUIRED, "k": REQUIRED, "largest": 1, "output": 0},
               doc="the k largest (smallest) elements along `axis`, sorted: their values (output=0) or "
                   "int64 indices (output=1)"))
