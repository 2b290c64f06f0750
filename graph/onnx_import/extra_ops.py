"""Converters of the ops defined in ``graph.ops.activation``, ``graph.ops.extra``,
``graph.ops.reduce_extra`` and ``graph.ops.deconv``, and of the ONNX ops imported as chains of existing kinds: Sum, Mean,
Max, Min (binary chains, Mean with a Div) and Split (one Slice per output)."""
from __future__ import annotations

import math

import numpy as np

from graph.onnx_import.nn_ops import as_2d, axis_of
from graph.onnx_import.registry import converter, one_of
from graph.ops.registry import Pattern, get_op


def _ints(array) -> list:
    return [int(v) for v in np.asarray(array).reshape(-1)]


def _axes(ctx, node, rank: int, index: int, attr: str = "axes"):
    """Non-negative axes from the attribute (older opsets) or the constant input ``index``; None if neither."""
    if attr in node.attrs:
        raw = list(node.attrs[attr])
    elif node.input(index):
        raw = _ints(ctx.const(node, node.input(index), attr))
    else:
        return None
    axes = [axis_of(node, a, rank) for a in raw]
    if len(set(axes)) != len(axes):
        raise node.error(f"{attr} {raw} repeat an axis")
    return axes


# ------------------------------------------------------------------ activations and rounding

ACTIVATION_ATTRS = {
    "LeakyRelu": ("alpha",), "ThresholdedRelu": ("alpha",), "Elu": ("alpha",), "Selu": ("alpha", "gamma"),
    "HardSigmoid": ("alpha", "beta"), "HardSwish": (), "Swish": ("alpha",), "Softplus": (), "Softsign": (), "Mish": (), "Celu": ("alpha",),
    "Shrink": ("bias", "lambd"), "Sin": (), "Cos": (),
    "Floor": (), "Ceil": (), "Round": (), "Sign": (),
}


def _activation(ctx, node):
    attrs = {k: float(node.attrs[k]) for k in ACTIVATION_ATTRS[node.op_type] if k in node.attrs}
    ctx.emit(node, node.op_type, [node.input(0)], node.outputs[0], **attrs)


for _op, _keys in ACTIVATION_ATTRS.items():
    converter(_op, attrs={k: None for k in _keys})(_activation)


