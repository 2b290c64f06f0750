"""Which values are stored in a layout other than the graph's row-major one.

A conv's output (and its fused epilogue) is computed with the channels innermost,
:data:`~graph.lower.core.NHWC` = (N, H*W, C): the conv is then a matrix product whose vector
axis is the output channels, with the weights packed into panels, which the generated space
tiles well; in NCHW the vector axis is a row of the image (7 to 112 wide), and the heuristic
start ran 5-10x slower (docs/decisions/018-model-conv-layout.md). Consumers read such a value
through its layout (index arithmetic in :class:`~graph.lower.core.Val`), so any op may follow.
Graph inputs and outputs stay row-major.
"""
from __future__ import annotations

from graph.ir import Graph
from graph.lower.core import NHWC


def choose_layouts(graph: Graph, groups: list) -> dict:
    """Value -> layout for every group output computed by a Conv group (not a graph output)."""
    layouts = {}
    for g in groups:
        anchor = next((n for n in g.nodes if n.op == "Conv"), None)
        if anchor is None or len(g.outputs) != 1:
            continue
        out = g.outputs[0]
        t = graph.types[out]
        if out in graph.outputs or t.rank != 4 or t.shape != graph.types[anchor.outputs[0]].shape:
            continue
        layouts[out] = NHWC
    return layouts
