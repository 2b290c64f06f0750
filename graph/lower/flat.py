"""A group whose every op is pointwise in space (a 1x1 stride-1 unpadded conv and its elementwise
epilogue) computed on its output plane as one row: (N, C, H, W) values as (N, C, 1, H*W).

Such a conv is a matrix product of the H*W positions by the channels; the rows of the plane mean
nothing to it, but the convolution rule tiles output rows, so a narrow row leaves its register tiles
a guarded edge or too few columns: MobileNet-V2's 1x1 convs at 7x7 started at 1 vector x 7 columns
(0.68-0.82x onnxruntime on Zen 3) and run 2 vectors x 6 positions of the 49 as one row (0.86-0.93x).
The flattened values keep their bytes (a blocked (N, C/b, H, W, b) buffer is the (N, C/b, 1, H*W, b)
one), so only the kernel's view of them changes: the runtime passes its buffers reshaped
(``tuner.model_compile``). Why rows up to ``FLAT_MAX_WIDTH`` columns:
docs/decisions/061-pointwise-conv-groups-run-their-plane-as-one-row.md
A row-major conv (NCHW data and output: it reads a graph input or writes a graph output) is flattened at any
width: the generated space then starts it as a matrix product whose vector axis is its positions (decision 081).
"""
from __future__ import annotations

import dataclasses

from graph.ir import Graph
from graph.lower.core import block_of
from graph.ops.registry import Pattern, get_op

FLAT_MAX_WIDTH = 24
"""Output rows up to this many columns are flattened (0: none); wider rows hold whole register tiles."""

ROW_MAJOR_FLAT = True
"""A row-major conv (its data and output NCHW) is flattened at any width: as one row its plane is the
contiguous vector axis of a matrix product (False: only blocked convs, as above); why:
docs/decisions/081-row-major-pointwise-convs-are-products-over-positions.md"""


def _spatial(shape: tuple) -> tuple:
    """The last two dims of ``shape`` right-aligned to rank 4 (1 where it has fewer)."""
    s = (1, 1, 1, 1) + tuple(shape)
    return tuple(s[-2:])


def flat_values(graph: Graph, group, layouts: dict) -> dict:
    """Value -> its flattened type for every value of ``group`` on the conv's (H, W) plane, when the group
    is a 1x1 stride-1 unpadded group-1 conv, blocked with rows of up to :data:`FLAT_MAX_WIDTH` columns or
    row-major at any width (:data:`ROW_MAJOR_FLAT`), with an elementwise epilogue whose other operands
    are on the same plane or constant along it; else ``{}``."""
    out = group.outputs[0] if len(group.outputs) == 1 else None
    convs = [n for n in group.nodes if n.op == "Conv"]
    if out is None or len(convs) != 1:
        return {}
    conv = convs[0]
    row_major = ROW_MAJOR_FLAT and out not in layouts and conv.inputs[0] not in layouts
    if not (row_major or FLAT_MAX_WIDTH and block_of(layouts.get(out))):
        return {}
    w = graph.constants.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
    t = graph.types[conv.outputs[0]]
    if w is None or w.ndim != 4 or w.shape[2:] != (1, 1) or t.rank != 4 or conv.attr("group", 1) != 1 \
            or any(s != 1 for s in conv.attr("strides", (1, 1))) or any(conv.attr("pads", (0, 0, 0, 0))):
        return {}
    plane = tuple(t.shape[2:])
    if plane[0] < 2 or plane[1] > FLAT_MAX_WIDTH and not row_major or graph.types[conv.inputs[0]].shape[2:] != plane:
        return {}
    for node in group.nodes:
        if node is conv:
            continue
        try:
            if get_op(node.op).pattern > Pattern.BROADCAST:
                return {}
        except KeyError:
            return {}
    values = {v for n in group.nodes for v in list(n.inputs) + list(n.outputs) if v}
    flat = {}
    for v in values:
        vt = graph.types[v]
        if vt.rank == 4 and tuple(vt.shape[2:]) == plane:
            if v in graph.constants:
                return {}
            flat[v] = dataclasses.replace(vt, shape=(*vt.shape[:2], 1, plane[0] * plane[1]))
        elif v in conv.inputs[1:] or _spatial(vt.shape) == (1, 1):     # (the conv's weights and bias)
            continue
        else:
            return {}       # an operand that varies along the plane some other way (a row, a column)
    return flat


def flattened(graph: Graph, flat: dict) -> Graph:
    """``graph`` with the values of ``flat`` (from :func:`flat_values`) typed flat."""
    return dataclasses.replace(graph, types={**graph.types, **flat})


__all__ = ["FLAT_MAX_WIDTH", "ROW_MAJOR_FLAT", "flat_values", "flattened"]
