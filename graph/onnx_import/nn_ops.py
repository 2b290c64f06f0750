"""Converters of the compute ops: elementwise maps and broadcasting binaries, MatMul, Gemm, Conv,
pooling, Softmax, Clip, and the normalizations (BatchNormalization, LayerNormalization, Gelu)."""
from __future__ import annotations

import math

from graph.onnx_import.registry import all_ones, converter, one_of

UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Erf")
BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "Where", "MatMul")


@converter(*UNARY, *BINARY)
def _direct(ctx, node):
    ctx.emit(node, node.op_type, node.inputs, node.outputs[0])


@converter("Gemm", attrs={"alpha": None, "beta": None, "transA": None, "transB": None})
def _gemm(ctx, node):
    attrs = {k: node.attrs[k] for k in ("alpha", "beta", "transA", "transB") if k in node.attrs}
    ctx.emit(node, "Gemm", [node.input(0), node.input(1), node.input(2)], node.outputs[0], **attrs)


# ------------------------------------------------------------------ windows (Conv, pools)

AUTO_PAD = one_of("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _spatial_rank(node, initializer_shapes) -> int | None:
    for key, per in (("kernel_shape", 1), ("strides", 1), ("dilations", 1), ("pads", 2)):
        if key in node.attrs:
            return len(node.attrs[key]) // per
    w = initializer_shapes.get(node.input(1)) if node.op_type == "Conv" else None
    return len(w) - 2 if w is not None else None


def _check_window(node, initializer_shapes) -> list:
    problems = []
    rank = _spatial_rank(node, initializer_shapes)
    if rank is not None and rank not in (1, 2):
        problems.append(f"only 1-d and 2-d {node.op_type} are supported (this one is {rank}-d)")
    if node.attr("auto_pad", "NOTSET") != "NOTSET" and node.attr("ceil_mode", 0):
        problems.append("ceil_mode=1 together with auto_pad is not supported")
    if node.op_type != "Conv" and node.attr("auto_pad", "NOTSET").startswith("SAME") and \
            any(d != 1 for d in node.attr("dilations", ())):
        # onnxruntime sizes these windows undilated, the ONNX reference dilated: no one answer
        problems.append("auto_pad=SAME_* together with dilations is not supported")
    if node.op_type == "MaxPool" and node.output(1):
        problems.append("the Indices output is not supported")
    return problems


def resolve_pads(node, size: tuple, kernel: tuple, strides: tuple, dilations: tuple) -> tuple:
    """ONNX pads/auto_pad as (top, left, bottom, right)."""
    auto_pad = node.attr("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad == "NOTSET":
        return tuple(node.attr("pads", (0, 0, 0, 0)))
    lo, hi = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations):
        total = max(0, (math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        lo.append(small if auto_pad == "SAME_UPPER" else big)
        hi.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(lo + hi)


def _window_type(ctx, node):
    x = ctx.type(node.input(0))
    if x.rank not in (3, 4):
        raise node.error(f"only 1-d (NCL) and 2-d (NCHW) input is supported, got shape {x.shape}")
    return x


def _window_attrs(node, size: tuple, kernel: tuple) -> tuple:
    """(strides, dilations, pads) of a window op over ``size``; pads as (begins..., ends...)."""
    rank = len(size)
    strides = tuple(node.attr("strides", (1,) * rank))
    dilations = tuple(node.attr("dilations", (1,) * rank))
    if node.attr("auto_pad", "NOTSET") == "NOTSET":
        pads = tuple(node.attr("pads", (0,) * 2 * rank))
    else:
        pads = resolve_pads(node, size, kernel, strides, dilations)
    return strides, dilations, pads


def as_2d(ctx, node, kind: str, x: str, weight: str | None, out: str, strides, dilations, pads, **attrs):
    """``kind`` over a 1-d (N, C, L) input: the same op over (N, C, 1, L), reshaped back, so 1-d
    windows run the 2-d kernels (a weight (M, C, K) becomes (M, C, 1, K)); no ``dilations`` for
    ops without them."""
    n, c, length = ctx.type(x).shape
    inputs = [ctx.emit(node, "Reshape", [x], shape=(n, c, 1, length))]
    if weight is not None:
        w = ctx.type(weight).shape
        inputs.append(ctx.emit(node, "Reshape", [weight], shape=(w[0], w[1], 1, w[2])))
        inputs.append(node.input(2))      # the bias, if any
    if "kernel_shape" in attrs:
        attrs["kernel_shape"] = (1, *attrs["kernel_shape"])
    if dilations is not None:
        attrs["dilations"] = (1, *dilations)
    y = ctx.emit(node, kind, inputs,
                 strides=(1, *strides), pads=(0, pads[0], 0, pads[1]), **attrs)
    shape = ctx.type(y).shape
    ctx.emit(node, "Reshape", [y], out, shape=(shape[0], shape[1], shape[3]))


@converter("Conv", check=_check_window, attrs={
    "auto_pad": AUTO_PAD, "dilations": None, "group": None, "kernel_shape": None, "pads": None,
    "strides": None})
def _conv(ctx, node):
    x = _window_type(ctx, node)
    w = ctx.type(node.input(1))
    kernel = tuple(node.attr("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise node.error(f"kernel_shape {kernel} differs from the weights' {w.shape[2:]}")
    strides, dilations, pads = _window_attrs(node, x.shape[2:], kernel)
    if x.rank == 3:
        as_2d(ctx, node, "Conv", node.input(0), node.input(1), node.outputs[0], strides, dilations, pads,
              group=node.attr("group", 1))
        return
    group = node.attr("group", 1)
    if 1 < group <= MAX_SPLIT_GROUPS and min(x.shape[1], w.shape[0]) // group >= MIN_SPLIT_CHANNELS:
        _split_groups(ctx, node, group, strides=strides, pads=pads, dilations=dilations)
        return
    ctx.emit(node, "Conv", [node.input(0), node.input(1), node.input(2)], node.outputs[0],
             strides=strides, pads=pads, dilations=dilations, group=group)


# A grouped Conv with few wide groups (ResNeXt's 4 groups of 16 channels and more) runs as one dense
# Conv per group between Slices and a Concat: the convolution rule of the schedule space blocks dense
# convolutions and depthwise ones, and a group of many channels is neither.
MAX_SPLIT_GROUPS = 8
MIN_SPLIT_CHANNELS = 8


def _split_groups(ctx, node, group: int, **attrs) -> None:
    c = ctx.type(node.input(0)).shape[1]
    m = ctx.type(node.input(1)).shape[0]
    cg, kg = c // group, m // group
    parts = []
    for i in range(group):
        x = ctx.emit(node, "Slice", [node.input(0)], starts=(i * cg,), ends=((i + 1) * cg,), axes=(1,), steps=(1,))
        w = ctx.emit(node, "Slice", [node.input(1)], starts=(i * kg,), ends=((i + 1) * kg,), axes=(0,), steps=(1,))
        b = ctx.emit(node, "Slice", [node.input(2)], starts=(i * kg,), ends=((i + 1) * kg,), axes=(0,),
                     steps=(1,)) if node.input(2) else ""
        parts.append(ctx.emit(node, "Conv", [x, w, b], group=1, **attrs))
    ctx.emit(node, "Concat", parts, node.outputs[0], axis=1)


POOL_ATTRS = {"auto_pad": AUTO_PAD, "ceil_mode": None, "kernel_shape": None, "pads": None, "strides": None}


def _pool(ctx, node, **extra):
    x = _window_type(ctx, node)
    kernel = tuple(node.attrs["kernel_shape"])
    strides, dilations, pads = _window_attrs(node, x.shape[2:], kernel)
    if node.op_type == "MaxPool":
        extra["dilations"] = dilations
    if x.rank == 3:
        as_2d(ctx, node, node.op_type, node.input(0), None, node.outputs[0], strides, extra.pop("dilations", None),
              pads, kernel_shape=kernel, ceil_mode=node.attr("ceil_mode", 0), **extra)
        return
    ctx.emit(node, node.op_type, [node.input(0)], node.outputs[0], kernel_shape=kernel, strides=strides,
             pads=pads, ceil_mode=node.attr("ceil_mode", 0), **extra)


@converter("MaxPool", check=_check_window, attrs=dict(POOL_ATTRS, dilations=None, storage_order=None))
def _maxpool(ctx, node):
    # storage_order only shapes the Indices output, which the check refuses
    _pool(ctx, node)


@converter("AveragePool", check=_check_window, attrs=dict(POOL_ATTRS, count_include_pad=None,
                                                          dilations=all_ones))
def _avgpool(ctx, node):
    _pool(ctx, node, count_include_pad=node.attr("count_include_pad", 0))


@converter("GlobalAveragePool")
def _global_avgpool(ctx, node):
    ctx.emit(node, "GlobalAveragePool", [node.input(0)], node.outputs[0])


# ------------------------------------------------------------------ Softmax, Clip

def axis_of(node, axis: int, rank: int) -> int:
    """``axis`` made non-negative; a one-line refusal when out of range."""
    if not -rank <= axis < max(rank, 1):
        raise node.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


@converter("Softmax", attrs={"axis": None})
def _softmax(ctx, node):
    rank = ctx.type(node.input(0)).rank
    ctx.emit(node, "Softmax", [node.input(0)], node.outputs[0], axis=axis_of(node, node.attr("axis", -1), rank))


@converter("Clip")
def _clip(ctx, node):
    bounds = {}
    for i, key in ((1, "min"), (2, "max")):
        if node.input(i):
            value = ctx.const(node, node.input(i), key)
            if value.size != 1:
                raise node.error(f"{key} must be a scalar, got shape {value.shape}")
            bounds[key] = float(value.reshape(()))
    ctx.emit(node, "Clip", [node.input(0)], node.outputs[0], **bounds)


# ------------------------------------------------------------------ normalizations (ops defined by graph.ops.normalization)

def _check_extra_outputs(node, _shapes) -> list:
    extra = [o for o in node.outputs[1:] if o]
    return [f"the training outputs {', '.join(extra)} are not supported"] if extra else []


@converter("BatchNormalization", check=_check_extra_outputs,
           attrs={"epsilon": None, "momentum": None, "training_mode": one_of(0)})
def _batchnorm(ctx, node):
    # momentum only updates running statistics in training mode, which is refused
    ctx.emit(node, "BatchNormalization", node.inputs[:5], node.outputs[0], epsilon=node.attr("epsilon", 1e-5))


@converter("LayerNormalization", check=_check_extra_outputs,
           attrs={"axis": None, "epsilon": None, "stash_type": one_of(1)})
def _layernorm(ctx, node):
    rank = ctx.type(node.input(0)).rank
    ctx.emit(node, "LayerNormalization", [node.input(0), node.input(1), node.input(2)], node.outputs[0],
             axis=axis_of(node, node.attr("axis", -1), rank), epsilon=node.attr("epsilon", 1e-5))


@converter("Gelu", attrs={"approximate": one_of("none", "tanh")})
def _gelu(ctx, node):
    ctx.emit(node, "Gelu", [node.input(0)], node.outputs[0], approximate=node.attr("approximate", "none"))
