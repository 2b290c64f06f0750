"""Constant folding: every node whose inputs are all constants is evaluated and becomes constants.

This removes the shape plumbing exporters emit (Shape, Gather, Concat, ... once the importer has
pinned the shapes) and precomputes anything that depends on weights only. The one exception:
an ``Expand`` or ``ConstantOfShape`` whose output exceeds :data:`LARGE_OUTPUT` elements and feeds
a node that stays is kept as a node, so a broadcast to a big activation shape does not turn into
a big weight.
"""
from __future__ import annotations

import numpy as np

from graph.interpret import evaluate_node
from graph.ir import Graph

LAZY_OPS = frozenset({"Expand", "ConstantOfShape"})
LARGE_OUTPUT = 1 << 20


def fold_constants(graph: Graph) -> Graph:
    """``graph`` with its constant subgraphs evaluated (the same object when there are none)."""
    env = dict(graph.constants)
    folded, lazy = set(), []
    for node in graph.nodes:
        if not all(v in env for v in node.inputs if v):
            continue
        outs = evaluate_node(node, [env[v] if v else None for v in node.inputs])
        for v, a in zip(node.outputs, outs):
            if v:
                t = graph.types[v]
                env[v] = np.asarray(a).astype(t.dtype, copy=False).reshape(t.shape)
        if node.op in LAZY_OPS and any(env[v].size > LARGE_OUTPUT for v in node.outputs if v):
            lazy.append(node)
        else:
            folded.add(node.name)
    # A big lazy output stays a node when something that stays (or the graph's result) reads it.
    needed = set(graph.outputs)
    needed |= {v for n in graph.nodes if n.name not in folded and n not in lazy for v in n.inputs}
    for node in reversed(lazy):
        if any(v in needed for v in node.outputs if v):
            needed.update(node.inputs)
        else:
            folded.add(node.name)
    if not folded:
        return graph
    nodes = [n for n in graph.nodes if n.name not in folded]
    defined = {v for n in nodes for v in n.outputs}
    read = {v for n in nodes for v in n.inputs if v} | set(graph.outputs)
    constants = dict(graph.constants)
    constants.update({v: env[v] for v in read if v in env and v not in defined and v not in constants})
    return graph.replace(nodes=nodes, constants=constants)
