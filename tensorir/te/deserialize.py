"""A workload rebuilt from its canonical JSON form: the inverse of :func:`workload_to_json`.

Workloads that are not in the operator registry (a model's fused groups, a user's tensor
expression) can then travel in a log or a study and be rebuilt anywhere, with the same key:

>>> from tensorir import ops
>>> from tensorir.te.serialize import workload_key, workload_to_json
>>> tensors = ops.conv2d(1, 3, 8, 8, 4, 3, 3, stride=1, pad=1)
>>> workload_key(workload_from_json(workload_to_json(tensors))) == workload_key(tensors)
True
"""
from __future__ import annotations

import math

from tensorir.te.expr import Binary, BinOp, Cast, Const, Select, Unary, UnOp
from tensorir.te.serialize import FORMAT, SerializeError
from tensorir.te.tensor import Reduce, Reducer, TensorRead, compute, placeholder, reduce_axis

_BINOPS = {"add": BinOp.ADD, "sub": BinOp.SUB, "mul": BinOp.MUL, "div": BinOp.DIV, "floordiv": BinOp.FLOORDIV,
           "mod": BinOp.MOD, "min": BinOp.MIN, "max": BinOp.MAX, "lt": BinOp.LT, "le": BinOp.LE,
           "gt": BinOp.GT, "ge": BinOp.GE, "eq": BinOp.EQ, "ne": BinOp.NE, "and": BinOp.AND, "or": BinOp.OR}
_UNOPS = {"exp": UnOp.EXP, "log": UnOp.LOG, "sqrt": UnOp.SQRT, "tanh": UnOp.TANH, "sigmoid": UnOp.SIGMOID,
          "abs": UnOp.ABS, "not": UnOp.NOT}
_REDUCERS = {"sum": Reducer.SUM, "max": Reducer.MAX, "min": Reducer.MIN}


def _const(dtype: str, value):
    if isinstance(value, str):   # strict JSON spells non-finite floats as strings
        value = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[value]
    return Const(value, dtype)


def _named(names: list, fn):
    """``fn`` behind a function whose positional parameters are ``names`` (te.compute names axes so)."""
    if not all(isinstance(a, str) and a.isidentifier() for a in names) or len(set(names)) != len(names):
        return fn
    ns: dict = {"fn": fn}
    exec(f"def named({', '.join(names)}):\n    return fn({', '.join(names)})", ns)  # noqa: S102 - identifiers only
    return ns["named"]


def _decode(e, env: dict, stages: list, where: str, reduce_names=()):
    kind = e[0]
    if kind == "const":
        return _const(e[1], e[2])
    if kind == "var":
        return env[e[1]]
    if kind in _BINOPS:
        return Binary(_BINOPS[kind], _decode(e[1], env, stages, where), _decode(e[2], env, stages, where))
    if kind in _UNOPS:
        return Unary(_UNOPS[kind], _decode(e[1], env, stages, where))
    if kind == "select":
        return Select(*(_decode(x, env, stages, where) for x in e[1:4]))
    if kind == "cast":
        return Cast(e[1], _decode(e[2], env, stages, where))
    if kind == "read":
        return TensorRead(stages[e[1]], tuple(_decode(i, env, stages, where) for i in e[2]))
    if kind == "reduce":
        names = list(reduce_names) if len(reduce_names) == len(e[2]) else [name for name, _ in e[2]]
        axes = tuple(reduce_axis(extent, shown) for shown, (_, extent) in zip(names, e[2]))
        inner = dict(env, **{name: ax.var for (name, _), ax in zip(e[2], axes)})
        return Reduce(_REDUCERS[e[1]], _decode(e[3], inner, stages, where), axes)
    raise SerializeError(f"{where}: unknown expression kind {kind!r}")


def workload_from_json(obj: dict) -> list:
    """The workload (tensors, inputs first, then outputs) that :func:`workload_to_json` encoded.

    Raises ``SerializeError`` (one line) for another format or a malformed form.
    """
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        found = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise SerializeError(f"not a workload in format {FORMAT} (found {found!r})")
    stages: list = []
    try:
        for n, entry in enumerate(obj["stages"]):
            name = entry.get("name") or f"t{n}"
            if entry["op"] == "placeholder":
                stages.append(placeholder(tuple(entry["shape"]), entry["dtype"], name))
                continue
            body, shape = entry["body"], tuple(entry["shape"])
            axis_names = list(entry.get("axes") or [])
            spatial = axis_names[:len(shape)] if len(axis_names) >= len(shape) else None
            reduce_names = axis_names[len(shape):]

            def fcompute(*axes, body=body, where=f"stage {n} ({name})", reduce_names=reduce_names):
                env = {f"i{d}": ax for d, ax in enumerate(axes)}
                return _decode(body, env, stages, where, reduce_names)
            if spatial:   # a function whose parameters carry the axis names (te.compute reads them)
                fcompute = _named(spatial, fcompute)
            stages.append(compute(shape, fcompute, name, dtype=entry["dtype"]))
        return [stages[i] for i in obj["tensors"]]
    except (KeyError, IndexError, TypeError, ValueError) as err:
        if isinstance(err, SerializeError):
            raise
        raise SerializeError(f"malformed workload form: {type(err).__name__}: {err}") from None
