"""Test-only stand-ins for the normalization op kinds while ``graph.ops.normalization`` (owned by
the graph-passes work) is not there: registered only for kinds the registry lacks."""
from __future__ import annotations

import math

import numpy as np

from graph.ops.registry import OpDef, Pattern, all_ops, register, same_type


def _batchnorm(node, arrays):
    x, scale, b, mean, var = (a.astype(np.float64) for a in arrays)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    eps = node.attr("epsilon", 1e-5)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + b.reshape(shape)
    return [y.astype(arrays[0].dtype)]


def _layernorm(node, arrays):
    x, scale, b = (list(arrays) + [None])[:3]
    axes = tuple(range(node.attr("axis", -1), x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + node.attr("epsilon", 1e-5)) * scale
    return [(y if b is None else y + b).astype(x.dtype)]


def _gelu(node, arrays):
    x = arrays[0].astype(np.float64)
    if node.attr("approximate", "none") == "tanh":
        y = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    else:
        y = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return [y.astype(arrays[0].dtype)]


def ensure_normalization_ops() -> None:
    """Make BatchNormalization, LayerNormalization and Gelu available to the importer's tests."""
    try:
        import graph.ops.normalization  # noqa: F401
    except ImportError:
        pass
    have = all_ops()
    infer = lambda node, types: [same_type(types[0])]
    for op in (OpDef("BatchNormalization", ("X", "scale", "B", "mean", "var"), infer, _batchnorm,
                     Pattern.BROADCAST, {"epsilon": 1e-5}),
               OpDef("LayerNormalization", ("X", "Scale", "B?"), infer, _layernorm, Pattern.REDUCE,
                     {"axis": -1, "epsilon": 1e-5}),
               OpDef("Gelu", ("X",), infer, _gelu, Pattern.ELEMWISE, {"approximate": "none"})):
        if op.kind not in have:
            register(op)
