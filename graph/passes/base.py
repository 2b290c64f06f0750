"""What a graph pass is: a named pure function ``Graph -> Graph`` (the same object when nothing changed).

Rule-based passes (:class:`RulePass`) apply a rule table with the pattern rewriter and keep the
per-rule counts of their last run, which ``run_passes(..., verbose=True)`` prints.
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


class RulePass:
    """A pass that rewrites with a rule table (to a fixpoint, or one sweep when ``once``).

    ``last_stats`` holds the per-rule counts (attempts, matches, rewrites) of the latest call.
    """

    def __init__(self, name: str, rules, once: bool = False, reverse: bool = False):
        self.name = name
        self.rules = tuple(rules)
        self.once = once
        self.reverse = reverse
        self.last_stats: dict = {}
        self.last_report = ""

    def __call__(self, graph: Graph) -> Graph:
        rewriter = Rewriter(self.rules, reverse=self.reverse)
        out = rewriter.run(graph, once=self.once)
        self.last_stats = rewriter.stats
        self.last_report = rewriter.format_stats()
        return out

    def __repr__(self) -> str:
        return f"RulePass({self.name!r}, {len(self.rules)} rules)"
