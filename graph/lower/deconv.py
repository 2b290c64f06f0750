"""ConvTranspose as tensor expressions: without dilations, a dense convolution per output phase
(output row ``P = p + pad`` gathers ``x[P // s - t] * w[P % s + t * s]``), so no multiplication
touches the zeros of a spread-out input; with dilations, the spread input and a stride-1 convolution.
"""
from __future__ import annotations

import numpy as np

from graph.lower.core import LoweringError, lit, storage_dtype
from graph.lower.elementwise import lowering
from graph.lower.linalg import pad
from tensorir import te


def _float(node, v):
    if storage_dtype(v.dtype) not in ("float32", "float64"):
        raise LoweringError(f"node {node.name} ({node.op}): needs a float input, got {v.dtype}")


@lowering("ConvTranspose")
def _conv_transpose(ctx, node, ins, outs):
    x, w, bias = (list(ins) + [None])[:3]
    _float(node, x)
    if tuple(node.attr("dilations", (1, 1))) == (1, 1):
        y = _deconv_phases(ctx, node, x, w, outs[0])
    else:
        y = _deconv_spread(ctx, node, x, w, outs[0])
    if bias is None:
        return [y]
    return [ctx.emit(outs[0].shape, outs[0].dtype, lambda n, m, p, q: y(n, m, p, q) + bias(m), "bias")]


def _phase_weights(ctx, node, w, taps: tuple, strides: tuple):
    """The kernel split by output phase: ``wp(c, m, ph, t, pw, u) = w(c, m, ph + t * sh, pw + u * sw)``,
    zero past the kernel (a constant when the weights are one)."""
    cw, mg, r_, s_ = w.shape
    (t_, u_), (sh, sw) = taps, strides
    known = ctx.constant_value(node.inputs[1])
    if known is not None:
        full = np.zeros((cw, mg, sh * t_, sw * u_), known.dtype)
        full[:, :, :r_, :s_] = known
        return ctx.constant(full.reshape(cw, mg, t_, sh, u_, sw).transpose(0, 1, 3, 2, 5, 4).copy(), "phase_w")

    def f(c, m, ph, t, pw, u):
        r, s = ph + t * sh, pw + u * sw
        return te.if_then_else(te.all(r < r_, s < s_), w(c, m, r, s), lit(0, w.dtype))
    return ctx.emit((cw, mg, sh, t_, sw, u_), w.dtype, f, "phase_w")


def _deconv_phases(ctx, node, x, w, out):
    """Output row ``P = p + pad`` gathers ``x[P // s - t] * w[P % s + t * s]`` over ``t < ceil(k / s)``: a
    dense convolution per output phase (no multiplications by the zeros a spread input would hold)."""
    _, c_, h_, w_ = x.shape
    _, mg, r_, s_ = w.shape
    group = node.attr("group", 1)
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, _, _ = node.attr("pads", (0, 0, 0, 0))
    shape, dtype = out.shape, out.dtype
    _, _, p_, q_ = shape
    t_, u_ = -(-r_ // sh), -(-s_ // sw)
    wp = _phase_weights(ctx, node, w, (t_, u_), (sh, sw))
    below = (max(0, (p_ - 1 + pt) // sh - (h_ - 1)), max(0, (q_ - 1 + pl) // sw - (w_ - 1)))
    src = pad(ctx, x, (t_ - 1, u_ - 1), below, 0.0)
    cg = c_ // group
    rc, rt, ru = te.reduce_axis(cg, "c"), te.reduce_axis(t_, "t"), te.reduce_axis(u_, "u")

    def split(i, offset, stride):         # (i + offset) // stride and % stride
        e = i + offset if offset else i
        return (e // stride, e % stride) if stride > 1 else (e, 0)

    def f(n, m, p, q):
        chan = rc if group == 1 else (m // mg) * cg + rc
        out_chan = m if group == 1 else m % mg
        (i, ph), (j, pw) = split(p, pt, sh), split(q, pl, sw)
        return te.sum(src(n, chan, i + (t_ - 1) - rt, j + (u_ - 1) - ru) * wp(chan, out_chan, ph, rt, pw, ru),
                      axis=[rc, rt, ru])
    return ctx.emit(shape, dtype, f, "deconv")


def _deconv_spread(ctx, node, x, w, out):
    """With dilations: a stride-1 convolution with the flipped kernel over the input spread out by the
    strides (zeros in between) and padded by ``dilation * (k - 1) - pad``."""
    _, c_, h_, w_ = x.shape
    _, mg, r_, s_ = w.shape
    group = node.attr("group", 1)
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, _, _ = node.attr("pads", (0, 0, 0, 0))
    dh, dw = node.attr("dilations", (1, 1))
    shape, dtype = out.shape, out.dtype
    n_, _, p_, q_ = shape
    off_h, off_w = dh * (r_ - 1) - pt, dw * (s_ - 1) - pl
    span_h, span_w = sh * (h_ - 1) + 1, sw * (w_ - 1) + 1

    def spread(n, c, h, wi):
        hh = h - off_h if off_h else h
        ww = wi - off_w if off_w else wi
        conds = [hh >= 0, hh < span_h, ww >= 0, ww < span_w]
        if sh > 1:
            conds.append(te.equal(hh % sh, 0))
        if sw > 1:
            conds.append(te.equal(ww % sw, 0))
        read = x(n, c, hh // sh if sh > 1 else hh, ww // sw if sw > 1 else ww)
        return te.if_then_else(te.all(*conds), read, lit(0, dtype))
    src = ctx.emit((n_, c_, p_ + dh * (r_ - 1), q_ + dw * (s_ - 1)), dtype, spread, "spread")
    cg = c_ // group
    rc, rr, rs = te.reduce_axis(cg, "c"), te.reduce_axis(r_, "r"), te.reduce_axis(s_, "s")

    def f(n, m, p, q):
        chan = rc if group == 1 else (m // mg) * cg + rc
        out_chan = m if group == 1 else m % mg
        h = p + rr * dh if dh != 1 else p + rr
        wi = q + rs * dw if dw != 1 else q + rs
        return te.sum(src(n, chan, h, wi) * w(chan, out_chan, (r_ - 1) - rr, (s_ - 1) - rs), axis=[rc, rr, rs])
    return ctx.emit(shape, dtype, f, "deconv")
