"""Matrix products and convolution: MatMul (numpy's batched semantics), Gemm, Conv (NCHW, groups)."""
from __future__ import annotations

import numpy as np

from graph.ir import TensorType
from graph.ops.registry import OpDef, OpError, Pattern, register


# ------------------------------------------------------------------ MatMul

def matmul_shape(node, a: tuple, b: tuple) -> tuple:
    """numpy.matmul's output shape (1-d operands promoted and the added axis dropped)."""
    if not a or not b:
        raise OpError(f"node {node.name} ({node.op}): operands must have rank >= 1, got {a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise OpError(f"node {node.name} ({node.op}): inner dimensions differ: {a} @ {b}")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise OpError(f"node {node.name} ({node.op}): batch dimensions of {a} and {b} do not broadcast") \
            from None
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(node, types):
    a, b = types
    if a.dtype != b.dtype:
        raise OpError(f"node {node.name} (MatMul): operand dtypes differ ({a.dtype}, {b.dtype})")
    return [TensorType(matmul_shape(node, a.shape, b.shape), a.dtype)]


register(OpDef("MatMul", ("A", "B"), _matmul_infer,
               lambda node, arrays: [np.matmul(arrays[0], arrays[1])], Pattern.OUT_FUSABLE))


# ------------------------------------------------------------------ Gemm

GEMM_ATTRS = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}


def _gemm_infer(node, types):
    a, b, c = types
    if a.rank != 2 or b.rank != 2:
        raise OpError(f"node {node.name} (Gemm): A and B must be 2-d, got {a.shape} and {b.shape}")
    (m, k) = a.shape[::-1] if node.attr("transA", 0) else a.shape
    (k2, n) = b.shape[::-1] if node.attr("transB", 0) else b.shape
    if k != k2:
        raise OpError(f"node {node.name} (Gemm): inner dimensions differ ({k} and {k2})")
    if c is not None:
        try:
            if tuple(np.broadcast_shapes(c.shape, (m, n))) != (m, n):
                raise ValueError
        except ValueError:
            raise OpError(f"node {node.name} (Gemm): C of shape {c.shape} does not broadcast to {(m, n)}") \
                from None
    return [TensorType((m, n), a.dtype)]


def _gemm_eval(node, arrays):
    a, b, c = (list(arrays) + [None])[:3]
    a = a.T if node.attr("transA", 0) else a
    b = b.T if node.attr("transB", 0) else b
    out = node.attr("alpha", 1.0) * (a @ b)
    if c is not None:
        out = out + node.attr("beta", 1.0) * c
    return [np.asarray(out, dtype=a.dtype)]


register(OpDef("Gemm", ("A", "B", "C?"), _gemm_infer, _gemm_eval, Pattern.OUT_FUSABLE, dict(GEMM_ATTRS)))


# ------------------------------------------------------------------ Conv

# The importer normalizes Conv: pads as 4 ints (top, left, bottom, right), auto_pad resolved,
# kernel_shape from the weights; only 2-d convolutions (NCHW).
CONV_ATTRS = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}


def conv_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int) -> int:
    return (size + pad_lo + pad_hi - dilation * (k - 1) - 1) // stride + 1


def _conv_infer(node, types):
    x, w, b = types
    if x.rank != 4 or w.rank != 4:
        raise OpError(f"node {node.name} (Conv): only 2-d convolutions (NCHW data, OIHW weights), got "
                      f"{x.shape} and {w.shape}")
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    g = node.attr("group", 1)
    if c % g or k % g or c // g != cg:
        raise OpError(f"node {node.name} (Conv): {c} input channels, group {g} and weights {w.shape} "
                      "do not agree")
    if b is not None and b.shape != (k,):
        raise OpError(f"node {node.name} (Conv): bias shape {b.shape}, expected {(k,)}")
    sh, sw = node.attr("strides", (1, 1))
    pt, pl, pb, pr = node.attr("pads", (0, 0, 0, 0))
    dh, dw = node.attr("dilations", (1, 1))
    p, q = conv_out(h, r, sh, pt, pb, dh), conv_out(wd, s, sw, pl, pr, dw)
    if p <= 0 or q <= 0:
        raise OpError(f"node {node.name} (Conv): the window {r}x{s} does not fit the padded input {h}x{wd}")
    return [TensorType((n, k, p, q), x.dtype)]


def conv2d_reference(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    """Grouped NCHW convolution in numpy (float64 accumulation)."""
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    sh, sw = strides
    pt, pl, pb, pr = pads
    dh, dw = dilations
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    p, q = conv_out(h, r, sh, pt, pb, dh), conv_out(wd, s, sw, pl, pr, dw)
    out = np.zeros((n, k, p, q))
    kg = k // group
    for gi in range(group):
        xs = xp[:, gi * cg:(gi + 1) * cg]
        ws = w[gi * kg:(gi + 1) * kg].astype(np.float64)
        for i in range(r):
            for j in range(s):
                patch = xs[:, :, i * dh:i * dh + sh * (p - 1) + 1:sh, j * dw:j * dw + sw * (q - 1) + 1:sw]
                out[:, gi * kg:(gi + 1) * kg] += np.einsum("nchw,kc->nkhw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out.astype(x.dtype)


def _conv_eval(node, arrays):
    x, w, b = (list(arrays) + [None])[:3]
    return [conv2d_reference(x, w, b, node.attr("strides", (1, 1)), node.attr("pads", (0, 0, 0, 0)),
                             node.attr("dilations", (1, 1)), node.attr("group", 1))]


register(OpDef("Conv", ("X", "W", "B?"), _conv_infer, _conv_eval, Pattern.OUT_FUSABLE, dict(CONV_ATTRS)))
