"""Which values are stored in a layout other than the graph's row-major one.

A conv's output (and its fused epilogue) is computed with the channels innermost,
:data:`~graph.lower.core.NHWC` = (N, H*W, C): the conv is then a matrix product whose vector
axis is the output channels, with the weights packed into panels, which the generated space
tiles well; in NCHW the vector axis is a row of the image (7 to 112 wide), and the heuristic
start ran 5-10x slower (docs/decisions/018-model-conv-layout.md). Consumers read such a value
through its layout (index arithmetic in :class:`~graph.lower.core.Val`), so any op may follow.
A group of pools and elementwise ops that reads such a value keeps the layout (its output is
NHWC too: the pool then vectorizes over the channels instead of reading across them). Graph
inputs and outputs stay row-major.
"""
from __future__ import annotations

from graph.ir import Graph
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
    elementwise ops reading an NHWC value (graph outputs excepted); ``groups`` in topological order."""
    layouts = {}
    for g in groups:
        if len(g.outputs) != 1:
            continue
        out = g.outputs[0]
        t = graph.types[out]
        if out in graph.outputs or t.rank != 4:
            continue
        anchor = next((n for n in g.nodes if n.op == "Conv"), None)
        if anchor is not None:
            if t.shape == graph.types[anchor.outputs[0]].shape:
                layouts[out] = NHWC
        elif _keeps_layout(graph, g, layouts):
            layouts[out] = NHWC
    return layouts
