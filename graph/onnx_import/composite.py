"""ONNX ops imported as compositions of existing kinds: GlobalMaxPool (a ReduceMax), DepthToSpace and
SpaceToDepth (Reshape, Transpose, Reshape), InstanceNormalization and GroupNormalization (ReduceMean,
Sub, Mul, Sqrt, Div and the per-channel scale and bias) and ReduceLogSumExp (ReduceMax, Sub, Exp, ReduceSum, Log,
Add). The fusion pass merges the pieces back into few kernels."""
from __future__ import annotations

import numpy as np

from graph.onnx_import.nn_ops import axis_of
from graph.onnx_import.registry import converter, one_of


@converter("GlobalMaxPool")
def _global_max_pool(ctx, node):
    x = ctx.type(node.input(0))
    if x.rank < 3:
        raise node.error(f"needs N x C x spatial data, got shape {x.shape}")
    ctx.emit(node, "ReduceMax", [node.input(0)], node.outputs[0], axes=tuple(range(2, x.rank)), keepdims=1)


def _blocks(ctx, node):
    x = ctx.type(node.input(0))
    b = node.attr("blocksize")
    if x.rank != 4 or not isinstance(b, int) or b < 1:
        raise node.error(f"needs 4-d NCHW data and a positive blocksize, got shape {x.shape}, blocksize {b!r}")
    return x.shape, b


@converter("DepthToSpace", attrs={"blocksize": None, "mode": one_of("DCR", "CRD")})
def _depth_to_space(ctx, node):
    (n, c, h, w), b = _blocks(ctx, node)
    if c % (b * b):
        raise node.error(f"{c} channels do not divide into blocks of {b}x{b}")
    if node.attr("mode", "DCR") == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    t = ctx.emit(node, "Reshape", [node.input(0)], shape=split)
    t = ctx.emit(node, "Transpose", [t], perm=perm)
    ctx.emit(node, "Reshape", [t], node.outputs[0], shape=(n, c // (b * b), h * b, w * b))


@converter("SpaceToDepth", attrs={"blocksize": None})
def _space_to_depth(ctx, node):
    (n, c, h, w), b = _blocks(ctx, node)
    if h % b or w % b:
        raise node.error(f"spatial size {h}x{w} does not divide into blocks of {b}x{b}")
    t = ctx.emit(node, "Reshape", [node.input(0)], shape=(n, c, h // b, b, w // b, b))
    t = ctx.emit(node, "Transpose", [t], perm=(0, 3, 5, 1, 2, 4))
    ctx.emit(node, "Reshape", [t], node.outputs[0], shape=(n, c * b * b, h // b, w // b))


def _scalar(ctx, node, value, dtype) -> str:
    name = ctx.fresh(f"{node.name}/const")
    ctx.set_known(name, np.array(value, dtype=dtype))
    return name


@converter("InstanceNormalization", attrs={"epsilon": None})
def _instance_norm(ctx, node):
    x = ctx.type(node.input(0))
    if x.rank < 3 or x.dtype[0] != "f":
        raise node.error(f"needs float N x C x spatial data, got {x.dtype}{list(x.shape)}")
    per_channel = (x.shape[1],) + (1,) * (x.rank - 2)
    normed = _normalize(ctx, node, node.input(0), tuple(range(2, x.rank)), x.dtype)
    scale = ctx.emit(node, "Reshape", [node.input(1)], shape=per_channel)
    bias = ctx.emit(node, "Reshape", [node.input(2)], shape=per_channel)
    ctx.emit(node, "Add", [ctx.emit(node, "Mul", [normed, scale]), bias], node.outputs[0])


def _normalize(ctx, node, value: str, axes: tuple, eps_dtype: str) -> str:
    """(value - mean) / sqrt(var + epsilon) over ``axes``."""
    mean = ctx.emit(node, "ReduceMean", [value], axes=axes, keepdims=1)
    d = ctx.emit(node, "Sub", [value, mean])
    var = ctx.emit(node, "ReduceMean", [ctx.emit(node, "Mul", [d, d])], axes=axes, keepdims=1)
    eps = _scalar(ctx, node, node.attr("epsilon", 1e-5), eps_dtype)
    return ctx.emit(node, "Div", [d, ctx.emit(node, "Sqrt", [ctx.emit(node, "Add", [var, eps])])])


@converter("GroupNormalization", attrs={"epsilon": None, "num_groups": None, "stash_type": one_of(1)})
def _group_norm(ctx, node):
    x = ctx.type(node.input(0))
    groups = node.attr("num_groups")
    if x.rank < 3 or x.dtype[0] != "f" or not isinstance(groups, int) or groups < 1 or x.shape[1] % groups:
        raise node.error(f"needs float N x C x spatial data with C divisible by num_groups, got "
                         f"{x.dtype}{list(x.shape)} and num_groups={groups!r}")
    n, c = x.shape[:2]
    rest = x.size // (n * c)
    grouped = ctx.emit(node, "Reshape", [node.input(0)], shape=(n, groups, (c // groups) * rest))
    normed = ctx.emit(node, "Reshape", [_normalize(ctx, node, grouped, (2,), x.dtype)], shape=x.shape)
    per_channel = (c,) + (1,) * (x.rank - 2)
    if node.since < 21:
        raise node.error("the deprecated opset-18 form (a scale and bias per group) is not supported")
    params = [ctx.emit(node, "Reshape", [node.input(i)], shape=per_channel) for i in (1, 2)]
    ctx.emit(node, "Add", [ctx.emit(node, "Mul", [normed, params[0]]), params[1]], node.outputs[0])


@converter("ReduceLogSumExp", attrs={"axes": None, "keepdims": None, "noop_with_empty_axes": None})
def _reduce_log_sum_exp(ctx, node):
    x = ctx.type(node.input(0))
    if "axes" in node.attrs:
        raw = list(node.attrs["axes"])
    elif node.input(1):
        raw = [int(a) for a in np.asarray(ctx.const(node, node.input(1), "axes")).reshape(-1)]
    else:
        raw = []
    axes = sorted({axis_of(node, a, x.rank) for a in raw})
    if len(axes) != len(raw):
        raise node.error(f"axes {raw} repeat an axis")
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            # log(exp(x)) over nothing: x itself
            ctx.alias(node.outputs[0], node.input(0))
            return
        axes = list(range(x.rank))
    keep = int(node.attr("keepdims", 1))
    m = ctx.emit(node, "ReduceMax", [node.input(0)], axes=tuple(axes), keepdims=1)
    e = ctx.emit(node, "Exp", [ctx.emit(node, "Sub", [node.input(0), m])])
    total = ctx.emit(node, "Log", [ctx.emit(node, "ReduceSum", [e], axes=tuple(axes), keepdims=keep)])
    if not keep:
        m = ctx.emit(node, "Reshape", [m], shape=tuple(d for i, d in enumerate(x.shape) if i not in axes))
    ctx.emit(node, "Add", [total, m], node.outputs[0])
