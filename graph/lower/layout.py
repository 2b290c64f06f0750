"""Which values are stored in a layout other than the graph's row-major one.

A conv's output (and its fused epilogue) is computed with the channels innermost,
:data:`~graph.lower.core.NHWC` = (N, H*W, C): the conv is then a matrix product whose vector
axis is the output channels, with the weights packed into panels, which the generated space
tiles well; in NCHW the vector axis is a row of the image (7 to 112 wide), and the heuristic
start ran 5-10x slower (docs/decisions/024-model-conv-nhwc-layout.md). Consumers read such a value
through its layout (index arithmetic in :class:`~graph.lower.core.Val`), so any op may follow.
A group of pools and elementwise ops that reads such a value keeps the layout (its output is
NHWC too: the pool then vectorizes over the channels instead of reading across them). Graph
inputs and outputs stay row-major: a graph output such a group computes is renamed
``<name>.nhwc`` and an Identity group (a transposing copy) writes the output
(:func:`plan_layouts`).
"""
from __future__ import annotations

import dataclasses

from graph.ir import Graph, Node
from graph.lower.core import NHWC
from graph.ops.registry import Pattern, get_op

SPATIAL = ("MaxPool", "AveragePool", "GlobalAveragePool")
"""Ops that keep a value's NHWC layout (besides elementwise and broadcast ops)."""


def _keeps_layout(graph: Graph, group, layouts: dict) -> bool:
    for n in group.nodes:
        try:
            pattern = get_op(n.op).pattern
        except KeyError:
            return False
        if n.op not in SPATIAL and pattern > Pattern.BROADCAST:
            return False
    return any(layouts.get(v) == NHWC for v in group.inputs)


def choose_layouts(graph: Graph, groups: list) -> dict:
    """Value -> layout: NHWC for the output of every Conv group, and of every group of pools and
    elementwise ops reading an NHWC value, graph outputs excepted (:func:`plan_layouts` handles
    those); ``groups`` in topological order."""
    layouts = {}
    for g in groups:
        if g.outputs[0] not in graph.outputs and _wants_nhwc(graph, g, layouts):
            layouts[g.outputs[0]] = NHWC
    return layouts


def _wants_nhwc(graph: Graph, group, layouts: dict) -> bool:
    if len(group.outputs) != 1 or group.outputs[0] != group.nodes[-1].outputs[0]:
        return False
    t = graph.types[group.outputs[0]]
    if t.rank != 4:
        return False
    anchor = next((n for n in group.nodes if n.op == "Conv"), None)
    if anchor is not None:
        return t.shape == graph.types[anchor.outputs[0]].shape
    return _keeps_layout(graph, group, layouts)


def plan_layouts(graph: Graph, groups: list) -> tuple:
    """``(graph, groups, layouts)``: NHWC for every Conv group's output and every group of pools and
    elementwise ops reading an NHWC value; where such a value is a graph output, the group writes
    ``<name>.nhwc`` and an Identity group after it the row-major output (groups stay in order)."""
    from graph.fusion import FusedGroup
    layouts, out_groups, types = {}, [], dict(graph.types)
    for g in groups:
        if not _wants_nhwc(graph, g, layouts):
            out_groups.append(g)
            continue
        out = g.outputs[0]
        if out not in graph.outputs:
            layouts[out] = NHWC
            out_groups.append(g)
            continue
        inner = f"{out}.nhwc"
        while inner in types:
            inner += "_"
        types[inner] = graph.types[out]
        last = g.nodes[-1].with_(outputs=(inner,))
        out_groups.append(dataclasses.replace(g, nodes=g.nodes[:-1] + (last,), outputs=(inner,)))
        copy = Node(f"{g.nodes[-1].name}.relayout", "Identity", (inner,), (out,))
        out_groups.append(FusedGroup((copy,), (inner,), (out,), Pattern.ELEMWISE))
        layouts[inner] = NHWC
    if len(out_groups) == len(groups):
        return graph, groups, layouts
    nodes = tuple(n for g in out_groups for n in g.nodes)
    return graph.replace(nodes=nodes, types=types), out_groups, layouts
