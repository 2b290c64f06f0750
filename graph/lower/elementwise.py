"""Elementwise ops as tensor expressions: unary maps, Gelu, Erf, Clip, Cast, broadcasting binaries, Where.

Each lowering is ``fn(ctx, node, ins, outs) -> [Val]`` (``ins``: a :class:`Val` per input, None
for an absent optional one; ``outs``: the output TensorTypes).
"""
from __future__ import annotations

import math

from graph.lower.core import LoweringError, lit, storage_dtype
from tensorir import te

LOWERINGS: dict = {}


def lowering(*kinds):
    def deco(fn):
        for k in kinds:
            LOWERINGS[k] = fn
        return fn
    return deco


# Abramowitz & Stegun 7.1.26: erf(x) = 1 - t(a1 + t(a2 + t(a3 + t(a4 + t a5)))) exp(-x^2),
# t = 1 / (1 + p|x|); absolute error below 1.5e-7 (tests/test_model_lower.py checks 1e-6).
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(x):
    """erf(x) built from te ops (te has no erf): A&S 7.1.26, absolute error < 1.5e-7."""
    ax = te.abs(x)
    t = 1.0 / (1.0 + _ERF_P * ax)
    poly = _ERF_A[4]
    for a in reversed(_ERF_A[:4]):
        poly = a + t * poly
    y = 1.0 - t * poly * te.exp(-(ax * ax))
    # the sign as a factor, not y and -y as the two sides of a select: code generation evaluates
    # each side of a select that reads memory apart (under its lane mask), so the polynomial and
    # its exp ran twice; the Gelu epilogue of BERT's 768x3072 product took 30% longer so
    return te.if_then_else(x < 0.0, -1.0, 1.0) * y


def gelu(x, approximate: str):
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))
        return 0.5 * x * (1.0 + te.tanh(inner))
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def _float(node, v):
    if storage_dtype(v.dtype) not in ("float32", "float64"):
        raise LoweringError(f"node {node.name} ({node.op}): needs a float input, got {v.dtype}")


_UNARY = {
    "Relu": lambda x, dt: te.max(x, lit(0, dt)),
    "Sigmoid": lambda x, dt: te.sigmoid(x),
    "Tanh": lambda x, dt: te.tanh(x),
    "Exp": lambda x, dt: te.exp(x),
    "Log": lambda x, dt: te.log(x),
    "Sqrt": lambda x, dt: te.sqrt(x),
    "Neg": lambda x, dt: lit(0, dt) - x,
    "Abs": lambda x, dt: te.abs(x),
    "Reciprocal": lambda x, dt: lit(1, dt) / x,
    "Erf": lambda x, dt: erf(x),
    "Identity": lambda x, dt: x,
}
_FLOAT_ONLY = {"Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Erf", "Gelu"}


@lowering(*_UNARY)
def _unary(ctx, node, ins, outs):
    (x,) = ins
    if node.op in _FLOAT_ONLY:
        _float(node, x)
    fn = _UNARY[node.op]
    return [ctx.emit(outs[0].shape, outs[0].dtype, lambda *i: fn(x(*i), x.dtype), node.op.lower())]


@lowering("Gelu")
def _gelu(ctx, node, ins, outs):
    (x,) = ins
    _float(node, x)
    approx = node.attr("approximate", "none")
    if approx not in ("none", "tanh"):
        raise LoweringError(f"node {node.name} (Gelu): approximate={approx!r} is not 'none' or 'tanh'")
    return [ctx.emit(outs[0].shape, outs[0].dtype, lambda *i: gelu(x(*i), approx), "gelu")]


@lowering("Clip")
def _clip(ctx, node, ins, outs):
    x = ins[0]
    lo, hi = node.attr("min", -math.inf), node.attr("max", math.inf)

    def f(*i):
        e = x(*i)
        if hi != math.inf:
            e = te.min(e, lit(hi, x.dtype))
        if lo != -math.inf:
            e = te.max(e, lit(lo, x.dtype))
        return e
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "clip")]


@lowering("Cast")
def _cast(ctx, node, ins, outs):
    (x,) = ins
    to = outs[0].dtype

    def f(*i):
        e = x(*i)
        if to == "bool":
            return e if x.dtype == "bool" else te.not_equal(e, lit(0, x.dtype))
        if x.dtype == "bool":
            return te.if_then_else(e, lit(1, to), lit(0, to))
        return te.cast(storage_dtype(to), e)
    return [ctx.emit(outs[0].shape, to, f, "cast")]


def _trunc_div(a, b):
    # ONNX's integer Div truncates toward zero; te's // floors
    q = a // b
    fix = te.all(te.not_equal(a % b, 0), te.not_equal(a < 0, b < 0))
    return te.if_then_else(fix, q + 1, q)


def _pow(node, base, exponent, const_exp):
    if const_exp is not None:
        e = float(const_exp)
        if e == 1.0:
            return base
        if e == 0.5:
            return te.sqrt(base)
        if e.is_integer() and abs(e) <= 8:
            out = base
            for _ in range(int(abs(e)) - 1):
                out = out * base
            if e == 0:
                return base * 0.0 + 1.0
            return 1.0 / out if e < 0 else out
    if base.dtype not in ("float32", "float64"):
        raise LoweringError(f"node {node.name} (Pow): integer powers need a constant exponent")
    # general exponent: exp(y log x), defined for x > 0 (a negative base needs an integer exponent)
    return te.exp(te.cast(base.dtype, exponent) * te.log(base))


_BINARY = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Equal": te.equal,
    "Less": lambda a, b: a < b,
    "Greater": lambda a, b: a > b,
}


@lowering("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater")
def _binary(ctx, node, ins, outs):
    a, b = ins
    shape = outs[0].shape
    if node.op == "Div":
        integer = storage_dtype(a.dtype) == "int32"
        fn = _trunc_div if integer else (lambda x, y: x / y)
    elif node.op == "Pow":
        const_exp = ctx.scalar_constant(node.inputs[1])
        return [ctx.emit(shape, outs[0].dtype, lambda *i: _pow(node, a.at(i, shape), b.at(i, shape), const_exp), "pow")]
    else:
        fn = _BINARY[node.op]
    return [ctx.emit(shape, outs[0].dtype, lambda *i: fn(a.at(i, shape), b.at(i, shape)), node.op.lower())]


@lowering("Where")
def _where(ctx, node, ins, outs):
    c, x, y = ins
    shape = outs[0].shape
    return [ctx.emit(shape, outs[0].dtype,
                     lambda *i: te.if_then_else(c.at(i, shape), x.at(i, shape), y.at(i, shape)), "where")]


@lowering("BatchNormalization")
def _batchnorm(ctx, node, ins, outs):
    x, scale, bias, mean, var = ins[:5]
    eps = float(node.attr("epsilon", 1e-5))
    _float(node, x)

    def f(*i):
        c = i[1]
        return (x(*i) - mean(c)) * (scale(c) / te.sqrt(var(c) + eps)) + bias(c)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "batchnorm")]
