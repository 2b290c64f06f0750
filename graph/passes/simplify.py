"""Algebraic simplification, as a rule table: neutral elements, identities, reshape and transpose chains.

Every rule that drops an op checks that the value taking its place has the same shape and
dtype (``x * ones(3)`` broadcasts a ``(1,)`` x to ``(3,)``: not ``x``).
"""
from __future__ import annotations

from graph.pattern import Constant, Emitter, Op, Rule, Wildcard
from graph.passes.base import RulePass


def _same_type_as_root(graph, m, name: str):
    """The value bound to ``name`` if it can stand for the match's root unchanged, else None."""
    a, b = graph.type_of(m[name]), graph.type_of(m.root)
    return m[name] if (a.shape, a.dtype) == (b.shape, b.dtype) else None


def _drop(name: str = "x"):
    return lambda graph, m: _same_type_as_root(graph, m, name)


X = Wildcard().bind("x")


def _exactly(value: float) -> Constant:
    # Neutral elements must be exact: ``var + 1e-12`` is an epsilon, not ``var + 0``.
    return Constant(value, rtol=0.0, atol=0.0)


def _reshape_reshape(graph, m):
    r = Emitter(graph)
    return r.replace_with(r.op("Reshape", [m["x"]], name=m.root_node.name, shape=m.root_node.attr("shape")))


def _compose_transposes(graph, m):
    inner, outer = m.node("inner").attr("perm"), m.root_node.attr("perm")
    perm = tuple(inner[p] for p in outer)
    if perm == tuple(range(len(perm))):
        return m["x"]
    r = Emitter(graph)
    return r.replace_with(r.op("Transpose", [m["x"]], name=m.root_node.name, perm=perm))


def _reshape_to_same_shape(node, graph):
    return graph.type_of(node.inputs[0]).shape == graph.type_of(node.outputs[0]).shape


def _cast_to_same_dtype(node, graph):
    return graph.type_of(node.inputs[0]).dtype == graph.type_of(node.outputs[0]).dtype


def _identity_perm(perm) -> bool:
    return perm is not None and tuple(perm) == tuple(range(len(perm)))


SIMPLIFY_RULES = (
    Rule("identity", Op("Identity", args=[X]), _drop()),
    Rule("mul-one", Op("Mul", args=[X, _exactly(1.0)]), _drop()),
    Rule("div-one", Op("Div", args=[X, _exactly(1.0)]), _drop()),
    Rule("pow-one", Op("Pow", args=[X, _exactly(1.0)]), _drop()),
    Rule("add-zero", Op("Add", args=[X, _exactly(0.0)]), _drop()),
    Rule("sub-zero", Op("Sub", args=[X, _exactly(0.0)]), _drop()),
    Rule("reshape-same-shape", Op("Reshape", args=[X], where=_reshape_to_same_shape), _drop(), priority=1),
    Rule("reshape-reshape", Op("Reshape", args=[Op("Reshape", args=[X])]), _reshape_reshape),
    Rule("transpose-identity", Op("Transpose", args=[X], attrs={"perm": _identity_perm}), _drop(), priority=1),
    Rule("transpose-transpose", Op("Transpose", args=[Op("Transpose", args=[X]).bind("inner")]),
         _compose_transposes),
    Rule("cast-same-dtype", Op("Cast", args=[X], where=_cast_to_same_dtype), _drop()),
)

simplify = RulePass("simplify", SIMPLIFY_RULES)