@converter("PRelu", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor")
def _binary(ctx, node):
    ctx.emit(node, node.op_type, [node.input(0), node.input(1)], node.outputs[0])


@converter("Not")
def _not(ctx, node):
    ctx.emit(node, "Not", [node.input(0)], node.outputs[0])


@converter("LogSoftmax", attrs={"axis": None})
def _log_softmax(ctx, node):
    rank = ctx.type(node.input(0)).rank
    ctx.emit(node, "LogSoftmax", [node.input(0)], node.outputs[0], axis=axis_of(node, node.attr("axis", -1), rank))


# ------------------------------------------------------------------ variadic Sum, Mean, Max, Min

_CHAIN = {"Sum": "Add", "Mean": "Add", "Max": "Max", "Min": "Min"}


@converter(*_CHAIN)
def _variadic(ctx, node):
    inputs = [v for v in node.inputs if v]
    if not inputs:
        raise node.error("needs at least one input")
    last = len(inputs) - 1 if node.op_type != "Mean" else len(inputs)
    acc = inputs[0]
    for i, v in enumerate(inputs[1:], 1):
        acc = ctx.emit(node, _CHAIN[node.op_type], [acc, v], node.outputs[0] if i == last else None)
    if node.op_type == "Mean" and len(inputs) > 1:
        count = ctx.fresh(f"{node.name}/count")
        ctx.set_known(count, np.array(len(inputs), dtype=ctx.type(inputs[0]).dtype))
        ctx.emit(node, "Div", [acc, count], node.outputs[0])
    elif len(inputs) == 1:
        ctx.alias(node.outputs[0], inputs[0])


# ------------------------------------------------------------------ Split, Pad, Tile

@converter("Split", attrs={"axis": None, "num_outputs": None})
def _split(ctx, node):
    shape = ctx.type(node.input(0)).shape
    axis = axis_of(node, node.attr("axis", 0), len(shape))
    size, n = shape[axis], len(node.outputs)
    if node.input(1):
        sizes = _ints(ctx.const(node, node.input(1), "split"))
        if len(sizes) != n or sum(sizes) != size or min(sizes) < 0:
            raise node.error(f"split {sizes} does not cut axis {axis} (size {size}) into {n} outputs")
    elif "num_outputs" in node.attrs:
        if node.attrs["num_outputs"] != n or n < 1:
            raise node.error(f"num_outputs={node.attrs['num_outputs']} but the node has {n} outputs")
        chunk = math.ceil(size / n)
        sizes = [max(0, min(chunk, size - i * chunk)) for i in range(n)]
        if sizes[-1] == 0:
            raise node.error(f"axis {axis} of size {size} does not split into {n} non-empty chunks")
    else:
        if size % n:
            raise node.error(f"axis {axis} of size {size} does not split evenly into {n} outputs")
        sizes = [size // n] * n
    start = 0
    for out, length in zip(node.outputs, sizes):
        if out:
            ctx.emit(node, "Slice", [node.input(0)], out, starts=(start,), ends=(start + length,), axes=(axis,),
                     steps=(1,))
        start += length


@converter("Pad", attrs={"mode": one_of("constant", "reflect", "edge")})
def _pad(ctx, node):
    x = ctx.type(node.input(0))
    pads = _ints(ctx.const(node, node.input(1), "pads"))
    axes = _axes(ctx, node, x.rank, 3)
    axes = list(range(x.rank)) if axes is None else axes
    if len(pads) != 2 * len(axes):
        raise node.error(f"pads {pads} need 2 entries per padded axis ({len(axes)} axes)")
    full = [0] * (2 * x.rank)
    for j, a in enumerate(axes):
        full[a], full[x.rank + a] = pads[j], pads[len(axes) + j]
    value = 0.0
    if node.input(2):
        v = ctx.const(node, node.input(2), "constant_value")
        if v.size != 1:
            raise node.error(f"constant_value must be a scalar, got shape {v.shape}")
        value = float(v.reshape(-1)[0])
    ctx.emit(node, "Pad", [node.input(0)], node.outputs[0], pads=tuple(full), mode=node.attr("mode", "constant"),
             value=value)


@converter("Tile")
def _tile(ctx, node):
    repeats = _ints(ctx.const(node, node.input(1), "repeats"))
    ctx.emit(node, "Tile", [node.input(0)], node.outputs[0], repeats=tuple(repeats))


# ------------------------------------------------------------------ reductions, ArgMax/ArgMin, LRN


@converter("ArgMax", "ArgMin", attrs={"axis": None, "keepdims": None, "select_last_index": None})
def _arg(ctx, node):
    rank = ctx.type(node.input(0)).rank
    ctx.emit(node, node.op_type, [node.input(0)], node.outputs[0], axis=axis_of(node, node.attr("axis", 0), rank),
             keepdims=int(node.attr("keepdims", 1)), select_last_index=int(node.attr("select_last_index", 0)))


@converter("LRN", attrs={"size": None, "alpha": None, "beta": None, "bias": None})
def _lrn(ctx, node):
    attrs = {k: float(node.attrs[k]) for k in ("alpha", "beta", "bias") if k in node.attrs}
    ctx.emit(node, "LRN", [node.input(0)], node.outputs[0], size=int(node.attr("size", 0)), **attrs)


# ------------------------------------------------------------------ ConvTranspose

def _check_deconv(node, initializer_shapes) -> list:
    w = initializer_shapes.get(node.input(1))
    rank = len(node.attrs["kernel_shape"]) if "kernel_shape" in node.attrs else (len(w) - 2 if w else None)
    if rank is not None and rank not in (1, 2):
        return [f"only 1-d and 2-d ConvTranspose are supported (this one is {rank}-d)"]
    return []


def _deconv_pads(node, size: tuple, kernel: tuple, strides: tuple, dilations: tuple, extra: tuple) -> tuple:
    """(pads as (begins..., ends...), output_padding) of a ConvTranspose. With ``output_shape`` or
    ``auto_pad=SAME_*`` (output ``size * stride``) the total padding is what the full output
    exceeds the wanted size by; an odd one goes to the end with SAME_UPPER, else to the beginning
    (onnxruntime's rule). An output wider than the full one keeps the rest as output_padding."""
    rank = len(size)
    auto_pad = node.attr("auto_pad", "NOTSET")
    wanted = node.attr("output_shape")
    if wanted is None and not auto_pad.startswith("SAME"):
        pads = (0,) * 2 * rank if auto_pad == "VALID" else tuple(node.attr("pads", (0,) * 2 * rank))
        return pads, extra
    if wanted is None:
        wanted = tuple(n * s for n, s in zip(size, strides))
    wanted = tuple(wanted)[-rank:]
    if len(wanted) != rank:
        raise node.error(f"output_shape {tuple(wanted)} does not give the {rank} spatial sizes")
    begins, ends, more = [], [], []
    for n, k, s, d, e, want in zip(size, kernel, strides, dilations, extra, wanted):
        full = (n - 1) * s + e + (k - 1) * d + 1
        total = max(0, full - want)
        head = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begins.append(head)
        ends.append(total - head)
        more.append(e + want - (full - total))
    return tuple(begins + ends), tuple(more)


@converter("ConvTranspose", check=_check_deconv, attrs={
    "auto_pad": one_of("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"), "dilations": None, "group": None,
    "kernel_shape": None, "output_padding": None, "output_shape": None, "pads": None, "strides": None})
def _conv_transpose(ctx, node):
    x, w = ctx.type(node.input(0)), ctx.type(node.input(1))
    if x.rank not in (3, 4) or w.rank != x.rank:
        raise node.error(f"only 1-d (NCL) and 2-d (NCHW) input is supported, got shapes {x.shape} and {w.shape}")
    rank = x.rank - 2
    kernel = tuple(node.attr("kernel_shape", w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise node.error(f"kernel_shape {kernel} differs from the weights' {w.shape[2:]}")
    strides = tuple(node.attr("strides", (1,) * rank))
    dilations = tuple(node.attr("dilations", (1,) * rank))
    pads, extra = _deconv_pads(node, x.shape[2:], kernel, strides, dilations,
                               tuple(node.attr("output_padding", (0,) * rank)))
    phases = all(d == 1 for d in dilations) and ctx.is_known(node.input(1))
    if rank == 1 and phases:        # as 2-d over (N, C, 1, L)
        n, c, length = x.shape
        w = ctx.known[node.input(1)]
        x2 = ctx.emit(node, "Reshape", [node.input(0)], shape=(n, c, 1, length))
        y = _deconv_as_conv(ctx, node, x2, w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]), (1, *strides),
                            (0, pads[0], 0, pads[1]), (0, *extra), None)
        shape = ctx.type(y).shape
        ctx.emit(node, "Reshape", [y], node.outputs[0], shape=(shape[0], shape[1], shape[3]))
        return
    if rank == 1:
        as_2d(ctx, node, "ConvTranspose", node.input(0), node.input(1), node.outputs[0], strides, dilations, pads,
              output_padding=(0, *extra), group=node.attr("group", 1))
        return
    if phases:
        _deconv_as_conv(ctx, node, node.input(0), ctx.known[node.input(1)], strides, pads, extra, node.outputs[0])
        return
    ctx.emit(node, "ConvTranspose", [node.input(0), node.input(1), node.input(2)], node.outputs[0],
             strides=strides, pads=pads, dilations=dilations, output_padding=extra, group=node.attr("group", 1))


# a one-group ConvTranspose with known weights whose result a Concat takes (a U-Net step) runs as a Conv whose output
# channels are (row phase, column phase, channel); False: (channel, row phase, column phase), as all others do
# (docs/decisions/097-deconv-phases-outer.md)
PHASES_OUTER = True


def _elementwise(op_type: str) -> bool:
    try:
        return get_op(op_type).pattern <= Pattern.BROADCAST
    except KeyError:        # (an ONNX op the importer rewrites into others)
        return False


def _feeds_concat(ctx, name: str, depth: int = 8) -> bool:
    """Whether ONNX value ``name`` is read by a Concat, directly or through elementwise ops. Elsewhere its phase
    interleave writes row-major rows, for which the channels of an output column pair are best side by side (a
    DCGAN tail ran 4% slower phase-major)."""
    if depth <= 0:
        return False
    return any(op == "Concat" or _elementwise(op) and any(_feeds_concat(ctx, o, depth - 1) for o in outs if o)
               for op, outs in ctx.readers.get(name, ()))


def _deconv_as_conv(ctx, node, x: str, w: np.ndarray, strides: tuple, pads: tuple, extra: tuple,
                    out: str | None) -> str:
    """A ConvTranspose with known weights as one stride-1 Conv (of the same groups) whose output
    channels are (channel, row phase, column phase), then the phases interleaved (Reshape, Transpose, Reshape) and cropped
    (Slice): output row ``P = p + pad`` is ``x[P // s - t] * w[P % s + t * s]`` summed over taps ``t``,
    a dense convolution per phase, so the convolution kernels run it and no multiplication meets the
    zeros of a spread-out input. ``x`` (N, C, H, W), weights ``w``; returns the result (``out`` if given)."""
    n, c, h, wd = ctx.type(x).shape
    _, mg, r, s = w.shape
    group = node.attr("group", 1)
    m, cg = mg * group, c // group
    (sh, sw), (pt, pl, pb, pr) = strides, pads
    t, u = -(-r // sh), -(-s // sw)
    full = np.zeros((c, mg, t * sh, u * sw), w.dtype)
    full[:, :, :r, :s] = w
    # phase (ph, pw) of output channel k reads tap (t-1-i, u-1-j) at input offset (i, j); output
    # channels (group, channel in group, row phase, column phase), so each group's stay together
    phased = full.reshape(group, cg, mg, t, sh, u, sw).transpose(0, 2, 4, 6, 1, 3, 5)[..., ::-1, ::-1]
    # one group whose result a Concat takes: channels (row phase, column phase, channel) instead, so the interleave,
    # written in blocks with the concat (decision 095), reads whole vectors, not every sh * sw-th channel
    outer = PHASES_OUTER and group == 1 and _feeds_concat(ctx, node.outputs[0])
    if outer:
        phased = phased.transpose(0, 2, 3, 1, 4, 5, 6)
    weight = ctx.fresh(f"{node.name}/phase_weights")
    ctx.set_known(weight, np.ascontiguousarray(phased.reshape(m * sh * sw, cg, t, u)))
    p_ = (h - 1) * sh + r - pt - pb + extra[0]
    q_ = (wd - 1) * sw + s - pl - pr + extra[1]
    rows, cols = (p_ - 1 + pt) // sh + 1, (q_ - 1 + pl) // sw + 1
    bias = ""
    if node.input(2) and ctx.is_known(node.input(2)):
        bias = ctx.fresh(f"{node.name}/phase_bias")
        b0 = ctx.known[node.input(2)]
        ctx.set_known(bias, np.tile(b0, sh * sw) if outer else np.repeat(b0, sh * sw))
    y = ctx.emit(node, "Conv", [x, weight, bias], strides=(1, 1), dilations=(1, 1), group=group,
                 pads=(t - 1, u - 1, max(0, rows - h), max(0, cols - wd)))
    h2, w2 = ctx.type(y).shape[2:]
    if outer:
        y = ctx.emit(node, "Reshape", [y], shape=(n, sh, sw, m, h2, w2))
        y = ctx.emit(node, "Transpose", [y], perm=(0, 3, 4, 1, 5, 2))
    else:
        y = ctx.emit(node, "Reshape", [y], shape=(n, m, sh, sw, h2, w2))
        y = ctx.emit(node, "Transpose", [y], perm=(0, 1, 4, 2, 5, 3))
    y = ctx.emit(node, "Reshape", [y], shape=(n, m, h2 * sh, w2 * sw))
    if node.input(2) and not bias:
        y = ctx.emit(node, "Slice", [y], starts=(pt, pl), ends=(pt + p_, pl + q_), axes=(2, 3), steps=(1, 1))
        b = ctx.emit(node, "Reshape", [node.input(2)], shape=(m, 1, 1))
        return ctx.emit(node, "Add", [y, b], out)
    return ctx.emit(node, "Slice", [y], out, starts=(pt, pl), ends=(pt + p_, pl + q_), axes=(2, 3), steps=(1, 1))


@converter("CumSum", attrs={"exclusive": None, "reverse": None})
def _cumsum(ctx, node):
    rank = ctx.type(node.input(0)).rank
    axis = np.asarray(ctx.const(node, node.input(1), "axis"))
    if axis.size != 1:
        raise node.error(f"axis must be a scalar, got shape {axis.shape}")
    ctx.emit(node, "CumSum", [node.input(0)], node.outputs[0], axis=axis_of(node, int(axis.reshape(-1)[0]), rank),
             exclusive=int(node.attr("exclusive", 0)), reverse=int(node.attr("reverse", 0)))


@converter("Mod", attrs={"fmod": None})
def _mod(ctx, node):
    ctx.emit(node, "Mod", [node.input(0), node.input(1)], node.outputs[0], fmod=int(node.attr("fmod", 0)))


@converter("Trilu", attrs={"upper": None})
def _trilu(ctx, node):
    k = 0
    if node.input(1):
        value = np.asarray(ctx.const(node, node.input(1), "k"))
        if value.size != 1:
            raise node.error(f"k must be a scalar, got shape {value.shape}")
        k = int(value.reshape(-1)[0])
    ctx.emit(node, "Trilu", [node.input(0)], node.outputs[0], upper=int(node.attr("upper", 1)), k=k)


@converter("GatherElements", attrs={"axis": None})
def _gather_elements(ctx, node):
    rank = ctx.type(node.input(0)).rank
    ctx.emit(node, "GatherElements", [node.input(0), node.input(1)], node.outputs[0],
             axis=axis_of(node, node.attr("axis", 0), rank))


@converter("TopK", attrs={"axis": None, "largest": None, "sorted": None})
def _topk(ctx, node):
    # sorted=0 leaves the order to the implementation: the sorted order is one
    x = ctx.type(node.input(0))
    k = np.asarray(ctx.const(node, node.input(1), "K"))
    if k.size != 1:
        raise node.error(f"K must hold one value, got shape {k.shape}")
    axis = axis_of(node, node.attr("axis", -1), x.rank)
    for i, out in enumerate(node.outputs[:2]):
        if out:
            ctx.emit(node, "TopK", [node.input(0)], out, axis=axis, k=int(k.reshape(-1)[0]),
                     largest=int(node.attr("largest", 1)), output=i)
