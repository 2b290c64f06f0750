"""What a graph pass is: a named pure function ``Graph -> Graph`` (the same object when nothing changed).

Rule-based passes (:class:`RulePass`) apply a rule table with the pattern rewriter; ``run``
also returns the per-rule counts, which ``run_passes(..., verbose=True)`` prints.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from graph.ir import Graph
from graph.pattern import Rewriter


@dataclass(frozen=True)
class GraphPass:
    """A named pass: ``fn(graph) -> graph``."""
    name: str
    fn: Callable

    def __call__(self, graph: Graph) -> Graph:
        return self.fn(graph)


@dataclass(frozen=True)
class RulePass:
    """A pass that rewrites with a rule table (to a fixpoint, or one sweep when ``once``;
    consumers first when ``reverse``)."""
    name: str
    rules: tuple
    once: bool = False
    reverse: bool = False

    def run(self, graph: Graph, near_misses: bool = False) -> tuple:
        """(the rewritten graph, the :class:`~graph.pattern.Rewriter` with its per-rule counts and,
        with ``near_misses``, why each rule did not fire where it got furthest)."""
        rewriter = Rewriter(self.rules, reverse=self.reverse, near_misses=near_misses)
        return rewriter.run(graph, once=self.once), rewriter

    def __call__(self, graph: Graph) -> Graph:
        return self.run(graph)[0]
