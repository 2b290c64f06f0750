"""MatMul, Gemm and Conv as tensor expressions: one reduction stage (the tuner's anchor), then an
elementwise epilogue stage for what follows it (Gemm's alpha/beta/C, Conv's bias) so the space
tiles the reduction and computes it per tile of the epilogue, as for ``tensorir.ops.dense``.
"""
from __future__ import annotations

import numpy as np

from graph.lower.core import LoweringError, Val, block_of, broadcast_index, storage_dtype
from graph.lower.elementwise import lowering
from tensorir import te
from tensorir.ops import winograd
from tensorir.ops.library import pack_depthwise_weights


def _float(node, *vals):
    for v in vals:
        if v is not None and storage_dtype(v.dtype) not in ("float32", "float64"):
            raise LoweringError(f"node {node.name} ({node.op}): needs float operands, got {v.dtype}")


@lowering("MatMul")
def _matmul(ctx, node, ins, outs):
    a, b = ins
    _float(node, a, b)
    k = te.reduce_axis(a.shape[-1], "k")

    def f(*idx):
        idx = list(idx)
        j = idx.pop() if b.rank > 1 else None
        i = idx.pop() if a.rank > 1 else None
        batch = outs[0].shape[:len(idx)]
        a_idx = broadcast_index(idx, a.shape[:-2], batch) + ([i] if i is not None else []) + [k]
        b_idx = broadcast_index(idx, b.shape[:-2], batch) + [k] + ([j] if j is not None else [])
        return te.sum(a(*a_idx) * b(*b_idx), axis=k)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "matmul")]


@lowering("Gemm")
def _gemm(ctx, node, ins, outs):
    a, b, c = (list(ins) + [None])[:3]
    _float(node, a, b, c)
    ta, tb = node.attr("transA", 0), node.attr("transB", 0)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    k = te.reduce_axis(a.shape[0] if ta else a.shape[1], "k")
    shape, dtype = outs[0].shape, outs[0].dtype
    prod = ctx.emit(shape, dtype, lambda i, j: te.sum((a(k, i) if ta else a(i, k)) * (b(j, k) if tb else b(k, j)),
                                                      axis=k), "gemm")
    if c is None or beta == 0.0:
        if alpha == 1.0:
            return [prod]
        return [ctx.emit(shape, dtype, lambda i, j: prod(i, j) * alpha, "scale")]

    def epilogue(i, j):
        y = prod(i, j) if alpha == 1.0 else prod(i, j) * alpha
        cc = c.at((i, j), shape)
        return y + (cc if beta == 1.0 else cc * beta)
    return [ctx.emit(shape, dtype, epilogue, "bias")]


ONE_CHANNEL_AXIS = True    # a 1-channel conv's reduction keeps its channel axis (False: none, the generic space)


