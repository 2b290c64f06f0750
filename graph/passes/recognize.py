"""Recognizing the decomposed Gelu, LayerNorm and Swish that exporters emit, as single ops.

Constants are matched by value with a tolerance (``sqrt(2)`` may be stored as 1.4142135 or
1.41421); every intermediate must be used only inside the match. The rules run consumers first
(``reverse``) so a layer norm is matched at its final bias Add, not at the Mul inside it.
"""
from __future__ import annotations

import math

import numpy as np

from graph.pattern import Constant, Emitter, Op, Rule, bind
from graph.passes.base import RulePass


def _c(value: float) -> Constant:
    return Constant(value, scalar=True)


def _su(op, args, **kw) -> Op:
    return Op(op, args=args, single_use=True, **kw)


def _gelu_outer(x, one_plus):
    """``x * 0.5 * one_plus`` in the three groupings (operand orders come from commutativity)."""
    half = _c(0.5)
    return (Op("Mul", args=[_su("Mul", [x, half]), one_plus])
            | Op("Mul", args=[_su("Mul", [x, one_plus]), half])
            | Op("Mul", args=[x, _su("Mul", [one_plus, half])]))


def _gelu_erf():
    x = bind("x")
    scaled = _su("Div", [x, _c(math.sqrt(2))]) | _su("Mul", [x, _c(1 / math.sqrt(2))])
    return _gelu_outer(x, _su("Add", [_su("Erf", [scaled]), _c(1.0)]))


def _gelu_tanh():
    x = bind("x")
    cube = _su("Pow", [x, _c(3.0)]) | _su("Mul", [x, _su("Mul", [x, x])])
    inner = _su("Add", [x, _su("Mul", [cube, _c(0.044715)])])
    tanh = _su("Tanh", [_su("Mul", [inner, _c(math.sqrt(2 / math.pi))])])
    return _gelu_outer(x, _su("Add", [tanh, _c(1.0)]))


GELU_ERF = _gelu_erf()
GELU_TANH = _gelu_tanh()


def _to_gelu(approximate: str):
    def callback(graph, m):
        if graph.type_of(m["x"]) != graph.type_of(m.root):
            return None
        r = Emitter(graph)
        return r.replace_with(r.op("Gelu", [m["x"]], name=m.root_node.name, approximate=approximate))
    return callback


def _layernorm():
    x = bind("x")
    mean = Op("ReduceMean", args=[x], attrs={"keepdims": 1}, single_use=True).bind("mean")
    d = _su("Sub", [x, mean]).bind("d")
    square = _su("Pow", [d, _c(2.0)]) | _su("Mul", [d, d])
    var = Op("ReduceMean", args=[square], attrs={"keepdims": 1}, single_use=True).bind("var")
    std = _su("Sqrt", [_su("Add", [var, Constant(scalar=True).bind("eps")])])
    normed = (_su("Div", [d, std]) | _su("Mul", [d, _su("Reciprocal", [std])])).bind("normed")
    scale = Constant().bind("scale")
    with_bias = Op("Add", args=[_su("Mul", [normed, scale]), Constant().bind("bias")])
    return with_bias | Op("Mul", args=[normed, scale]) | normed


LAYERNORM = _layernorm()


def _norm_param(m, name: str, shape: tuple, axis: int, dtype: str):
    """The constant bound to ``name`` as an array of the normalized shape, or None if it varies
    along the un-normalized axes or has another dtype."""
    a = m.array(name)
    if a.dtype.name != dtype or a.ndim > len(shape):
        return None
    full = (1,) * (len(shape) - a.ndim) + a.shape
    if any(d != 1 for d in full[:axis]):
        return None
    try:
        return np.broadcast_to(a.reshape(full[axis:]), shape[axis:])
    except ValueError:
        return None


def _to_layernorm(graph, m):
    t = graph.type_of(m["x"])
    if t != graph.type_of(m.root) or np.dtype(t.dtype).kind != "f":
        return None
    axes = m.node("mean").attr("axes")
    if not axes or tuple(axes) != tuple(range(axes[0], t.rank)) or m.node("var").attr("axes") != axes:
        return None
    axis = axes[0]
    r = Emitter(graph)
    params = []
    for name in ("scale", "bias"):
        if name not in m:
            params.append(None)
            continue
        p = _norm_param(m, name, t.shape, axis, t.dtype)
        if p is None:
            return None
        params.append(m[name] if p.shape == m.array(name).shape else r.constant(f"{m.root}_{name}", p))
    scale, bias = params
    if scale is None:
        scale = r.constant(f"{m.root}_scale", np.ones(t.shape[axis:], t.dtype))
    eps = float(m.array("eps").reshape(()))
    return r.replace_with(r.op("LayerNormalization", [m["x"], scale, bias], name=m.root_node.name,
                               axis=axis, epsilon=eps))


def _swish():
    """``x * sigmoid(x)`` (SiLU), ``x * sigmoid(alpha * x)`` (QuickGelu's 1.702) and ``x * HardSigmoid(x)``
    with HardSwish's constants: one elementwise op, so a conv or product takes it as its epilogue
    (two nodes reading ``x`` would materialize it between two kernels)."""
    x = bind("x")
    scaled = _su("Mul", [x, Constant(scalar=True).bind("alpha")])
    sig = _su("Sigmoid", [x]) | _su("Sigmoid", [scaled])
    hard = _su("HardSigmoid", [x]).bind("hard")
    return Op("Mul", args=[x, sig]) | Op("Mul", args=[x, hard])


SWISH = _swish()


def _to_swish(graph, m):
    t = graph.type_of(m["x"])
    if t != graph.type_of(m.root) or np.dtype(t.dtype).kind != "f":
        return None
    r = Emitter(graph)
    if "hard" in m:
        hard = m.node("hard")
        if not (math.isclose(hard.attr("alpha", 0.2), 1 / 6, rel_tol=1e-5) and
                math.isclose(hard.attr("beta", 0.5), 0.5, rel_tol=1e-6)):
            return None
        return r.replace_with(r.op("HardSwish", [m["x"]], name=m.root_node.name))
    alpha = float(m.array("alpha").reshape(())) if "alpha" in m else 1.0
    return r.replace_with(r.op("Swish", [m["x"]], name=m.root_node.name, alpha=alpha))


RECOGNIZE_RULES = (
    Rule("gelu-erf", GELU_ERF, _to_gelu("none")),
    Rule("gelu-tanh", GELU_TANH, _to_gelu("tanh")),
    Rule("layernorm", LAYERNORM, _to_layernorm),
    Rule("swish", SWISH, _to_swish),
)

recognize = RulePass("recognize", RECOGNIZE_RULES, reverse=True)
