"""ConvTranspose (Pattern.OUT_FUSABLE): the 2-d transposed convolution (NCHW data, C x M/group x kH x kW
weights), the gradient of Conv with respect to its input.

Attributes are normalized by the importer: ``strides``, ``dilations``, ``output_padding`` have 2
ints, ``pads`` 4 (top, left, bottom, right); the importer turns ONNX's ``output_shape`` and ``auto_pad`` into
pads and output_padding, and a ConvTranspose with known weights and no dilation into a Conv
over the output phases (graph.onnx_import.extra_ops).
Output size per axis: ``stride * (in - 1) + output_padding + dilation * (k - 1) + 1 - pad_begin - pad_end``.
"""
from __future__ import annotations

import numpy as np

from graph.ir import TensorType
from graph.ops.registry import OpDef, OpError, Pattern, register

DECONV_ATTRS = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "output_padding": (0, 0), "group": 1}


def deconv_out(size: int, k: int, stride: int, lo: int, hi: int, dilation: int, extra: int) -> int:
    """Output length of a transposed convolution along one axis."""
    return stride * (size - 1) + extra + dilation * (k - 1) + 1 - lo - hi


def _params(node):
    return tuple(node.attr(k, d) for k, d in DECONV_ATTRS.items())


def _infer(node, types):
    x, w, b = types
    if x.rank != 4 or w.rank != 4:
        raise OpError(f"node {node.name} (ConvTranspose): only 2-d (NCHW data, C x M/group x kH x kW weights), got "
                      f"{x.shape} and {w.shape}")
    (sh, sw), (pt, pl, pb, pr), (dh, dw), (oh, ow), g = _params(node)
    n, c, h, wd = x.shape
    cw, mg, r, s = w.shape
    if g < 1 or c % g or cw != c:
        raise OpError(f"node {node.name} (ConvTranspose): {c} input channels, group {g} and weights {w.shape} "
                      "do not agree")
    if min(sh, sw, dh, dw) < 1 or min(pt, pl, pb, pr, oh, ow) < 0 or oh >= max(sh, dh) or ow >= max(sw, dw):
        raise OpError(f"node {node.name} (ConvTranspose): bad attributes {dict(node.attrs)} (output_padding must "
                      "be smaller than the stride or the dilation)")
    if b is not None and b.shape != (mg * g,):
        raise OpError(f"node {node.name} (ConvTranspose): bias shape {b.shape}, expected {(mg * g,)}")
    p, q = deconv_out(h, r, sh, pt, pb, dh, oh), deconv_out(wd, s, sw, pl, pr, dw, ow)
    if p <= 0 or q <= 0:
        raise OpError(f"node {node.name} (ConvTranspose): pads {(pt, pl, pb, pr)} leave no output")
    return [TensorType((n, mg * g, p, q), x.dtype)]


def conv_transpose_reference(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1),
                             output_padding=(0, 0), group=1):
    """Grouped NCHW transposed convolution in numpy (float64 accumulation): every input pixel scatters
    its weighted kernel into the output."""
    n, c, h, wd = x.shape
    _, mg, r, s = w.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw), (oh, ow) = strides, pads, dilations, output_padding
    full = np.zeros((n, mg * group, sh * (h - 1) + dh * (r - 1) + 1 + oh, sw * (wd - 1) + dw * (s - 1) + 1 + ow))
    cg = c // group
    for gi in range(group):
        xs = x[:, gi * cg:(gi + 1) * cg].astype(np.float64)
        ws = w[gi * cg:(gi + 1) * cg].astype(np.float64)
        for i in range(r):
            for j in range(s):
                contrib = np.einsum("nchw,cm->nmhw", xs, ws[:, :, i, j])
                full[:, gi * mg:(gi + 1) * mg, i * dh:i * dh + sh * (h - 1) + 1:sh,
                     j * dw:j * dw + sw * (wd - 1) + 1:sw] += contrib
    p, q = deconv_out(h, r, sh, pt, pb, dh, oh), deconv_out(wd, s, sw, pl, pr, dw, ow)
    out = full[:, :, pt:pt + p, pl:pl + q]
    if b is not None:
        out = out + b.reshape(1, -1, 1, 1)
    return out.astype(x.dtype)


def _evaluate(node, arrays):
    x, w, b = (list(arrays) + [None])[:3]
    return [conv_transpose_reference(x, w, b, *_params(node))]


register(OpDef("ConvTranspose", ("X", "W", "B?"), _infer, _evaluate, Pattern.OUT_FUSABLE, dict(DECONV_ATTRS),
               doc="2-d transposed convolution (strides, pads, dilations, output_padding, group; bias optional)"))