@lowering("Conv")
def _conv(ctx, node, ins, outs):
    x, w, bias = (list(ins) + [None])[:3]
    _float(node, x, w, bias)
    n_, c_, h_, w_ = x.shape
    k_, cg, r_, s_ = w.shape
    group = node.attr("group", 1)
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, pb, pr = node.attr("pads", (0, 0, 0, 0))
    dh, dw = node.attr("dilations", (1, 1))
    shape, dtype = outs[0].shape, outs[0].dtype
    _, _, p_, q_ = shape
    kg = k_ // group
    if block_of(ctx.layout_for(shape)):
        form = _conv_winograd if winograd_fits(node, x, w, shape, ctx.constant_value(node.inputs[1])) else \
            _depthwise_blocked if is_blocked_depthwise(c_, k_, group, w.shape) else \
            _grouped_blocked if group > 1 else _conv_blocked
        y = form(ctx, node, x, ctx.constant_value(node.inputs[1]), shape, dtype)
        if bias is None:
            return [y]
        return [ctx.emit(shape, dtype, lambda n, k, p, q: y(n, k, p, q) + bias(k), "bias")]
    src = pad(ctx, x, (pt, pl), (max(0, (p_ - 1) * sh + (r_ - 1) * dh + 1 - h_ - pt),
                                 max(0, (q_ - 1) * sw + (s_ - 1) * dw + 1 - w_ - pl)), 0.0)
    rr, rs = te.reduce_axis(r_, "r"), te.reduce_axis(s_, "s")
    # (a conv over one input channel keeps its channel axis: the convolution rule recognizes it, where a
    # depthwise-like form without it fell to the generic space, its padding a guard on every FMA's load;
    # docs/decisions/099-one-channel-convs-keep-their-channel-axis.md)
    rc = te.reduce_axis(cg, "c") if cg > 1 or (group == 1 and ONE_CHANNEL_AXIS) else None
    window = _window(node)

    def f(n, k, p, q):
        if rc is None:      # one input channel per output channel (depthwise): no reduce axis over it
            chan = k // kg if kg > 1 else k
        else:
            chan = rc if group == 1 else (k // kg) * cg + rc
        h, wi = window(p, q, rr, rs)
        axes = [rc, rr, rs] if rc is not None else [rr, rs]
        return te.sum(src(n, chan, h, wi) * w(k, rc if rc is not None else 0, rr, rs), axis=axes)
    y = ctx.emit(shape, dtype, f, "conv")
    if bias is None:
        return [y]
    return [ctx.emit(shape, dtype, lambda n, k, p, q: y(n, k, p, q) + bias(k), "bias")]


def conv_block(channels: int) -> int:
    """The channel block of a conv's data or weights: 16 (a vector of floats on AVX-512), else the
    largest divisor of ``channels`` up to 16 (the stem's 3 input channels: one block of 3)."""
    return max(d for d in range(1, 17) if channels % d == 0)


def _window(node):
    """``(h, w)`` of output ``(p, q)`` at tap ``(r, s)``: the input row and column a conv window reads
    (padding already applied to the data it indexes)."""
    sh, sw = node.attr("strides", (1, 1))
    dh, dw = node.attr("dilations", (1, 1))

    def at(p, q, r, s):
        return (p * sh + r * dh if (sh, dh) != (1, 1) else p + r,
                q * sw + s * dw if (sw, dw) != (1, 1) else q + s)
    return at


def _blocked_val(ctx, node, y, dtype, shape) -> Val:
    """The blocked form's output ``y`` as the node's value, in the group's blocked layout."""
    if y.dtype != storage_dtype(dtype):
        raise LoweringError(f"node {node.name} (Conv): blocked form needs {storage_dtype(dtype)} data and weights")
    return Val(y, dtype, shape, ctx.blocked_layout)


def _conv_blocked(ctx, node, x, weights, shape, dtype):
    """The conv computed in the group output's blocked layout, as ``tensorir.ops.conv2d_nchwc``:
    ``Y[n, ko, p, q, ki] = sum Xp[n, co, p.., q.., ci] * Wt[ko, co, r, s, ci, ki]``, the data read in
    its own blocked layout (or relaid and padded in one stage where it is row-major) and the
    constant weights packed here, once, to (K/kb, C/cb, R, S, cb, kb). The plan
    (:func:`graph.lower.layout.choose_blocked`) asks for it only for group-1 convs with constant
    weights."""
    if weights is None or node.attr("group", 1) != 1:
        raise LoweringError(f"internal: node {node.name} (Conv) planned blocked needs group 1 and constant weights")
    n_, c_, _, _ = x.shape
    k_, _, r_, s_ = weights.shape
    _, _, p_, q_ = shape
    window = _window(node)
    kb = block_of(ctx.blocked_layout)
    cb = block_of(x.layout) or conv_block(c_)
    data = _blocked_input(ctx, node, x, cb, shape, r_, s_)
    packed = np.ascontiguousarray(np.asarray(weights).reshape(k_ // kb, kb, c_ // cb, cb, r_, s_)
                                  .transpose(0, 2, 4, 5, 3, 1))
    wt = ctx.constant(packed, "weights")
    co, ci = te.reduce_axis(c_ // cb, "co"), te.reduce_axis(cb, "ci")
    rr, rs = te.reduce_axis(r_, "r"), te.reduce_axis(s_, "s")

    def f(n, ko, p, q, ki):
        h, w = window(p, q, rr, rs)
        return te.sum(data[n, co, h, w, ci] * wt.tensor[ko, co, rr, rs, ci, ki], axis=[co, rr, rs, ci])
    return _blocked_val(ctx, node, te.compute((n_, k_ // kb, p_, q_, kb), f, ctx.name("conv")), dtype, shape)


WINOGRAD = True            # 3x3 stride-1 convs of enough tiles by Winograd (False: all direct)
WINOGRAD_MIN_TILES = 49    # 2x2 output tiles (a 13x13 output or larger)
WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_F4 = True         # by F(4x4, 3x3) where it has enough tiles (False: F(2x2, 3x3) only)
WINOGRAD_F4_MIN_TILES = 25  # 4x4 output tiles (a 17x17 output or larger; decision 046)


def winograd_fits(node, x, w, shape, weights) -> bool:
    """Whether a blocked conv is computed by Winograd's F(m x m, 3x3) (``tensorir/ops/winograd.py``): constant
    float32 weights and a shape :func:`winograd_shape_fits` accepts."""
    if not WINOGRAD or weights is None or storage_dtype(x.dtype) != "float32" or x.rank != 4:
        return False
    (sh, sw), (dh, dw) = node.attr("strides", (1, 1)), node.attr("dilations", (1, 1))
    return sh == sw and dh == dw and len(set(node.attr("pads", (0, 0, 0, 0)))) == 1 and \
        winograd_shape_fits(x.shape[1], w.shape[0], tuple(w.shape[2:]), sh, node.attr("pads", (0,))[0], dh,
                            node.attr("group", 1), tuple(shape[2:]))


def winograd_shape_fits(c: int, k: int, window: tuple, stride: int, pad: int, dilation: int, group: int,
                        out_hw: tuple) -> bool:
    """Group 1, a 3x3 window, stride 1, no dilation, padding 1, at least 16 input and output channels and
    at least 49 output tiles of 2x2. Why these bounds: docs/decisions/044-winograd-3x3.md (ResNet-18's
    stride-1 3x3 layers down to 14x14 ran 1.2-1.8x faster than direct; at 7x7, 16 tiles, about even)."""
    if (group, window, stride, pad, dilation) != (1, (3, 3), 1, 1, 1):
        return False
    p_, q_ = out_hw
    return min(c, k) >= WINOGRAD_MIN_CHANNELS and winograd.tiles(p_) * winograd.tiles(q_) >= WINOGRAD_MIN_TILES


def winograd_tile(out_hw: tuple) -> int:
    """The output tile side for a conv :func:`winograd_shape_fits` accepts: 4 where the output has at least
    25 tiles of 4x4 (F(4x4, 3x3) ran 1.18-2.68x faster than F(2x2, 3x3) on such layers of 24 to 256
    channels, and 0.85-0.93x at 14x14, 16 tiles; decision 046), else 2."""
    p_, q_ = out_hw
    return 4 if WINOGRAD_F4 and winograd.tiles(p_, 4) * winograd.tiles(q_, 4) >= WINOGRAD_F4_MIN_TILES else 2


def _conv_winograd(ctx, node, x, weights, shape, dtype):
    """The conv by F(m x m, 3x3) in the group output's blocked layout: the data padded (and relaid where it
    is row-major) in one stage, the constant weights transformed here, once, to ``U`` ((m + 2)^2, C, K)."""
    n_, c_, _, _ = x.shape
    k_ = weights.shape[0]
    _, _, p_, q_ = shape
    m = winograd_tile((p_, q_))
    kb = block_of(ctx.blocked_layout)
    cb = block_of(x.layout) or conv_block(c_)
    covered = (n_, k_, m * winograd.tiles(p_, m), m * winograd.tiles(q_, m))    # the last tiles' windows
    data = _blocked_input(ctx, node, x, cb, covered, 3, 3)
    u = ctx.constant(winograd.winograd_weights(np.asarray(weights), m), "weights")
    y = winograd.winograd_stages(data, u.tensor, (n_, k_ // kb, p_, q_, kb), kb, ctx.name("conv"))
    return _blocked_val(ctx, node, y, dtype, shape)


def _blocked_input(ctx, node, x, cb: int, shape, r_: int, s_: int):
    """The data a blocked form reads, (N, C/cb, Hp, Wp, cb): ``x`` itself where it is blocked by ``cb`` and
    no padding is needed, else one stage that pads it (and relays ``x`` into blocks of ``cb``)."""
    n_, c_, h_, w_ = x.shape
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, _, _ = node.attr("pads", (0, 0, 0, 0))
    dh, dw = node.attr("dilations", (1, 1))
    _, _, p_, q_ = shape
    hp = max(h_ + pt, (p_ - 1) * sh + (r_ - 1) * dh + 1)
    wp = max(w_ + pl, (q_ - 1) * sw + (s_ - 1) * dw + 1)
    if block_of(x.layout) == cb and (hp, wp) == (h_, w_) and not (pt or pl):
        return x.tensor
    sdt = storage_dtype(x.dtype)

    def relaid(n, co, h, w, ci):
        conds = [c for c in (h >= pt if pt else None, h < h_ + pt if hp > h_ + pt else None,
                             w >= pl if pl else None, w < w_ + pl if wp > w_ + pl else None) if c is not None]
        hh, ww = (h - pt if pt else h), (w - pl if pl else w)
        # (another block than cb: a grouped conv's, read through the layout)
        read = x.tensor[n, co, hh, ww, ci] if block_of(x.layout) == cb else x(n, co * cb + ci, hh, ww)
        return te.if_then_else(te.all(*conds), read, te.const(0.0, sdt)) if conds else read
    return te.compute((n_, c_ // cb, hp, wp, cb), relaid, ctx.name("pad"))


def is_blocked_depthwise(x_channels: int, k: int, group: int, w_shape: tuple) -> bool:
    """Whether a conv is the depthwise one the blocked form computes: one input channel per output
    channel (a channel multiplier above 1 is computed row-major)."""
    return group == x_channels == k > 1 and len(w_shape) == 4 and w_shape[:2] == (k, 1)


def _depthwise_blocked(ctx, node, x, weights, shape, dtype):
    """A depthwise conv in the blocked layout: ``Y[n, c, p, q, ci] = sum over (r, s) of
    Xp[n, c, p*sh + r*dh, q*sw + s*dw, ci] * Wt[c, r, s, ci]``, its block the input's (channels map
    one to one), the constant weights packed here, once, to (C/b, R, S, b)."""
    if weights is None:
        raise LoweringError(f"internal: node {node.name} (Conv) planned blocked needs constant weights")
    n_, c_, _, _ = x.shape
    _, _, r_, s_ = weights.shape
    _, _, p_, q_ = shape
    window = _window(node)
    b = block_of(ctx.blocked_layout)
    if block_of(x.layout) not in (None, b):
        raise LoweringError(f"internal: node {node.name} (Conv) depthwise reads {x.layout} data, planned {ctx.blocked_layout}")
    data = _blocked_input(ctx, node, x, b, shape, r_, s_)
    wt = ctx.constant(pack_depthwise_weights(np.asarray(weights), b), "weights")
    rr, rs = te.reduce_axis(r_, "r"), te.reduce_axis(s_, "s")

    def f(n, c, p, q, ci):
        h, w = window(p, q, rr, rs)
        return te.sum(data[n, c, h, w, ci] * wt.tensor[c, rr, rs, ci], axis=[rr, rs])
    return _blocked_val(ctx, node, te.compute((n_, c_ // b, p_, q_, b), f, ctx.name("conv")), dtype, shape)


def grouped_block(c: int, k: int, group: int, blocks: tuple) -> int | None:
    """The first of ``blocks`` in which a grouped conv's output blocks each read whole input blocks of
    their own group (the blocked grouped form), else None: groups of a multiple of the block (input
    and output channels alike), or a block of whole groups of as many input as output channels."""
    cg, kg = c // group, k // group
    if group <= 1 or cg * group != c or kg * group != k or (cg == 1 and kg == 1):
        return None
    return next((b for b in blocks if (cg % b == 0 and kg % b == 0) or (cg == kg and b % cg == 0 and c % b == 0)), None)


LANE_GROUPS = True
"""A block of whole groups reads each group's channels by a lane pattern (False: block-diagonal weights,
``b / cg`` times the FLOPs); docs/decisions/076-lane-pattern-loads.md"""


def _grouped_blocked(ctx, node, x, weights, shape, dtype):
    """A grouped conv in the blocked layout: ``Y[n, ko, p, q, ki] = sum Xp[n, g(ko) + co, p.., q.., ci] *
    Wt[ko, co, r, s, ci, ki]`` over the input blocks of output block ``ko``'s group. Groups of a
    multiple of the block: ``g(ko)`` is the group's first input block, the weights packed as a group-1
    conv's; a block of whole groups: ``g(ko) = ko``, each lane reading its group's channels
    (``LANE_GROUPS``), else the weights packed block-diagonal (zero between groups: ``b / cg`` times
    the FLOPs, at a dense conv's vector speed)."""
    if weights is None:
        raise LoweringError(f"internal: node {node.name} (Conv) planned blocked needs constant weights")
    n_, c_, _, _ = x.shape
    k_, cg, r_, s_ = weights.shape
    group = node.attr("group", 1)
    kg = k_ // group
    _, _, p_, q_ = shape
    window = _window(node)
    b = block_of(ctx.blocked_layout)
    if grouped_block(c_, k_, group, (b,)) != b:
        raise LoweringError(f"internal: node {node.name} (Conv) planned {ctx.blocked_layout} for {group} groups")
    data = _blocked_input(ctx, node, x, b, shape, r_, s_)
    w = np.asarray(weights)
    m, lane_groups = 1, False
    if cg % b == 0 and kg % b == 0:
        m = cg // b
        packed = w.reshape(k_ // b, b, m, b, r_, s_).transpose(0, 2, 4, 5, 3, 1)

        def first(ko):
            return ko * m if kg == b else (ko // (kg // b)) * m
    else:
        def first(ko):
            return ko
        lane_groups = LANE_GROUPS
        if lane_groups:
            # lane ki reads its own group's channels of input block ko, ``(ki // cg) * cg + ci``: a
            # constant lane pattern (docs/decisions/076-lane-pattern-loads.md); weights (K/b, 1, R, S, cg, b)
            packed = w.reshape(k_ // b, b, cg, r_, s_).transpose(0, 3, 4, 2, 1)[:, None]
        else:
            packed = np.zeros((k_ // b, 1, r_, s_, b, b), w.dtype)
            wr = w.reshape(k_ // b, b // kg, kg, cg, r_, s_)
            for j in range(b // kg):
                packed[:, 0, :, :, j * cg:(j + 1) * cg, j * kg:(j + 1) * kg] = wr[:, j].transpose(0, 3, 4, 2, 1)
    wt = ctx.constant(np.ascontiguousarray(packed), "weights")
    co, ci = te.reduce_axis(m, "co"), te.reduce_axis(cg if lane_groups else b, "ci")
    rr, rs = te.reduce_axis(r_, "r"), te.reduce_axis(s_, "s")

    def f(n, ko, p, q, ki):
        h, w_ = window(p, q, rr, rs)
        c_in = (ki // cg) * cg + ci if lane_groups else ci
        return te.sum(data[n, first(ko) + co, h, w_, c_in] * wt.tensor[ko, co, rr, rs, ci, ki], axis=[co, rr, rs, ci])
    return _blocked_val(ctx, node, te.compute((n_, k_ // b, p_, q_, b), f, ctx.name("conv")), dtype, shape)


def pad(ctx, x, lo: tuple, hi: tuple, value, keep_layout: bool = False):
    """``x`` (NCHW) padded on its last two dims by ``lo`` (top, left) and ``hi`` (bottom, right) with
    ``value``; ``x`` itself when nothing is padded. The pad stage is elementwise: the space inlines it.
    ``keep_layout``: a blocked ``x`` is padded in its layout (else the padded value is row-major)."""
    (pt, pl), (pb, pr) = lo, hi
    if not (pt or pl or pb or pr):
        return x
    n_, c_, h_, w_ = x.shape

    def f(n, c, h, w):
        conds = []
        if pt:
            conds.append(h >= pt)
        if pb:
            conds.append(h < h_ + pt)
        if pl:
            conds.append(w >= pl)
        if pr:
            conds.append(w < w_ + pl)
        hi_ = h - pt if pt else h
        wi_ = w - pl if pl else w
        return te.if_then_else(te.all(*conds), x(n, c, hi_, wi_), te.const(value, storage_dtype(x.dtype)))
    # a pool over a blocked value pads it in its own layout (its reads are then plain, not div/mod)
    layout = x.layout if keep_layout and block_of(x.layout) else None
    return ctx.emit((n_, c_, h_ + pt + pb, w_ + pl + pr), x.dtype, f, "pad", layout=layout)
