"""The pattern matcher: declarative patterns over the graph IR, matching, explaining, rewriting.

- ``patterns``: ``Wildcard``, ``Op`` (attrs, ``where``, ``single_use``, commutative Add/Mul,
  ``output``), ``Constant`` (by value with a tolerance, ``scalar``, ``where``), ``Optional``,
  ``p | q``, ``bind`` / ``.bind``;
- ``match``: ``match(graph, pattern, at)``, ``match_all(graph, pattern)``, ``explain(...)`` (which
  sub-pattern failed at which node and what it found);
- ``rewrite``: ``Rule`` tables applied by a ``Rewriter`` (fixpoint or once, priorities, per-rule
  counts, near misses); callbacks build replacements with an ``Emitter``.
"""
from graph.pattern.patterns import (  # noqa: F401
    COMMUTATIVE, Bind, Constant, OneOf, Op, Optional, Tracer, ValuePattern, Wildcard, bind)
from graph.pattern.match import Match, explain, match, match_all  # noqa: F401
from graph.pattern.rewrite import (  # noqa: F401
    Emitter, Replacement, RewriteError, Rewriter, Rule, RuleStats, apply_replacement, rewrite)
