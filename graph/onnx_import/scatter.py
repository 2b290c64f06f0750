"""ScatterND, ScatterElements and GatherND with indices known at import time (what exporters write
for ``x[:, 0] = y`` and friends: the indices come from Shape, Range and Expand, all folded), as
existing kinds: the flattened data (and updates) joined by a Concat, then one Gather with a constant
map of where each output element comes from. Indices computed at run time and scatter reductions
other than ``none`` are refused in one line.
"""
from __future__ import annotations

import math

import numpy as np

from graph.onnx_import.registry import converter, one_of


def _indices(ctx, node) -> np.ndarray:
    """The indices input, which must be known at import time."""
    if not ctx.is_known(node.input(1)):
        raise node.error("indices computed at run time are not supported (only indices known at import time)")
    return np.asarray(ctx.known[node.input(1)]).astype(np.int64)


def _in_range(node, idx: np.ndarray, sizes) -> np.ndarray:
    """``idx`` with negative entries counted from the end of ``sizes`` (broadcast over its last axis)."""
    sizes = np.asarray(sizes, np.int64)
    if idx.size and ((idx < -sizes).any() or (idx >= sizes).any()):
        raise node.error(f"an index is outside the data (axes of sizes {sizes.tolist()})")
    return np.where(idx < 0, idx + sizes, idx)


def _flat(ctx, node, value: str) -> str:
    n = math.prod(ctx.type(value).shape)
    return ctx.emit(node, "Reshape", [value], shape=(n,))


def _gather_map(ctx, node, sources: list, where: np.ndarray) -> None:
    """Output = the elements of the flattened ``sources`` (joined in order) at the flat ``where``."""
    flat = [_flat(ctx, node, v) for v in sources]
    joined = flat[0] if len(flat) == 1 else ctx.emit(node, "Concat", flat, axis=0)
    name = ctx.fresh(f"{node.name}/map")
    ctx.set_known(name, where.astype(np.int64))
    ctx.emit(node, "Gather", [joined, name], node.outputs[0], axis=0)


@converter("ScatterND", attrs={"reduction": one_of("none")})
def _scatter_nd(ctx, node):
    shape = ctx.type(node.input(0)).shape
    upd = ctx.type(node.input(2)).shape
    idx = _indices(ctx, node)
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim < 1 or k > len(shape) or tuple(upd) != idx.shape[:-1] + tuple(shape[k:]):
        raise node.error(f"indices {idx.shape} and updates {tuple(upd)} do not fit data {tuple(shape)}")
    idx = _in_range(node, idx, shape[:k])
    n = math.prod(shape)
    where = np.arange(n, dtype=np.int64).reshape(shape)
    where[tuple(idx[..., i] for i in range(k))] = n + np.arange(math.prod(upd), dtype=np.int64).reshape(upd)
    _gather_map(ctx, node, [node.input(0), node.input(2)], where)


@converter("ScatterElements", attrs={"axis": None, "reduction": one_of("none")})
def _scatter_elements(ctx, node):
    shape = ctx.type(node.input(0)).shape
    upd = ctx.type(node.input(2)).shape
    rank = len(shape)
    axis = node.attr("axis", 0)
    if not -rank <= axis < rank:
        raise node.error(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    idx = _indices(ctx, node)
    if idx.shape != tuple(upd) or idx.ndim != rank:
        raise node.error(f"indices {idx.shape} and updates {tuple(upd)} do not fit data {tuple(shape)}")
    idx = _in_range(node, idx, shape[axis])
    n = math.prod(shape)
    where = np.arange(n, dtype=np.int64).reshape(shape)
    target = list(np.indices(idx.shape))
    target[axis] = idx
    where[tuple(target)] = n + np.arange(idx.size, dtype=np.int64).reshape(idx.shape)
    _gather_map(ctx, node, [node.input(0), node.input(2)], where)


@converter("GatherND", attrs={"batch_dims": None})
def _gather_nd(ctx, node):
    shape = tuple(ctx.type(node.input(0)).shape)
    idx = _indices(ctx, node)
    b = int(node.attr("batch_dims", 0))
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim < 1 or b < 0 or b + k > len(shape) or idx.shape[:b] != shape[:b]:
        raise node.error(f"indices {idx.shape} (batch_dims {b}) do not fit data {shape}")
    idx = _in_range(node, idx, shape[b:b + k])
    pos = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    # each batch position reads its own slice: index the batch axes by their own coordinates
    lead = tuple(np.indices(idx.shape[:-1])[:b])
    where = pos[lead + tuple(idx[..., i] for i in range(k))]
    _gather_map(ctx, node, [node.input(0)], where)
