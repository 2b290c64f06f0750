"""Matching patterns against a graph: ``match`` at one place, ``match_all`` everywhere, ``explain`` why not.

>>> import numpy as np
>>> from graph.builder import GraphBuilder
>>> from graph.pattern import Op, Wildcard, Constant, match, explain
>>> b = GraphBuilder("g")
>>> x = b.input("x", (2, 3))
>>> y = b.op("Mul", [b.constant("one", np.float32(1)), x], name="mul")
>>> g = b.build([y])
>>> m = match(g, Op("Mul", args=[Wildcard().bind("x"), Constant(1.0)]), at="mul")
>>> m["x"], [n.name for n in m.nodes]
('x', ['mul'])
>>> print(explain(g, Op("Add", args=[Wildcard(), Wildcard()]), at="mul"))
no match at mul: Op('Add'): expected Op('Add'), found Mul at node mul
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graph.ir import Graph, GraphError, Node
from graph.pattern.patterns import NO_TRACE, State, Tracer, ValuePattern, check_single_use


@dataclass(frozen=True)
class Match:
    """A successful match of a pattern rooted at the value ``root``.

    ``values`` maps each bound name to the value it matched; ``bindings`` maps it to the node
    that computes it when the name was bound on an ``Op`` pattern, else to the value name.
    ``nodes`` are the matched nodes in graph order.
    """
    graph: Graph
    root: str
    values: dict
    bindings: dict
    nodes: tuple

    @property
    def root_node(self) -> Node | None:
        return self.graph.producer(self.root)

    def __getitem__(self, name: str) -> str:
        """The value bound to ``name``."""
        try:
            return self.values[name]
        except KeyError:
            raise KeyError(f"the pattern binds no name {name!r}; it binds {sorted(self.values)}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.values and bool(self.values[name])

    def node(self, name: str) -> Node:
        """The node computing the value bound to ``name``."""
        node = self.graph.producer(self[name])
        if node is None:
            raise GraphError(f"{name!r} is bound to {self[name]!r}, which no node computes")
        return node

    def array(self, name: str) -> np.ndarray:
        """The constant array bound to ``name``."""
        value = self[name]
        if not self.graph.is_constant(value):
            raise GraphError(f"{name!r} is bound to {value!r}, which is not a constant")
        return self.graph.constants[value]


def _root_value(graph: Graph, at) -> str:
    if isinstance(at, Node):
        return at.outputs[0]
    if at in graph.types:
        return at
    return graph.node(at).outputs[0]


def _first(graph: Graph, pattern: ValuePattern, value: str, tracer: Tracer) -> Match | None:
    root = graph.producer(value)
    for state in pattern.matches(graph, value, State(), repr(pattern), tracer):
        if check_single_use(graph, root, state, tracer):
            return _to_match(graph, value, state)
    return None


def _to_match(graph: Graph, value: str, state: State) -> Match:
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    nodes = tuple(sorted(state.nodes.values(), key=lambda n: order[n.name]))
    values = {k: v for k, (v, _) in state.bindings.items()}
    bindings = {k: (n if n is not None else v) for k, (v, n) in state.bindings.items()}
    return Match(graph, value, values, bindings, nodes)


def match(graph: Graph, pattern: ValuePattern, at, tracer: Tracer | None = None) -> Match | None:
    """The first match of ``pattern`` rooted at ``at`` (a Node, a node name or a value name), or None."""
    return _first(graph, pattern, _root_value(graph, at), tracer or NO_TRACE)


def match_all(graph: Graph, pattern: ValuePattern) -> list:
    """Every node output at which ``pattern`` matches (the first match there), in graph order."""
    found = []
    for node in graph.nodes:
        for value in node.outputs:
            if value:
                m = _first(graph, pattern, value, NO_TRACE)
                if m is not None:
                    found.append(m)
    return found


def explain(graph: Graph, pattern: ValuePattern, at, detail: bool = False) -> str:
    """Why ``pattern`` does (not) match at ``at``, in one line.

    On failure: the sub-pattern that failed furthest into the match, what it expected and what
    it found, e.g. ``Op('BatchNormalization').args[0]: expected Op('Conv'), found MatMul at node mm1``.
    ``detail`` adds one line per failed attempt (alternatives, operand orders), furthest first.
    """
    value = _root_value(graph, at)
    tracer = Tracer()
    m = _first(graph, pattern, value, tracer)
    if m is not None:
        binds = ", ".join(f"{k}={v}" for k, v in sorted(m.values.items()))
        return f"matched at {value}: nodes {', '.join(n.name for n in m.nodes)}" + \
            (f"; binds {binds}" if binds else "")
    text = f"no match at {value}: {tracer.reason()}"
    if detail:
        ranked = sorted(tracer.failures, key=lambda f: (-f[0], -f[1]))
        text += "".join(f"\n  {p}: expected {e}, found {f}" for _, _, p, e, f in ranked)
    return text
