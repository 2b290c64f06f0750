"""Canonical JSON form and stable structural key of a workload.

The key identifies *what* is computed, so tuning logs recorded for a workload
apply to any structurally identical one:

- variables are renamed by position (spatial axes ``i0, i1, ...``, reduce axes
  ``r0, r1, ...`` in the order the reduction lists them), so the same
  computation written with other variable names has the same key;
- tensors are referred to by their position in a canonical stage order
  (:func:`tensorir.evaluate.topo_stages`), and **tensor names are excluded from
  the key** (renaming a tensor keeps tuned schedules valid); they appear in
  :func:`workload_to_json` only for reports;
- shapes, dtypes, reduce extents, the operators and the constants are
  included, so any of them changing changes the key;
- operators are spelled through the explicit tables below, not through enum
  values or ``repr``, and the text is hashed with sha256 (never ``hash()``),
  so the key is the same in every process and Python version.  Changing the
  encoding means bumping :data:`FORMAT`, which is part of the hashed text.

The key is structural, not semantic: ``a * b`` and ``b * a`` get different keys.
"""
from __future__ import annotations

import hashlib
import json
import math

from tensorir.te.evaluate import topo_stages
from tensorir.te.expr import Binary, BinOp, Cast, Const, Expr, Select, Unary, UnOp, Var
from tensorir.te.tensor import Reduce, Reducer, TensorRead

FORMAT = "tensortune.workload/1"
KEY_LENGTH = 24  # hex digits of sha256 kept in a key (96 bits)


class SerializeError(ValueError):
    """A workload holds a node this format cannot encode."""


_BINOPS = {
    BinOp.ADD: "add", BinOp.SUB: "sub", BinOp.MUL: "mul", BinOp.DIV: "div", BinOp.FLOORDIV: "floordiv",
    BinOp.MOD: "mod", BinOp.MIN: "min", BinOp.MAX: "max", BinOp.LT: "lt", BinOp.LE: "le", BinOp.GT: "gt",
    BinOp.GE: "ge", BinOp.EQ: "eq", BinOp.NE: "ne", BinOp.AND: "and", BinOp.OR: "or",
}
_UNOPS = {
    UnOp.EXP: "exp", UnOp.LOG: "log", UnOp.SQRT: "sqrt", UnOp.TANH: "tanh", UnOp.SIGMOID: "sigmoid",
    UnOp.ABS: "abs", UnOp.NOT: "not",
}
_REDUCERS = {Reducer.SUM: "sum", Reducer.MAX: "max", Reducer.MIN: "min"}


def _const_value(c: Const):
    v = c.value
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")  # strict JSON has no inf/nan
    return v


def _encode(e: Expr, names: dict, index: dict, stage: str) -> list:
    """Nested-list encoding of an expression: ``[kind, ...operands]``."""
    if isinstance(e, Const):
        return ["const", e.dtype, _const_value(e)]
    if isinstance(e, Var):
        if e not in names:
            raise SerializeError(f"stage {stage!r} uses variable {e.name!r}, which is not one of its axes")
        return ["var", names[e]]
    if isinstance(e, Binary):
        return [_BINOPS[e.op], _encode(e.a, names, index, stage), _encode(e.b, names, index, stage)]
    if isinstance(e, Unary):
        return [_UNOPS[e.op], _encode(e.a, names, index, stage)]
    if isinstance(e, Select):
        return ["select"] + [_encode(x, names, index, stage) for x in (e.cond, e.t, e.f)]
    if isinstance(e, Cast):
        return ["cast", e.to, _encode(e.a, names, index, stage)]
    if isinstance(e, TensorRead):
        return ["read", index[id(e.tensor)], [_encode(i, names, index, stage) for i in e.indices]]
    if isinstance(e, Reduce):
        return ["reduce", _REDUCERS[e.reducer], [[names[ax.var], ax.extent] for ax in e.axes],
                _encode(e.source, names, index, stage)]
    raise SerializeError(f"stage {stage!r}: cannot serialize a {type(e).__name__} node")


def workload_to_json(tensors, *, names: bool = True) -> dict:
    """The canonical JSON-able form of a workload.

    Parameters
    ----------
    tensors : list of te.Tensor
        The workload (inputs first, then outputs).
    names : bool, optional
        Include each stage's tensor name (default True).  :func:`workload_key`
        hashes the form without names.

    Returns
    -------
    dict
        ``{"format": FORMAT, "stages": [...], "tensors": [...]}`` where
        ``stages`` lists every stage (intermediates included) in canonical
        topological order, each ``{"op": "placeholder" | "compute", "shape",
        "dtype", ["name"], ["body"], ["axes"]}`` (``axes``: the spatial then reduce axis names,
        with ``names`` only), and ``tensors`` gives the stage index
        of each entry of the workload list.  Expressions are nested lists
        ``[kind, operands...]``: ``["const", dtype, value]``, ``["var", "i0"]``,
        ``["add", a, b]``, ``["exp", a]``, ``["select", c, t, f]``,
        ``["cast", dtype, a]``, ``["read", stage, [indices]]``,
        ``["reduce", "sum", [["r0", extent], ...], source]``.
    """
    stages = topo_stages(tensors)
    index = {id(t): n for n, t in enumerate(stages)}
    out = []
    for t in stages:
        entry = {"op": "placeholder" if t.is_placeholder else "compute", "shape": list(t.shape), "dtype": t.dtype}
        if names:
            entry["name"] = t.name
        if not t.is_placeholder:
            var_names = {ax.var: f"i{n}" for n, ax in enumerate(t.op.axes)}
            var_names.update({ax.var: f"r{n}" for n, ax in enumerate(t.op.reduce_axes)})
            entry["body"] = _encode(t.op.body, var_names, index, t.name)
            if names:   # schedules name loops after axes ("C.i"): kept so a trace replays on the rebuilt form
                entry["axes"] = [ax.name for ax in t.op.axes] + [ax.name for ax in t.op.reduce_axes]
        out.append(entry)
    return {"format": FORMAT, "stages": out, "tensors": [index[id(t)] for t in tensors]}


def canonical_text(tensors) -> str:
    """The exact text :func:`workload_key` hashes: compact, sorted-key JSON of the nameless form."""
    return json.dumps(workload_to_json(tensors, names=False), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False)


def workload_key(tensors) -> str:
    """Stable structural hash of a workload: the first 24 hex digits of sha256 of :func:`canonical_text`.

    Parameters
    ----------
    tensors : list of te.Tensor
        The workload.

    Returns
    -------
    str
        24 lowercase hex digits; equal for workloads that compute the same
        thing with the same shapes and dtypes, whatever their variable or
        tensor names, in any process.
    """
    return hashlib.sha256(canonical_text(tensors).encode("ascii")).hexdigest()[:KEY_LENGTH]
