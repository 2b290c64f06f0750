"""Dead-code and common-subexpression elimination."""
from __future__ import annotations

import hashlib

import numpy as np

from graph.ir import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    """``graph`` without the nodes and constants its outputs do not depend on."""
    live = set(graph.outputs)
    keep = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs if v):
            keep.append(node)
            live.update(v for v in node.inputs if v)
    keep.reverse()
    constants = {k: a for k, a in graph.constants.items() if k in live}
    if len(keep) == len(graph.nodes) and len(constants) == len(graph.constants):
        return graph
    return graph.replace(nodes=keep, constants=constants)


def _constant_key(a: np.ndarray) -> tuple:
    return a.dtype.str, a.shape, hashlib.blake2b(np.ascontiguousarray(a).view(np.uint8)).digest()


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """``graph`` with equal constants merged and nodes of the same op, attributes and inputs computed once.

    A node whose output is a graph output is kept (the output's name must stay defined).
    """
    rename: dict = {}
    seen_const: dict = {}
    for name, a in graph.constants.items():
        key = _constant_key(a)
        first = seen_const.get(key)
        if first is not None and name not in graph.outputs and np.array_equal(graph.constants[first], a):
            rename[name] = first
        else:
            seen_const.setdefault(key, name)
    seen: dict = {}
    nodes = []
    for node in graph.nodes:
        inputs = tuple(rename.get(v, v) for v in node.inputs)
        node = node if inputs == node.inputs else node.with_(inputs=inputs)
        key = (node.op, node.attrs, inputs)
        first = seen.get(key)
        if first is not None and not any(v in graph.outputs for v in node.outputs):
            rename.update({v: w for v, w in zip(node.outputs, first.outputs) if v})
            continue
        seen.setdefault(key, node)
        nodes.append(node)
    if not rename:
        return graph
    constants = {k: a for k, a in graph.constants.items() if k not in rename}
    return graph.replace(nodes=nodes, constants=constants)
