"""Calls: one ``Schedule`` method and its arguments as JSON, applied to a schedule or printed as Python."""
from __future__ import annotations

import math

import numpy as np

from schedules import Schedule
from tests.fuzz.workloads import all_tensors


def encode(x):
    """Arguments -> JSON: tuples, numpy scalars and dicts with non-string keys survive the trip."""
    if isinstance(x, np.generic):
        return {"$np": x.dtype.name, "v": x.item()}
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"$float": repr(x)}
    if isinstance(x, tuple):
        return {"$tuple": [encode(v) for v in x]}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in x):
            return {k: encode(v) for k, v in x.items()}
        return {"$dict": [[encode(k), encode(v)] for k, v in x.items()]}
    if hasattr(x, "op") and hasattr(x, "name"):      # a te.Tensor passed as a stage handle
        return {"$tensor": x.name}
    return {"$repr": repr(x)}


def decode(x, tensors=()):
    """JSON -> arguments (the inverse of :func:`encode`); a ``$tensor`` is looked up in ``tensors``."""
    if isinstance(x, list):
        return [decode(v, tensors) for v in x]
    if isinstance(x, dict):
        if set(x) == {"$np", "v"}:
            return np.dtype(x["$np"]).type(x["v"])
        if set(x) == {"$tuple"}:
            return tuple(decode(v, tensors) for v in x["$tuple"])
        if set(x) == {"$dict"}:
            return {_hashable(decode(k, tensors)): decode(v, tensors) for k, v in x["$dict"]}
        if set(x) == {"$float"}:
            return float(x["$float"])
        if set(x) == {"$tensor"}:
            for t in all_tensors(tensors):
                if t.name == x["$tensor"]:
                    return t
            return x["$tensor"]
        if set(x) == {"$repr"}:
            return x["$repr"]
        return {k: decode(v, tensors) for k, v in x.items()}
    return x


def _hashable(k):
    return tuple(k) if isinstance(k, list) else k


def call(op: str, *args, **kwargs) -> dict:
    """The call ``s.<op>(*args, **kwargs)``, JSON-encoded."""
    return {"op": op, "args": encode(list(args)), "kwargs": encode(dict(kwargs))}


def call_to_python(c: dict) -> str:
    """One call as a line of Python (for reproducers)."""
    if c["op"] == "$revert":
        return "s = last_lowerable  # $revert"
    args = [_py(a) for a in c.get("args", [])] + [f"{k}={_py(v)}" for k, v in c.get("kwargs", {}).items()]
    if c["op"] == "from_json":
        return f"s = Schedule.from_json(tensors, {', '.join(args)})"
    return f"s = s.{c['op']}({', '.join(args)})"


def _py(x) -> str:
    if isinstance(x, dict):
        if set(x) == {"$np", "v"}:
            return f"np.{x['$np']}({x['v']!r})"
        if set(x) == {"$tuple"}:
            inner = ", ".join(_py(v) for v in x["$tuple"])
            return f"({inner},)" if len(x["$tuple"]) == 1 else f"({inner})"
        if set(x) == {"$dict"}:
            return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in x["$dict"]) + "}"
        if set(x) == {"$float"}:
            return f"float({x['$float']!r})"
        if set(x) == {"$tensor"}:
            return f"tensor_named({x['$tensor']!r})"
        if set(x) == {"$repr"}:
            return x["$repr"]
        return "{" + ", ".join(f"{k!r}: {_py(v)}" for k, v in x.items()) + "}"
    if isinstance(x, list):
        return "[" + ", ".join(_py(v) for v in x) + "]"
    return repr(x)


def apply_call(s: Schedule, c: dict) -> Schedule:
    """Apply one call to ``s`` (raises whatever the primitive raises)."""
    args = decode(c.get("args", []), s.tensors)
    kwargs = decode(c.get("kwargs", {}), s.tensors)
    if c["op"] == "from_json":
        return Schedule.from_json(s.tensors, *args, **kwargs)
    return getattr(s, c["op"])(*args, **kwargs)
