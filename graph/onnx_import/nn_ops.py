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
    if rank is not None and rank != 2:
        problems.append(f"only 2-d {node.op_type} is supported (this one is {rank}-d)")
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
    if x.rank != 4:
        raise node.error(f"only 2-d (NCHW) input is supported, got shape {x.shape}")
    return x


@converter("Conv", check=_check_window, attrs={
    "auto_pad": AUTO_PAD, "dilations": None, "group": None, "kernel_shape": None, "pads": None,
    "strides": None})
def _conv(ctx, node):
    x = _window_type(ctx, node)
    w = ctx.type(node.input(1))
    kernel = tuple(node.attr("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise node.error(f"kernel_shape {kernel} differs from the weights' {w.shape[2:]}")
    strides = tuple(node.attr("strides", (1, 1)))
    dilations = tuple(node.attr("dilations", (1, 1)))
    pads = resolve_pads(node, x.shape[2:], kernel, strides, dilations)
    ctx.emit(node, "Conv", [node.input(0), node.input(1), node.input(2)], node.outputs[0],
             strides=strides, pads=pads, dilations=dilations, group=node.attr("group", 1))


POOL_ATTRS = {"auto_pad": AUTO_PAD, "ceil_mode": None, "kernel_shape": None, "pads": None, "strides": None}


def _pool(ctx, node, **extra):
    x = _window_type(ctx, node)
    kernel = tuple(node.attrs["kernel_shape"])
    strides = tuple(node.attr("strides", (1, 1)))
    dilations = tuple(node.attr("dilations", (1, 1)))
    pads = resolve_pads(node, x.shape[2:], kernel, strides, dilations)
    ctx.emit(node, node.op_type, [node.input(0)], node.outputs[0], kernel_shape=kernel, strides=strides,
             pads=pads, ceil_mode=node.attr("ceil_mode", 0), **extra)


@converter("MaxPool", check=_check_window, attrs=dict(POOL_ATTRS, dilations=None, storage_order=None))
def _maxpool(ctx, node):
    # storage_order only shapes the Indices output, which the check refuses
    _pool(ctx, node, dilations=tuple(node.attr("dilations", (1, 1))))


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
