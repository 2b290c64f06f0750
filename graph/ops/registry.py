"""The op registry: what each op kind of the graph IR means.

An :class:`OpDef` gives an op kind's named inputs (optional ones may be absent, ``""``), the
attributes it accepts with their defaults (any other attribute is refused), ``infer`` (input
types -> output types, raising :class:`OpError` for bad shapes), ``evaluate`` (numpy arrays ->
arrays: the reference semantics used by the interpreter, constant folding and tests) and the
op's fusion :class:`Pattern` (TVM's ``OpPatternKind``).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable

from graph.ir import GraphError, Node, TensorType


class OpError(GraphError):
    """An op used with inputs or attributes it does not accept; the message names the node."""


class UnknownOpError(OpError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class Pattern(enum.IntEnum):
    """How an op fuses, least to most restrictive (TVM's ``OpPatternKind``)."""
    ELEMWISE = 0          # out[i] = f(in[i]) on same-shape operands
    BROADCAST = 1         # elementwise with broadcasting
    INJECTIVE = 2         # each output element reads one input element (reshape, transpose, slice)
    REDUCE = 3            # reductions (ReduceMean, Softmax's row sums)
    OUT_FUSABLE = 4       # conv, matmul: can take an elementwise epilogue
    OPAQUE = 8            # never fused


@dataclass(frozen=True)
class OpDef:
    """What an op kind means.

    ``inputs`` names the inputs in order; a name ending in ``?`` is optional, one ending in
    ``*`` is variadic (all remaining inputs). ``attrs`` maps each accepted attribute to its
    default (``REQUIRED`` for none). ``infer(node, types)`` returns the output types;
    ``evaluate(node, arrays)`` the output arrays.
    """
    kind: str
    inputs: tuple
    infer: Callable
    evaluate: Callable
    pattern: Pattern = Pattern.OPAQUE
    attrs: dict = field(default_factory=dict)
    outputs: int = 1
    doc: str = ""

    def check(self, node: Node, types: list) -> None:
        """Refuse unknown attributes, missing required ones, and a wrong input count (OpError)."""
        unknown = sorted(k for k, _ in node.attrs if k not in self.attrs)
        if unknown:
            raise OpError(f"node {node.name} ({self.kind}): unsupported attribute(s) {', '.join(unknown)}; "
                          f"accepted: {', '.join(sorted(self.attrs)) or 'none'}")
        missing = [k for k, d in self.attrs.items() if d is REQUIRED and node.attr(k) is None]
        if missing:
            raise OpError(f"node {node.name} ({self.kind}): missing attribute(s) {', '.join(missing)}")
        variadic = bool(self.inputs) and self.inputs[-1].endswith("*")
        required = [n for n in self.inputs if not n.endswith(("?", "*"))]
        if len(node.inputs) < len(required) or (not variadic and len(node.inputs) > len(self.inputs)):
            raise OpError(f"node {node.name} ({self.kind}): takes {self._arity()} input(s), got "
                          f"{len(node.inputs)}")
        for i, (name, t) in enumerate(zip(self._names(len(node.inputs)), types)):
            if t is None and not name.endswith(("?", "*")):
                raise OpError(f"node {node.name} ({self.kind}): input {name} is required")

    def _names(self, n: int) -> list:
        names = list(self.inputs)
        if names and names[-1].endswith("*"):
            names = names[:-1] + [names[-1]] * max(0, n - len(names) + 1)
        return names[:n]

    def _arity(self) -> str:
        required = sum(1 for n in self.inputs if not n.endswith(("?", "*")))
        if self.inputs and self.inputs[-1].endswith("*"):
            return f"at least {required}"
        return str(required) if required == len(self.inputs) else f"{required} to {len(self.inputs)}"

    def attr(self, node: Node, key: str):
        """The node's attribute ``key`` or this op's default for it."""
        value = node.attr(key)
        return self.attrs[key] if value is None else value


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = _Required()
_REGISTRY: dict = {}


def register(op: OpDef) -> OpDef:
    if op.kind in _REGISTRY:
        raise ValueError(f"op {op.kind} is registered twice")
    _REGISTRY[op.kind] = op
    return op


def get_op(kind: str) -> OpDef:
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise UnknownOpError(f"unknown op kind {kind!r}") from None


def all_ops() -> dict:
    """Every registered op kind -> OpDef."""
    return dict(_REGISTRY)


def infer_types(node: Node, types: list) -> list:
    """Check ``node`` against its op and return its output types (``types``: None for absent inputs)."""
    op = get_op(node.op)
    op.check(node, types)
    out = list(op.infer(node, types))
    if len(out) != len([v for v in node.outputs]):
        raise OpError(f"node {node.name} ({node.op}): defines {len(node.outputs)} output(s), the op "
                      f"has {len(out)}")
    return out


def same_type(t: TensorType, shape=None, dtype=None) -> TensorType:
    return TensorType(t.shape if shape is None else shape, t.dtype if dtype is None else dtype)
