"""Op kinds of the graph IR: for each, its inputs, attributes, type inference, numpy semantics and
fusion pattern. The kinds and their semantics are ONNX's (attributes normalized by the importer).

>>> from graph.ops import get_op
>>> get_op("Relu").pattern
<Pattern.ELEMWISE: 0>
"""
from graph.ops.registry import OpDef, Pattern, UnknownOpError, all_ops, get_op, register  # noqa: F401
from graph.ops import elementwise, linalg, normalization  # noqa: F401  (registration)
