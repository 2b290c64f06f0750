"""Rewriting a graph with rule tables (tinygrad's ``PatternMatcher``, MLIR's DRR).

A :class:`Rule` pairs a pattern with a callback ``callback(graph, match)`` that returns what
replaces the matched root's value: an existing value's name, or a :class:`Replacement` (new
nodes and constants, built with an :class:`Emitter`), or None to decline. The driver
substitutes the replacement for every read of the root, keeps graph output names, drops the
matched nodes nothing reads any more, and returns a new Graph (the same object when no rule
fired).

>>> import numpy as np
>>> from graph.builder import GraphBuilder
>>> from graph.pattern import Op, Wildcard, Constant, Rule, Rewriter
>>> b = GraphBuilder("g")
>>> x = b.input("x", (2, 3))
>>> y = b.op("Relu", [b.op("Mul", [x, b.constant("one", np.float32(1))])])
>>> mul_one = Rule("mul-one", Op("Mul", args=[Wildcard().bind("x"), Constant(1.0)]),
...                lambda graph, m: m["x"])
>>> rw = Rewriter([mul_one])
>>> print(rw.run(b.build([y])))
graph g(x: float32[2,3]) -> (Relu_1: float32[2,3])
  Relu_1: float32[2,3] = Relu(x)
>>> rw.stats["mul-one"]
RuleStats(attempts=3, matches=1, rewrites=1)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from graph.ir import Graph, GraphError, Node, TensorType, topological_order
from graph.ops.registry import infer_types
from graph.pattern.match import Match, match
from graph.pattern.patterns import Tracer, ValuePattern

# A failed match that got this many nodes into the pattern is a near miss worth reporting.
NEAR_MISS_NODES = 2


class RewriteError(GraphError):
    """A rule produced something that cannot replace what it matched (a bug in the rule)."""


@dataclass(frozen=True)
class Replacement:
    """New nodes and constants, and the value (new or existing) that replaces the matched root."""
    value: str
    nodes: tuple = ()
    constants: Mapping = field(default_factory=dict)
    types: Mapping = field(default_factory=dict)
    names: Mapping = field(default_factory=dict)     # new node -> the name asked for, if it was taken


class Emitter:
    """Builds a :class:`Replacement` against ``graph``: fresh names, types inferred at once."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list = []
        self.constants: dict = {}
        self.types: dict = {}
        self.names: dict = {}
        self._taken = set(graph.types) | {n.name for n in graph.nodes}

    def fresh(self, base: str) -> str:
        """A name no value or node of the graph (or of this emitter) has."""
        name, i = base, 0
        while name in self._taken:
            i += 1
            name = f"{base}_{i}"
        self._taken.add(name)
        return name

    def constant(self, base: str, array) -> str:
        """A new constant; returns its name."""
        a = np.asarray(array)
        name = self.fresh(base)
        self.constants[name] = a
        self.types[name] = TensorType(a.shape, a.dtype.name)
        return name

    def op(self, kind: str, inputs, name: str | None = None, **attrs) -> str:
        """A new single-output node (output named like the node); returns its output's name.

        ``name``: the node's name, or a fresh variant while a node that the rewrite drops holds it.
        Types are inferred at once, so a wrong shape fails here naming the new node.
        """
        wanted = name or kind
        name = self.fresh(wanted)
        if name != wanted:
            self.names[name] = wanted
        ins = tuple("" if v is None else v for v in inputs)
        node = Node(name, kind, ins, (name,), attrs)
        types = [self._type(v) if v else None for v in ins]
        (t,) = infer_types(node, types)
        self.types[name] = t
        self.nodes.append(node)
        return name

    def _type(self, value: str) -> TensorType:
        return self.types[value] if value in self.types else self.graph.type_of(value)

    def replace_with(self, value: str) -> Replacement:
        """The replacement: everything emitted, with ``value`` standing for the matched root."""
        return Replacement(value, tuple(self.nodes), dict(self.constants), dict(self.types), dict(self.names))


@dataclass(frozen=True)
class Rule:
    """A named rewrite: where ``pattern`` matches, ``callback(graph, match)`` says what replaces it.

    Rules with a higher ``priority`` are tried first at each node; ties keep table order.
    """
    name: str
    pattern: ValuePattern
    callback: Callable
    priority: int = 0


@dataclass
class RuleStats:
    """How often a rule was tried, matched, and rewrote the graph (its callback did not decline)."""
    attempts: int = 0
    matches: int = 0
    rewrites: int = 0


