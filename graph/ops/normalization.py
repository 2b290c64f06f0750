"""Normalization ops: BatchNormalization (inference), LayerNormalization and Gelu, with ONNX's semantics.

The importer creates them from the ONNX ops of the same names; the graph passes also create
them when they fold a BatchNormalization away (not here) or recognize the decomposed forms
older exporters emit (``x * 0.5 * (1 + Erf(x / sqrt(2)))`` and the ReduceMean chain of a
layer norm). Reference semantics are computed in float64 and returned in the input's dtype.
"""
from __future__ import annotations

import math

import numpy as np

from graph.ir import TensorType
from graph.ops.elementwise import UNARY
from graph.ops.registry import REQUIRED, OpDef, OpError, Pattern, register, same_type


def _float_input(node, t: TensorType, what: str) -> None:
    if np.dtype(t.dtype).kind != "f":
        raise OpError(f"node {node.name} ({node.op}): {what} must be floating point, got {t.dtype}")


# ------------------------------------------------------------------ BatchNormalization

def _bn_infer(node, types):
    x, *params = types
    _float_input(node, x, "X")
    if x.rank < 2:
        raise OpError(f"node {node.name} (BatchNormalization): X must have rank >= 2 (N, C, ...), "
                      f"got {x.shape}")
    c = x.shape[1]
    for name, t in zip(("scale", "B", "mean", "var"), params):
        if t.shape != (c,):
            raise OpError(f"node {node.name} (BatchNormalization): {name} has shape {t.shape}, expected "
                          f"{(c,)} (X has {c} channels)")
        if t.dtype != x.dtype:
            raise OpError(f"node {node.name} (BatchNormalization): {name} is {t.dtype}, X is {x.dtype}")
    return [same_type(x)]


def batchnorm_reference(x, scale, bias, mean, var, epsilon=1e-5):
    """Inference batch normalization over axis 1: ``(x - mean) / sqrt(var + eps) * scale + bias``."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    f = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + epsilon)
    out = (x.astype(np.float64) - np.reshape(mean, shape)) * f.reshape(shape) + np.reshape(bias, shape)
    return out.astype(x.dtype)


def _bn_eval(node, arrays):
    return [batchnorm_reference(*arrays, epsilon=node.attr("epsilon", 1e-5))]


register(OpDef("BatchNormalization", ("X", "scale", "B", "mean", "var"), _bn_infer, _bn_eval,
               Pattern.BROADCAST, {"epsilon": 1e-5},
               doc="inference batch normalization over axis 1 (per-channel affine)"))


# ------------------------------------------------------------------ LayerNormalization

def _ln_infer(node, types):
    x, scale, bias = types
    _float_input(node, x, "X")
    axis = node.attr("axis")
    if not isinstance(axis, int) or not 0 <= axis < x.rank:
        raise OpError(f"node {node.name} (LayerNormalization): axis must be in [0, {x.rank}) for X of "
                      f"shape {x.shape}, got {axis!r}")
    normalized = x.shape[axis:]
    for name, t in (("Scale", scale), ("B", bias)):
        if t is None:
            continue
        if t.dtype != x.dtype:
            raise OpError(f"node {node.name} (LayerNormalization): {name} is {t.dtype}, X is {x.dtype}")
        try:
            ok = tuple(np.broadcast_shapes(t.shape, normalized)) == normalized
        except ValueError:
            ok = False
        if not ok:
            raise OpError(f"node {node.name} (LayerNormalization): {name} of shape {t.shape} does not "
                          f"broadcast to the normalized shape {normalized}")
    return [same_type(x)]


def layernorm_reference(x, scale, bias=None, axis=-1, epsilon=1e-5):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the axes ``axis..rank-1``."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(axis=axes, keepdims=True)
    out = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + epsilon) * scale
    if bias is not None:
        out = out + bias
    return out.astype(x.dtype)


def _ln_eval(node, arrays):
    x, scale, bias = (list(arrays) + [None])[:3]
    return [layernorm_reference(x, scale, bias, node.attr("axis"), node.attr("epsilon", 1e-5))]


register(OpDef("LayerNormalization", ("X", "Scale", "B?"), _ln_infer, _ln_eval, Pattern.REDUCE,
               {"axis": REQUIRED, "epsilon": 1e-5},
               doc="layer normalization over the axes axis..rank-1 (axis non-negative)"))


# ------------------------------------------------------------------ Gelu

GELU_APPROXIMATIONS = ("none", "tanh")


def _gelu_infer(node, types):
    _float_input(node, types[0], "X")
    if node.attr("approximate", "none") not in GELU_APPROXIMATIONS:
        raise OpError(f"node {node.name} (Gelu): approximate must be 'none' or 'tanh', got "
                      f"{node.attr('approximate')!r}")
    return [same_type(types[0])]


def gelu_reference(x, approximate: str = "none"):
    """ONNX Gelu: ``0.5 x (1 + erf(x / sqrt 2))``, or its tanh approximation."""
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)
        return (0.5 * x64 * (1 + np.tanh(inner))).astype(x.dtype)
    return (0.5 * x64 * (1 + UNARY["Erf"](x64 / math.sqrt(2)))).astype(x.dtype)


register(OpDef("Gelu", ("X",), _gelu_infer,
               lambda node, arrays: [gelu_reference(arrays[0], node.attr("approximate", "none"))],
               Pattern.ELEMWISE, {"approximate": "none"},
               doc="Gaussian error linear unit (opset 20), exact or tanh-approximated"))
