"""Elementwise ops: unary maps and binary ops with ONNX's multidirectional broadcasting."""
from __future__ import annotations

import numpy as np

from graph.ir import TensorType
from graph.ops.registry import REQUIRED, OpDef, OpError, Pattern, register, same_type


def broadcast_shape(node, *shapes) -> tuple:
    """numpy/ONNX multidirectional broadcasting of ``shapes``; OpError naming the node if impossible."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise OpError(f"node {node.name} ({node.op}): shapes {' and '.join(map(str, shapes))} do not "
                      "broadcast") from None


def _same_dtype(node, types) -> str:
    dtypes = {t.dtype for t in types if t is not None}
    if len(dtypes) > 1:
        raise OpError(f"node {node.name} ({node.op}): inputs have different dtypes {sorted(dtypes)}")
    return dtypes.pop()


def _binary(kind: str, fn, result_dtype=None, mixed_dtypes=False):
    def infer(node, types):
        # Pow's exponent may have another dtype than its base (ONNX); the result has the base's
        dtype = types[0].dtype if mixed_dtypes else _same_dtype(node, types)
        return [TensorType(broadcast_shape(node, *(t.shape for t in types)), result_dtype or dtype)]

    def evaluate(node, arrays):
        a, b = arrays
        out = fn(a, b)
        return [np.asarray(out, dtype=result_dtype or a.dtype)]
    register(OpDef(kind, ("A", "B"), infer, evaluate, Pattern.BROADCAST))


def _int_div(a, b):
    if a.dtype.kind in "iu":
        return np.trunc(a / b).astype(a.dtype)   # ONNX's integer Div truncates toward zero
    return a / b


_binary("Add", np.add)
_binary("Sub", np.subtract)
_binary("Mul", np.multiply)
_binary("Div", _int_div)
_binary("Pow", lambda a, b: np.power(a, b.astype(a.dtype)), mixed_dtypes=True)
_binary("Equal", np.equal, "bool")
_binary("Less", np.less, "bool")
_binary("Greater", np.greater, "bool")



def _erf(x):
    # float64 erf through math.erf: numpy has none, and scipy is not a dependency
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


UNARY = {
    "Relu": lambda x: np.maximum(x, 0).astype(x.dtype),
    "Sigmoid": lambda x: (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype),
    "Tanh": np.tanh,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Neg": np.negative,
    "Abs": np.abs,
    "Reciprocal": lambda x: (1.0 / x).astype(x.dtype),
    "Erf": _erf,
    "Identity": lambda x: x,
}


def _unary(kind: str, fn, pattern=Pattern.ELEMWISE):
    register(OpDef(kind, ("X",), lambda node, types: [same_type(types[0])],
                   lambda node, arrays: [np.asarray(fn(arrays[0]), dtype=arrays[0].dtype)], pattern))


for _kind, _fn in UNARY.items():
    _unary(_kind, _fn)


# ------------------------------------------------------------------ Clip, Cast, Where

def _clip_eval(node, arrays):
    x = arrays[0]
    lo, hi = node.attr("min", float("-inf")), node.attr("max", float("inf"))
    if x.dtype.kind in "iub":
        # integer bounds: ONNX takes them in the input's type, a float bound past the range is no bound
        info = np.iinfo(x.dtype) if x.dtype.kind != "b" else None
        lo = max(lo, info.min) if info else lo
        hi = min(hi, info.max) if info else hi
        return [np.clip(x, int(np.ceil(lo)), int(np.floor(hi))).astype(x.dtype)]
    return [np.minimum(np.maximum(x, x.dtype.type(lo)), x.dtype.type(hi))]


def _clip_infer(node, types):
    lo, hi = node.attr("min", float("-inf")), node.attr("max", float("inf"))
    if not all(isinstance(v, (int, float)) for v in (lo, hi)):
        raise OpError(f"node {node.name} (Clip): min and max must be numbers, got {lo!r} and {hi!r}")
    return [same_type(types[0])]


register(OpDef("Clip", ("X",), _clip_infer, _clip_eval, Pattern.ELEMWISE,
               {"min": float("-inf"), "max": float("inf")},
               doc="min(max(x, min), max); NaN passes through"))


# The dtypes a graph value may have (ONNX's numeric types the compiler handles, and bool).
DTYPES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool")


def _cast_infer(node, types):
    to = node.attr("to")
    if to not in DTYPES:
        raise OpError(f"node {node.name} (Cast): to={to!r} is not one of {', '.join(DTYPES)}")
    return [same_type(types[0], dtype=to)]


def _cast_eval(node, arrays):
    x, to = arrays[0], np.dtype(node.attr("to"))
    if x.dtype.kind == "f" and to.kind in "iu":
        # ONNX casts float to int by truncation toward zero, as numpy does; NaN/inf are undefined
        return [np.trunc(x).astype(to)]
    return [x.astype(to)]


# a dtype change fuses like data movement (INJECTIVE), not as an arithmetic map
register(OpDef("Cast", ("X",), _cast_infer, _cast_eval, Pattern.INJECTIVE, {"to": REQUIRED},
               doc="x converted to the numpy dtype named by `to`"))


def _where_infer(node, types):
    cond, x, y = types
    if cond.dtype != "bool":
        raise OpError(f"node {node.name} (Where): the condition must be bool, got {cond.dtype}")
    dtype = _same_dtype(node, [x, y])
    return [TensorType(broadcast_shape(node, cond.shape, x.shape, y.shape), dtype)]


register(OpDef("Where", ("condition", "X", "Y"), _where_infer,
               lambda node, arrays: [np.where(*arrays).astype(arrays[1].dtype)], Pattern.BROADCAST,
               doc="x where condition else y, all three broadcast together"))