class Rewriter:
    """Applies a rule table to graphs, to a fixpoint (default) or in a single sweep.

    ``rules``: :class:`Rule` objects or tuples ``(name, pattern, callback[, priority])``.

    A sweep visits the nodes in graph order (``reverse``: consumers first, so the largest match
    rooted at a chain's end wins over a smaller one inside it); at each, the rules in priority
    order, the first whose pattern matches and whose callback returns a replacement wins.
    ``stats`` accumulates per-rule counts over every ``run``. With ``near_misses``, ``misses``
    keeps per rule why it did not fire where it got furthest: failed matches that had matched
    at least :data:`NEAR_MISS_NODES` nodes (with :func:`~graph.pattern.explain`'s reason) and
    matches whose callback declined.
    """

    def __init__(self, rules, max_sweeps: int = 50, reverse: bool = False, near_misses: bool = False):
        rules = [r if isinstance(r, Rule) else Rule(*r) for r in rules]
        names = [r.name for r in rules]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"rule names must be unique; repeated: {', '.join(dup)}")
        self.rules = tuple(sorted(rules, key=lambda r: -r.priority))
        self.max_sweeps = max_sweeps
        self.reverse = reverse
        self.stats = {r.name: RuleStats() for r in rules}
        self.near_misses = near_misses
        self.misses = {r.name: {} for r in rules}      # rule -> {text: None}, an ordered set

    def run(self, graph: Graph, once: bool = False) -> Graph:
        """The rewritten graph (``graph`` itself if no rule fired)."""
        for _ in range(self.max_sweeps):
            graph, changed = self._sweep(graph)
            if not changed or once:
                return graph
        fired = [name for name, s in self.stats.items() if s.rewrites]
        raise RewriteError(f"rewriting {graph.name} did not reach a fixpoint after {self.max_sweeps} sweeps "
                           f"(rules that fired: {', '.join(fired)})")

    def _sweep(self, graph: Graph):
        changed = False
        names = [n.name for n in graph.nodes]
        for name in reversed(names) if self.reverse else names:
            node = _node_named(graph, name)
            if node is None:
                continue
            for rule in self.rules:
                new = self._try(graph, rule, node)
                if new is not None:
                    graph, changed = new, True
                    break
        return graph, changed

    def _try(self, graph: Graph, rule: Rule, node: Node) -> Graph | None:
        stats = self.stats[rule.name]
        for value in node.outputs:
            if not value:
                continue
            stats.attempts += 1
            tracer = Tracer() if self.near_misses else None
            m = match(graph, rule.pattern, value, tracer=tracer)
            if m is None:
                if tracer is not None and tracer.progress() >= NEAR_MISS_NODES:
                    self.misses[rule.name][f"at {value}: {tracer.reason()}"] = None
                continue
            stats.matches += 1
            result = rule.callback(graph, m)
            if result is None:
                if self.near_misses:
                    self.misses[rule.name][f"at {value}: matched, the rule declined"] = None
                continue
            if isinstance(result, str):
                result = Replacement(result)
            if _is_noop(graph, value, result):
                continue
            stats.rewrites += 1
            return apply_replacement(graph, m, result, rule.name)
        return None

    def format_stats(self, misses_shown: int = 3) -> str:
        """One line per rule (attempts, matches, rewrites), then its first near misses, if kept."""
        width = max((len(n) for n in self.stats), default=4)
        lines = []
        for name, s in self.stats.items():
            lines.append(f"  {name:<{width}}  attempts {s.attempts:>5}  matches {s.matches:>4}  "
                         f"rewrites {s.rewrites:>4}")
            misses = list(self.misses[name])
            lines += [f"    near miss {text}" for text in misses[:misses_shown]]
            if len(misses) > misses_shown:
                lines.append(f"    ... and {len(misses) - misses_shown} more near misses")
        return "\n".join(lines)


def _is_noop(graph: Graph, root: str, repl: Replacement) -> bool:
    """Whether applying ``repl`` would give back the same graph: the root itself, or a graph
    output that already is the Identity the driver would put there to keep its name."""
    if repl.nodes:
        return False
    if repl.value == root:
        return True
    node = graph.producer(root)
    pinned = repl.value in graph.inputs or graph.is_constant(repl.value) or repl.value in graph.outputs
    return root in graph.outputs and pinned and node.op == "Identity" and node.inputs == (repl.value,)


