"""Folding a zero Pad of the spatial dims into the Conv that reads it.

TensorFlow exporters write a convolution's ``SAME`` padding as an explicit constant ``Pad`` node before a
``VALID`` Conv. Computed as it is, the Pad is a kernel of its own that copies the whole input, and its
row-major output breaks the blocked layout between convolutions; onnxruntime folds it (its PadFusion).
``Conv(Pad(x, zeros on N and C, p on H and W), pads=q)`` is ``Conv(x, pads=p + q)``. The Pad may have other
readers: they keep it (dead code elimination drops it when it has none). Negative pads (crops), other modes
and other values stay as they are.
"""
from __future__ import annotations

from graph.pattern import Emitter, Op, Optional, Rule, Wildcard
from graph.passes.base import RulePass

FOLD_PADS = True   # False: every Pad a kernel of its own (docs/decisions/102-zero-pads-fold-into-convs.md)


def _zero_spatial_pad(node, graph) -> bool:
    pads = node.attr("pads")
    rank = len(pads) // 2
    return FOLD_PADS and rank == 4 and node.attr("mode", "constant") == "constant" \
        and float(node.attr("value", 0.0)) == 0.0 and min(pads) >= 0 \
        and pads[0] == pads[1] == pads[rank] == pads[rank + 1] == 0


PAD_CONV = Op("Conv", args=[Op("Pad", args=[Wildcard().bind("x")], where=_zero_spatial_pad).bind("pad"),
                            Wildcard().bind("w"), Optional(Wildcard().bind("b"))])


def _fold(graph, m):
    conv, pads = m.root_node, m.node("pad").attr("pads")
    top, left, bottom, right = conv.attr("pads", (0, 0, 0, 0))
    attrs = dict(conv.attr_dict, pads=(top + pads[2], left + pads[3], bottom + pads[6], right + pads[7]))
    r = Emitter(graph)
    return r.replace_with(r.op("Conv", [m["x"], m["w"], m["b"] if "b" in m else None], name=conv.name, **attrs))


fold_pads = RulePass("fold_pads", (Rule("pad-conv", PAD_CONV, _fold),))
