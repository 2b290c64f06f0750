"""Declarative patterns over the graph IR (tinygrad's ``UPat``, TVM's dataflow patterns).

A pattern matches a *value* of a graph: ``Op("Relu", args=[Wildcard()])`` matches a value that a
Relu node computes from anything. Patterns compose:

>>> from graph.pattern import Op, Wildcard, Constant, Optional
>>> conv = Op("Conv", args=[Wildcard(), Constant(), Optional(Constant())], single_use=True)
>>> bn = Op("BatchNormalization", args=[conv.bind("conv"), Constant(), Constant(), Constant(), Constant()])
>>> bn
Op('BatchNormalization')

Matching is a backtracking search: every pattern yields the match states (bindings so far and
the nodes matched) under which it holds, so alternatives, commutative operand orders and names
bound twice combine without special cases. Each failure is reported to a tracer with the path
of the sub-pattern that failed (``Op('BatchNormalization').args[0]``), what it expected and what
it found; ``graph.pattern.explain`` turns the deepest one into a sentence.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import numpy as np

from graph.ir import Graph, Node
from graph.ops.registry import REQUIRED, UnknownOpError, get_op

# Ops whose two operands may be swapped (both orders are tried).
COMMUTATIVE = frozenset({"Add", "Mul"})


class State:
    """A partial match: bound names, matched nodes and the use-count checks still to run."""
    __slots__ = ("bindings", "nodes", "single_use")

    def __init__(self, bindings=None, nodes=None, single_use=()):
        self.bindings = dict(bindings or {})     # name -> (value name, Node or None)
        self.nodes = dict(nodes or {})           # node name -> Node
        self.single_use = tuple(single_use)      # (path, Node) pairs

    def copy(self) -> "State":
        return State(self.bindings, self.nodes, self.single_use)


class Tracer:
    """Collects why sub-patterns failed; the deepest failure is the most informative one."""

    def __init__(self):
        self.failures: list = []

    def fail(self, state: "State | int", path: str, expected: str, found: str) -> None:
        """Record that the sub-pattern at ``path`` failed in ``state`` (or after that many nodes matched)."""
        progress = state if isinstance(state, int) else len(state.nodes)
        self.failures.append((progress, _depth(path), path, expected, found))

    def deepest(self):
        """(path, expected, found) of the failure that got furthest (most nodes matched, then the
        deepest sub-pattern; the first such), or None."""
        if not self.failures:
            return None
        best = max(self.failures, key=lambda f: (f[0], f[1]))
        return best[2:]

    def progress(self) -> int:
        """How many nodes the furthest failed attempt had matched (0 when nothing was recorded)."""
        return max((f[0] for f in self.failures), default=0)

    def reason(self) -> str:
        """The deepest failure as ``path: expected ..., found ...``."""
        path, expected, found = self.deepest()
        return f"{path}: expected {expected}, found {found}"


def _depth(path: str) -> int:
    return path.count(".args[") + path.count(".alt[")


# A use-count failure comes after a complete structural match: nothing got further.
COMPLETE = 1 << 30


class _NullTracer(Tracer):
    def fail(self, state, path, expected, found) -> None:
        pass


NO_TRACE = _NullTracer()


def describe_value(graph: Graph, value: str) -> str:
    """What ``value`` is, for failure messages: ``MatMul at node mm1``, ``input x``, ``constant w``."""
    if not value:
        return "an absent input"
    node = graph.producer(value)
    if node is not None:
        return f"{node.op} at node {node.name}"
    if graph.is_constant(value):
        return f"constant {value}"
    return f"input {value}"


class ValuePattern:
    """A pattern matching one value of a graph. Combine with ``|``; name with ``.bind(name)``."""

    def matches(self, graph: Graph, value: str, state: State, path: str, tracer: Tracer) -> Iterator[State]:
        """Yield every extension of ``state`` under which this pattern matches ``value``."""
        raise NotImplementedError

    def __or__(self, other: "ValuePattern") -> "ValuePattern":
        return OneOf(self, other)

    def bind(self, name: str) -> "ValuePattern":
        """This pattern, binding the matched value to ``name`` (a name bound twice binds one value)."""
        return Bind(name, self)


class Wildcard(ValuePattern):
    """Any present value (an input, a constant or a node output), optionally with ``where(value, graph)``."""

    def __init__(self, where: Callable | None = None):
        self.where = where

    def matches(self, graph, value, state, path, tracer):
        if not value:
            tracer.fail(state, path, repr(self), "an absent input")
        elif self.where is not None and not self.where(value, graph):
            tracer.fail(state, path, f"{self!r} whose predicate holds", f"{value} ({describe_value(graph, value)})")
        else:
            yield state

    def __repr__(self) -> str:
        return "Wildcard()"


class Constant(ValuePattern):
    """A graph constant.

    ``value``: every element must be close to it (``rtol``, ``atol``; a rule replacing ``x * 1``
    by ``x`` still checks that broadcasting did not change the shape); ``scalar``: the constant
    must have exactly one element; ``where(array)``: any predicate on the array.
    """

    def __init__(self, value: float | None = None, where: Callable | None = None, scalar: bool = False,
                 rtol: float = 1e-4, atol: float = 1e-7):
        self.value, self.where, self.scalar, self.rtol, self.atol = value, where, scalar, rtol, atol

    def matches(self, graph, value, state, path, tracer):
        if not value or not graph.is_constant(value):
            tracer.fail(state, path, repr(self), describe_value(graph, value))
            return
        array = graph.constants[value]
        if self.scalar and array.size != 1:
            tracer.fail(state, path, repr(self), f"constant {value} of shape {array.shape}")
        elif self.value is not None and not (array.dtype.kind in "fiub" and np.allclose(
                array.astype(np.float64), self.value, rtol=self.rtol, atol=self.atol)):
            tracer.fail(state, path, repr(self), f"constant {value} = {_array_text(array)}")
        elif self.where is not None and not self.where(array):
            tracer.fail(state, path, f"{self!r} whose predicate holds", f"constant {value} = {_array_text(array)}")
        else:
            yield state

    def __repr__(self) -> str:
        args = [] if self.value is None else [f"{self.value:g}"]
        return f"Constant({', '.join(args + (['scalar=True'] if self.scalar else []))})"


def _array_text(array) -> str:
    if array.size == 1:
        return f"{array.reshape(()).item():g}"
    return f"an array of shape {array.shape}"


def _attr_equal(have, want) -> bool:
    if isinstance(want, float) or isinstance(have, float):
        try:
            return math.isclose(float(have), float(want), rel_tol=1e-6, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    if isinstance(want, (list, tuple)):
        return isinstance(have, tuple) and len(have) == len(want) and all(map(_attr_equal, have, want))
    return have == want


class Op(ValuePattern):
    """A value computed by a node of kind ``op`` (a name or a tuple of names).

    Parameters
    ----------
    args : patterns for the node's inputs in order, or None for any inputs. Inputs past the
        patterns given must be absent; an absent input (``""``) matches only ``Optional``.
    attrs : attribute -> required value, or a predicate on the value (the op's default is used
        when the node does not set it).
    where : predicate ``where(node, graph)``.
    single_use : the node's outputs are read only by nodes of the match and are not graph
        outputs, so a rewrite may drop it (not checked for the match's root).
    commutative : try both operand orders (default: for Add and Mul).
    output : which output of the node the value must be (None: any).
    """

    def __init__(self, op, args=None, attrs=None, where: Callable | None = None, single_use: bool = False,
                 commutative: bool | None = None, output: int | None = 0):
        self.ops = (op,) if isinstance(op, str) else tuple(op)
        self.args = None if args is None else tuple(args)
        self.attrs = dict(attrs or {})
        self.where = where
        self.single_use = single_use
        if commutative is None:
            commutative = all(o in COMMUTATIVE for o in self.ops)
        self.commutative = commutative and self.args is not None and len(self.args) == 2
        self.output = output

    def __repr__(self) -> str:
        return f"Op({self.ops[0]!r})" if len(self.ops) == 1 else f"Op({self.ops!r})"

    def matches(self, graph, value, state, path, tracer):
        node = graph.producer(value) if value else None
        if node is None or node.op not in self.ops:
            tracer.fail(state, path, repr(self), describe_value(graph, value))
            return
        if self.output is not None and node.outputs.index(value) != self.output:
            tracer.fail(state, path, f"{self!r} output {self.output}",
                        f"output {node.outputs.index(value)} of node {node.name}")
            return
        for key, want in self.attrs.items():
            have = node.attr(key)
            if have is None:
                have = _default_attr(node.op, key)
            ok = want(have) if callable(want) else _attr_equal(have, want)
            if not ok:
                shown = "a predicate" if callable(want) else repr(want)
                tracer.fail(state, f"{path}.attrs[{key!r}]", shown, f"{have!r} at node {node.name}")
                return
        if self.where is not None and not self.where(node, graph):
            tracer.fail(state, path, f"{self!r} whose predicate holds", f"node {node.name} where it does not")
            return
        known = state.nodes.get(node.name)
        state = state.copy()
        state.nodes[node.name] = node
        if self.single_use and known is None:
            state.single_use += ((path, node),)
        if self.args is None:
            yield state
            return
        inputs = node.inputs
        if any(inputs[len(self.args):]):
            tracer.fail(state, path, f"{self!r} with {len(self.args)} input(s)",
                        f"{len(inputs)} inputs at node {node.name}")
            return
        inputs = inputs + ("",) * (len(self.args) - len(inputs))
        orders = [(tuple(range(len(self.args))), "")]
        if self.commutative:
            orders.append(((1, 0), " (operands swapped)"))
        for order, note in orders:
            yield from _match_args(graph, list(self.args), [inputs[i] for i in order],
                                   list(range(len(self.args))), state, path, note, tracer)


def _default_attr(kind: str, key: str):
    """The op's default for attribute ``key`` (None for an unknown op, attribute or a required one)."""
    try:
        default = get_op(kind).attrs.get(key)
    except UnknownOpError:
        return None
    return None if default is REQUIRED else default


def _match_args(graph, patterns, values, indices, state, path, note, tracer):
    if not patterns:
        yield state
        return
    sub = f"{path}.args[{indices[0]}]{note}"
    for s in patterns[0].matches(graph, values[0], state, sub, tracer):
        yield from _match_args(graph, patterns[1:], values[1:], indices[1:], s, path, note, tracer)


class Optional(ValuePattern):
    """An input that may be absent (``""``, e.g. a Conv without bias) or else matches ``pattern``."""

    def __init__(self, pattern: ValuePattern | None = None):
        self.pattern = pattern if pattern is not None else Wildcard()

    def matches(self, graph, value, state, path, tracer):
        if not value:
            yield state
        else:
            yield from self.pattern.matches(graph, value, state, path, tracer)

    def __repr__(self) -> str:
        return f"Optional({self.pattern!r})"


class OneOf(ValuePattern):
    """Alternatives, tried in order: ``p | q``."""

    def __init__(self, *alternatives: ValuePattern):
        flat = []
        for a in alternatives:
            flat.extend(a.alternatives if isinstance(a, OneOf) else (a,))
        self.alternatives = tuple(flat)

    def matches(self, graph, value, state, path, tracer):
        for i, alt in enumerate(self.alternatives):
            yield from alt.matches(graph, value, state, f"{path}.alt[{i}]", tracer)

    def __repr__(self) -> str:
        return "(" + " | ".join(map(repr, self.alternatives)) + ")"


class Bind(ValuePattern):
    """``pattern``, binding the value it matches to ``name``; a second binding must be the same value."""

    def __init__(self, name: str, pattern: ValuePattern | None = None):
        self.name = name
        self.pattern = pattern if pattern is not None else Wildcard()

    def matches(self, graph, value, state, path, tracer):
        bound = state.bindings.get(self.name)
        if bound is not None and bound[0] != value:
            tracer.fail(state, path, f"the value bound to {self.name!r} ({bound[0]})",
                        f"{value} ({describe_value(graph, value)})")
            return
        for s in self.pattern.matches(graph, value, state, path, tracer):
            if bound is None:
                s = s.copy()
                node = graph.producer(value) if _matches_a_node(self.pattern) else None
                s.bindings[self.name] = (value, node)
            yield s

    def __repr__(self) -> str:
        return f"{self.pattern!r}.bind({self.name!r})"


def _matches_a_node(pattern: ValuePattern) -> bool:
    """Whether ``pattern`` only matches values computed by a node it matched (then a bind names the node)."""
    if isinstance(pattern, Bind):
        return _matches_a_node(pattern.pattern)
    if isinstance(pattern, OneOf):
        return all(_matches_a_node(p) for p in pattern.alternatives)
    return isinstance(pattern, Op)


def bind(name: str, pattern: ValuePattern | None = None) -> ValuePattern:
    """``pattern`` (default: any value) bound to ``name``."""
    return Bind(name, pattern)


def check_single_use(graph: Graph, root: Node | None, state: State, tracer: Tracer) -> bool:
    """Whether every ``single_use`` node's outputs are read only inside the match (not the root's)."""
    for path, node in state.single_use:
        if root is not None and node.name == root.name:
            continue
        for v in node.outputs:
            if not v:
                continue
            if v in graph.outputs:
                tracer.fail(COMPLETE, path, f"{_describe_node(node)} used only inside the match",
                            f"{v} is a graph output")
                return False
            outside = [c.name for c in graph.consumers(v) if c.name not in state.nodes]
            if outside:
                tracer.fail(COMPLETE, path, f"{_describe_node(node)} used only inside the match",
                            f"{v} also used by node {outside[0]}")
                return False
    return True


def _describe_node(node: Node) -> str:
    return f"{node.op} at node {node.name}"
