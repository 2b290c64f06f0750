"""Minimal definitions of op kinds the graph-pass tests need that may not be registered yet.

Each is registered under its canonical name (GRAPH.md) only when no real definition exists,
so the importer's definitions win once they are merged.
"""
from __future__ import annotations

import math

import numpy as np

import graph.ops  # noqa: F401  (the real registrations first)
from graph.ir import TensorType
from graph.ops.registry import OpDef, OpError, Pattern, all_ops, register


def _reshape_infer(node, types):
    shape = tuple(node.attr("shape"))
    if math.prod(shape) != types[0].size:
        raise OpError(f"node {node.name} (Reshape): cannot reshape {types[0].shape} to {shape}")
    return [TensorType(shape, types[0].dtype)]


def _transpose_infer(node, types):
    perm = tuple(node.attr("perm"))
    if sorted(perm) != list(range(types[0].rank)):
        raise OpError(f"node {node.name} (Transpose): perm {perm} for rank {types[0].rank}")
    return [TensorType(tuple(types[0].shape[p] for p in perm), types[0].dtype)]


def _reduce_mean_infer(node, types):
    axes, keep = tuple(node.attr("axes")), node.attr("keepdims", 1)
    shape = tuple((1 if keep else None) if i in axes else d for i, d in enumerate(types[0].shape))
    return [TensorType(tuple(d for d in shape if d is not None), types[0].dtype)]


_DEFS = [
    OpDef("Reshape", ("data",), _reshape_infer,
          lambda node, a: [a[0].reshape(node.attr("shape"))], Pattern.INJECTIVE, {"shape": ()}),
    OpDef("Transpose", ("data",), _transpose_infer,
          lambda node, a: [np.transpose(a[0], node.attr("perm"))], Pattern.INJECTIVE, {"perm": ()}),
    OpDef("ReduceMean", ("data",), _reduce_mean_infer,
          lambda node, a: [np.mean(a[0], axis=tuple(node.attr("axes")), keepdims=bool(node.attr("keepdims", 1)))
                           .astype(a[0].dtype)],
          Pattern.REDUCE, {"axes": (), "keepdims": 1}),
    OpDef("Cast", ("input",), lambda node, t: [TensorType(t[0].shape, node.attr("to"))],
          lambda node, a: [a[0].astype(node.attr("to"))], Pattern.INJECTIVE, {"to": "float32"}),
]

for _op in _DEFS:
    if _op.kind not in all_ops():
        register(_op)


def _expand_infer(node, types):
    shape = tuple(node.attr("shape"))
    try:
        out = tuple(np.broadcast_shapes(types[0].shape, shape))
    except ValueError:
        raise OpError(f"node {node.name} (Expand): {types[0].shape} does not broadcast to {shape}") from None
    return [TensorType(out, types[0].dtype)]


if "Expand" not in all_ops():
    register(OpDef("Expand", ("input",), _expand_infer,
                   lambda node, a: [np.broadcast_to(a[0], np.broadcast_shapes(a[0].shape, node.attr("shape")))],
                   Pattern.INJECTIVE, {"shape": ()}))
