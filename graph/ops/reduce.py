"""Reductions (Pattern.REDUCE): ReduceMean, ReduceSum, ReduceMax over static axes, and Softmax.

``axes`` is a sorted tuple of distinct non-negative axes (the importer resolves ONNX's default
of every axis and its axes-as-input form); ``()`` reduces nothing.
"""
from __future__ import annotations

import numpy as np

from graph.ops.registry import REQUIRED, OpDef, OpError, Pattern, register, same_type


def _reduce_infer(node, types):
    x = types[0]
    axes = node.attr("axes")
    keepdims = node.attr("keepdims", 1)
    if (not isinstance(axes, tuple) or any(isinstance(a, bool) or not isinstance(a, int) for a in axes)
            or list(axes) != sorted(set(axes)) or any(not 0 <= a < x.rank for a in axes)):
        raise OpError(f"node {node.name} ({node.op}): axes {axes!r} must be sorted distinct axes in "
                      f"[0, {x.rank})")
    if keepdims not in (0, 1):
        raise OpError(f"node {node.name} ({node.op}): keepdims must be 0 or 1, got {keepdims!r}")
    if x.dtype == "bool":
        raise OpError(f"node {node.name} ({node.op}): cannot reduce a bool tensor")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keepdims else \
        tuple(d for i, d in enumerate(x.shape) if i not in axes)
    if node.op == "ReduceMax" and any(x.shape[a] == 0 for a in axes):
        raise OpError(f"node {node.name} (ReduceMax): axis of size 0 in {x.shape}")
    return [same_type(x, shape=shape)]


def reducer(fn):
    """``evaluate`` of a reduction ``fn(array, axis, keepdims)`` (float64 accumulation, input dtype out)."""
    def evaluate(node, arrays):
        x = arrays[0]
        # accumulate in float64 like a careful kernel would; the result has the input's dtype
        acc = x.astype(np.float64) if x.dtype.kind == "f" else x
        out = fn(acc, axis=node.attr("axes"), keepdims=bool(node.attr("keepdims", 1)))
        return [np.asarray(out).astype(x.dtype)]
    return evaluate


for _kind, _fn, _doc in (("ReduceMean", np.mean, "mean"), ("ReduceSum", np.sum, "sum"),
                         ("ReduceMax", np.max, "maximum")):
    register(OpDef(_kind, ("data",), _reduce_infer, reducer(_fn), Pattern.REDUCE,
                   {"axes": REQUIRED, "keepdims": 1}, doc=f"{_doc} over `axes`"))


def _softmax_infer(node, types):
    x = types[0]
    axis = node.attr("axis")
    if isinstance(axis, bool) or not isinstance(axis, int) or not 0 <= axis < x.rank:
        raise OpError(f"node {node.name} (Softmax): axis {axis!r} is not in [0, {x.rank})")
    if x.dtype[0] != "f":
        raise OpError(f"node {node.name} (Softmax): needs a float input, got {x.dtype}")
    return [same_type(x)]


def _softmax_eval(node, arrays):
    x = arrays[0]
    axis = node.attr("axis")
    e = np.exp(x.astype(np.float64) - np.max(x, axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)]


register(OpDef("Softmax", ("input",), _softmax_infer, _softmax_eval, Pattern.REDUCE, {"axis": REQUIRED},
               doc="exp(x - max) / sum(exp(x - max)) along `axis` (ONNX 13 semantics)"))
