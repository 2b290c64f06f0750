"""The graph pass pipeline: a named list of passes, run in order, printable after each.

>>> from graph.passes import PIPELINE
>>> [p.name for p in PIPELINE]
['fold_constants', 'dce', 'simplify', 'cse', 'fold_pads', 'fold_batchnorm', 'recognize', 'dce']
"""
from __future__ import annotations

from typing import Callable

from graph.ir import Graph
from graph.passes.base import GraphPass, RulePass
from graph.passes.batchnorm import fold_batchnorm
from graph.passes.cleanup import eliminate_common_subexpressions, eliminate_dead_code
from graph.passes.fold import fold_constants
from graph.passes.pad import fold_pads
from graph.passes.recognize import recognize
from graph.passes.simplify import simplify

FOLD_CONSTANTS = GraphPass("fold_constants", fold_constants)
DCE = GraphPass("dce", eliminate_dead_code)
CSE = GraphPass("cse", eliminate_common_subexpressions)

# Folding first removes shape plumbing; simplification and CSE then leave one canonical copy of
# each computation, which is what the BatchNorm and Gelu/LayerNorm patterns expect to find.
PIPELINE = (FOLD_CONSTANTS, DCE, simplify, CSE, fold_pads, fold_batchnorm, recognize, DCE)


def get_pass(name: str):
    """The pipeline's pass called ``name`` (ValueError listing the names otherwise)."""
    for p in PIPELINE:
        if p.name == name:
            return p
    raise ValueError(f"no graph pass named {name!r}; passes: {', '.join(dict.fromkeys(p.name for p in PIPELINE))}")


def run_passes(graph: Graph, passes=None, print_after: bool | Callable | tuple = False, verbose: bool = False,
               log: Callable = print, trace: Callable | None = None) -> Graph:
    """Run ``passes`` (default :data:`PIPELINE`; pass objects or names) on ``graph`` in order.

    Parameters
    ----------
    print_after : True to log the graph after every pass, a collection of pass names to log
        after those only, or a callable ``print_after(pass_name, graph)`` called after each.
    verbose : log a line per pass (node and constant counts before and after) and, for rule
        passes, the per-rule attempts, matches and rewrites with the near misses (where a rule
        got furthest without firing, and why).
    log : where text goes (default ``print``).
    trace : a callable ``trace(pass_name, graph)`` called after each pass (besides ``print_after``).
    """
    for p in (PIPELINE if passes is None else passes):
        p = get_pass(p) if isinstance(p, str) else p
        before = graph
        rewriter = None
        if isinstance(p, RulePass):
            graph, rewriter = p.run(graph, near_misses=verbose)
        else:
            graph = p(graph)
        if verbose:
            state = "unchanged" if graph is before else (
                f"{len(before.nodes)} -> {len(graph.nodes)} nodes, "
                f"{len(before.constants)} -> {len(graph.constants)} constants")
            log(f"pass {p.name}: {state}")
            if rewriter is not None:
                log(rewriter.format_stats())
        if trace is not None:
            trace(p.name, graph)
        if callable(print_after):
            print_after(p.name, graph)
        elif print_after is True or (print_after and p.name in print_after):
            log(f"// after {p.name}{' (unchanged)' if graph is before else ''}\n{graph}")
    return graph