def _node_named(graph: Graph, name: str) -> Node | None:
    index = graph.__dict__.get("_by_name")
    if index is None:
        index = {n.name: n for n in graph.nodes}
        object.__setattr__(graph, "_by_name", index)
    return index.get(name)


def rewrite(graph: Graph, rules, once: bool = False, reverse: bool = False) -> Graph:
    """``graph`` rewritten by the rule table ``rules`` (see :class:`Rewriter`)."""
    return Rewriter(rules, reverse=reverse).run(graph, once=once)


# ------------------------------------------------------------------ applying a replacement

def _rename(nodes, old: str, new: str, defs: bool) -> list:
    """Reads of ``old`` renamed to ``new`` (and its definition too when ``defs``)."""
    out = []
    for n in nodes:
        ins = tuple(new if v == old else v for v in n.inputs)
        outs = tuple(new if v == old else v for v in n.outputs) if defs else n.outputs
        out.append(n if (ins, outs) == (n.inputs, n.outputs) else n.with_(inputs=ins, outputs=outs))
    return out


def apply_replacement(graph: Graph, m: Match, repl: Replacement, rule: str = "rewrite") -> Graph:
    """``graph`` with ``repl.value`` in place of the matched root; dead matched nodes dropped."""
    root = m.root
    types = dict(graph.types)
    types.update(repl.types)
    new = repl.value
    if new not in types:
        raise RewriteError(f"rule {rule}: the replacement value {new!r} is not defined")
    want, got = types[root], types[new]
    if (want.shape, want.dtype) != (got.shape, got.dtype):
        raise RewriteError(f"rule {rule}: the replacement {new} is {got}, the matched {root} is {want}")
    nodes = list(graph.nodes) + list(repl.nodes)
    constants = dict(graph.constants)
    constants.update(repl.constants)
    created = {v for n in repl.nodes for v in n.outputs}
    if root in graph.outputs or new in created:
        # The root's value keeps its name: a model output's must, and a new node's value takes
        # the matched one's so the names a reader knows survive. The old definition moves aside
        # (and is pruned); an input, constant or other output standing for an output gets an Identity.
        taken = set(types) | {n.name for n in nodes}
        aside = _fresh(f"{root}__replaced", taken)
        root_node = graph.producer(root)
        nodes = [n.with_(outputs=tuple(aside if v == root else v for v in n.outputs)) if n is root_node else n
                 for n in nodes]
        types[aside] = types[root]
        if any(new in n.outputs for n in nodes) and new not in graph.outputs:
            nodes = _rename(nodes, new, root, defs=True)
        else:
            nodes = _rename(nodes, root, new, defs=False)
            nodes.append(Node(_fresh(f"{root}_identity", taken), "Identity", (new,), (root,)))
    else:
        nodes = _rename(nodes, root, new, defs=False)
    candidates = {n.name for n in m.nodes} | {n.name for n in graph.nodes if root in n.outputs}
    nodes, constants = _prune(graph, nodes, constants, candidates)
    nodes = _preferred_names(nodes, repl.names)
    defined = list(graph.inputs) + list(constants)
    nodes = topological_order(nodes, defined)
    return graph.replace(nodes=nodes, constants=constants, types=types)


def _preferred_names(nodes: list, preferred: Mapping) -> list:
    """New nodes renamed to the names their rule asked for, where the node holding it is gone."""
    names = {n.name for n in nodes}
    out = []
    for n in nodes:
        want = preferred.get(n.name)
        if want and want != n.name and want not in names:
            names.add(want)
            n = n.with_(name=want)
        out.append(n)
    return out


def _fresh(base: str, taken: set) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def _prune(graph: Graph, nodes: list, constants: dict, candidates: set):
    """Drop candidate nodes (and constants they alone read) whose outputs nothing reads any more."""
    outputs = set(graph.outputs)
    while True:
        read = {v for n in nodes for v in n.inputs if v}
        dead = [n for n in nodes if n.name in candidates
                and not any(v and (v in read or v in outputs) for v in n.outputs)]
        if not dead:
            break
        dead_names = {n.name for n in dead}
        freed = {v for n in dead for v in n.inputs if v in constants}
        nodes = [n for n in nodes if n.name not in dead_names]
        still = {v for n in nodes for v in n.inputs}
        constants = {k: a for k, a in constants.items() if k not in freed or k in still or k in outputs}
    return nodes, constants
