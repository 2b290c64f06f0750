"""Activations with attributes and rounding maps (Pattern.ELEMWISE), ONNX semantics.

LeakyRelu(alpha), ThresholdedRelu(alpha), Elu(alpha), Selu(alpha, gamma), HardSigmoid(alpha,
beta), HardSwish, Swish(alpha), Softplus, Softsign, Mish, Celu(alpha), Shrink(bias, lambd), Sin, Cos on floats; Floor, Ceil, Round (half to even) on floats; Sign
on any numeric type. The reference semantics compute in float64 and round once to the input's dtype.
"""
from __future__ import annotations

import numpy as np

from graph.ops.registry import OpDef, OpError, Pattern, register, same_type

SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def _float_infer(node, types):
    x = types[0]
    if x.dtype[0] != "f":
        raise OpError(f"node {node.name} ({node.op}): needs a float input, got {x.dtype}")
    for key in ("alpha", "beta", "gamma", "bias", "lambd"):
        value = node.attr(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise OpError(f"node {node.name} ({node.op}): {key} must be a number, got {value!r}")
    return [same_type(x)]


def _softplus(x):
    # log(1 + exp(x)) without overflow for large x
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


# kind -> (attribute defaults, fn(x float64, attrs) -> float64, doc)
ACTIVATIONS = {
    "LeakyRelu": ({"alpha": 0.01}, lambda x, a: np.where(x < 0, a["alpha"] * x, x), "x, alpha * x below 0"),
    "ThresholdedRelu": ({"alpha": 1.0}, lambda x, a: np.where(x > a["alpha"], x, 0.0), "x above alpha, else 0"),
    "Elu": ({"alpha": 1.0}, lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0.0))),
            "x above 0, else alpha * (exp(x) - 1)"),
    "Selu": ({"alpha": SELU_ALPHA, "gamma": SELU_GAMMA},
             lambda x, a: a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0.0))),
             "gamma * (x above 0, else alpha * (exp(x) - 1))"),
    "HardSigmoid": ({"alpha": 0.2, "beta": 0.5}, lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0.0, 1.0),
                    "max(0, min(1, alpha * x + beta))"),
    "HardSwish": ({}, lambda x, a: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0), "x * max(0, min(1, x / 6 + 1/2))"),
    "Swish": ({"alpha": 1.0}, lambda x, a: x / (1.0 + np.exp(-a["alpha"] * x)), "x * sigmoid(alpha * x)"),
    "Softplus": ({}, lambda x, a: _softplus(x), "log(1 + exp(x))"),
    "Softsign": ({}, lambda x, a: x / (1.0 + np.abs(x)), "x / (1 + |x|)"),
    "Mish": ({}, lambda x, a: x * np.tanh(_softplus(x)), "x * tanh(softplus(x))"),
    "Celu": ({"alpha": 1.0}, lambda x, a: np.maximum(x, 0.0) + np.minimum(0.0, a["alpha"] * np.expm1(
        np.minimum(x, 0.0) / a["alpha"])), "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))"),
    "Shrink": ({"bias": 0.0, "lambd": 0.5}, lambda x, a: np.where(x < -a["lambd"], x + a["bias"], np.where(
        x > a["lambd"], x - a["bias"], 0.0)), "x - bias above lambd, x + bias below -lambd, else 0"),
    "Sin": ({}, lambda x, a: np.sin(x), "sine"),
    "Cos": ({}, lambda x, a: np.cos(x), "cosine"),
    "Floor": ({}, lambda x, a: np.floor(x), "the largest integer not above x"),
    "Ceil": ({}, lambda x, a: np.ceil(x), "the smallest integer not below x"),
    "Round": ({}, lambda x, a: np.round(x), "x rounded to the nearest integer, halves to even"),
}


def _activation(kind: str, defaults: dict, fn, doc: str):
    def evaluate(node, arrays):
        x = arrays[0]
        attrs = {k: float(node.attr(k, d)) for k, d in defaults.items()}
        with np.errstate(over="ignore", invalid="ignore"):
            return [np.asarray(fn(x.astype(np.float64), attrs)).astype(x.dtype)]
    register(OpDef(kind, ("X",), _float_infer, evaluate, Pattern.ELEMWISE, dict(defaults), doc=doc))


for _kind, (_defaults, _fn, _doc) in ACTIVATIONS.items():
    _activation(_kind, _defaults, _fn, _doc)


def _sign_infer(node, types):
    x = types[0]
    if x.dtype == "bool":
        raise OpError(f"node {node.name} (Sign): needs a numeric input, got bool")
    return [same_type(x)]


register(OpDef("Sign", ("X",), _sign_infer, lambda node, a: [np.sign(a[0]).astype(a[0].dtype)], Pattern.ELEMWISE,
               doc="-1, 0 or 1 by the sign of x"))
