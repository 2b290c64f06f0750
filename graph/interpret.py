"""Running a graph with numpy: each op's reference semantics, node by node.

The reference for passes (a pass must not change these numbers), constant folding and tests.
"""
from __future__ import annotations

import numpy as np

from graph.ir import Graph, GraphError
from graph.ops.registry import get_op


def check_feeds(graph: Graph, feeds: dict) -> dict:
    """``feeds`` as arrays, checked against the graph's inputs; GraphError naming the first problem."""
    unknown = sorted(set(feeds) - set(graph.inputs))
    if unknown:
        raise GraphError(f"{graph.name}: no input named {unknown[0]!r}; inputs: {', '.join(graph.inputs)}")
    arrays = {}
    for name in graph.inputs:
        if name not in feeds:
            raise GraphError(f"{graph.name}: input {name!r} is missing")
        a = np.asarray(feeds[name])
        t = graph.types[name]
        if a.shape != t.shape:
            raise GraphError(f"{graph.name}: input {name!r} has shape {a.shape}, expected {t.shape}")
        if a.dtype.name != t.dtype:
            raise GraphError(f"{graph.name}: input {name!r} has dtype {a.dtype.name}, expected {t.dtype}")
        arrays[name] = a
    return arrays


def evaluate_node(node, arrays: list) -> list:
    """One node's outputs from its input arrays (None for absent optional inputs)."""
    return get_op(node.op).evaluate(node, arrays)


def run(graph: Graph, feeds: dict) -> dict:
    """The graph's outputs (name -> array) for the input arrays ``feeds``."""
    env = dict(graph.constants)
    env.update(check_feeds(graph, feeds))
    for node in graph.nodes:
        outs = evaluate_node(node, [env[v] if v else None for v in node.inputs])
        for v, a in zip(node.outputs, outs):
            if v:
                t = graph.types[v]
                a = np.asarray(a)
                if a.shape != t.shape:
                    raise GraphError(f"node {node.name} ({node.op}) produced shape {a.shape}, its type "
                                     f"says {t.shape}")
                env[v] = a.astype(t.dtype, copy=False)
    return {v: env[v] for v in graph.outputs}
