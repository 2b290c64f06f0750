"""Folding an inference BatchNormalization into the Conv, Gemm or MatMul before it.

With ``f = scale / sqrt(var + eps)`` per output channel, ``BN(conv(x, w) + b)`` is
``conv(x, w * f) + (b - mean) * f + B``: the weights are scaled per output channel and the bias
absorbs the shift. The producer must be used only by the BatchNormalization (``single_use``),
or folding would change its other readers. A 2-d MatMul becomes a Gemm with the bias as C.
"""
from __future__ import annotations

import numpy as np

from graph.pattern import Constant, Emitter, Op, Optional, Rule, Wildcard
from graph.passes.base import RulePass


def _bn(producer):
    return Op("BatchNormalization", args=[producer, Constant().bind("scale"), Constant().bind("bias"),
                                          Constant().bind("mean"), Constant().bind("var")])


CONV_BN = _bn(Op("Conv", args=[Wildcard().bind("x"), Constant().bind("w"), Optional(Constant().bind("b"))],
                 single_use=True).bind("conv"))
GEMM_BN = _bn(Op("Gemm", args=[Wildcard().bind("a"), Constant().bind("w"), Optional(Constant().bind("c"))],
                 single_use=True).bind("gemm"))
_MATMUL = Op("MatMul", args=[Wildcard(where=lambda v, g: g.type_of(v).rank == 2).bind("a"),
                             Constant(where=lambda a: a.ndim == 2).bind("w")], single_use=True).bind("matmul")
MATMUL_BN = _bn(_MATMUL | Op("Add", args=[_MATMUL, Constant().bind("c")], single_use=True))


def _factors(m):
    """Per-channel (f, shift) in float64: BN(y) = y * f + shift."""
    eps = m.root_node.attr("epsilon", 1e-5)
    f = m.array("scale").astype(np.float64) / np.sqrt(m.array("var").astype(np.float64) + eps)
    return f, m.array("bias").astype(np.float64) - m.array("mean").astype(np.float64) * f


def _fold_conv(graph, m):
    conv, w = m.node("conv"), m.array("w")
    f, shift = _factors(m)
    b = m.array("b").astype(np.float64) if "b" in m else 0.0
    r = Emitter(graph)
    w2 = r.constant(f"{conv.name}_w_bn", (w * f.reshape(-1, 1, 1, 1)).astype(w.dtype))
    b2 = r.constant(f"{conv.name}_b_bn", (b * f + shift).astype(w.dtype))
    return r.replace_with(r.op("Conv", [m["x"], w2, b2], name=conv.name, **conv.attr_dict))


def _fold_gemm(graph, m):
    gemm, w = m.node("gemm"), m.array("w")
    f, shift = _factors(m)
    attrs = gemm.attr_dict
    trans_b = attrs.get("transB", 0)
    w_scaled = w * (f.reshape(-1, 1) if trans_b else f.reshape(1, -1))
    c = attrs.get("beta", 1.0) * m.array("c").astype(np.float64) if "c" in m else 0.0
    attrs["beta"] = 1.0
    r = Emitter(graph)
    w2 = r.constant(f"{gemm.name}_w_bn", w_scaled.astype(w.dtype))
    c2 = r.constant(f"{gemm.name}_c_bn", (c * f + shift).astype(w.dtype))
    return r.replace_with(r.op("Gemm", [m["a"], w2, c2], name=gemm.name, **attrs))


def _fold_matmul(graph, m):
    matmul, w = m.node("matmul"), m.array("w")
    f, shift = _factors(m)
    c = m.array("c").astype(np.float64) if "c" in m else 0.0
    bias = np.asarray(c * f + shift)
    if bias.ndim > 2 or np.broadcast_shapes(bias.shape, graph.type_of(m.root).shape) != \
            graph.type_of(m.root).shape:
        return None
    r = Emitter(graph)
    w2 = r.constant(f"{matmul.name}_w_bn", (w * f.reshape(1, -1)).astype(w.dtype))
    c2 = r.constant(f"{matmul.name}_c_bn", bias.astype(w.dtype))
    return r.replace_with(r.op("Gemm", [m["a"], w2, c2], name=matmul.name))


BATCHNORM_RULES = (
    Rule("conv-batchnorm", CONV_BN, _fold_conv),
    Rule("gemm-batchnorm", GEMM_BN, _fold_gemm),
    Rule("matmul-batchnorm", MATMUL_BN, _fold_matmul),
)

fold_batchnorm = RulePass("fold_batchnorm", BATCHNORM_RULES)
