"""Writing graphs by hand (tests, users without ONNX).

>>> import numpy as np
>>> from graph.builder import GraphBuilder
>>> b = GraphBuilder("mlp")
>>> x = b.input("x", (4, 8))
>>> w = b.constant("w", np.ones((8, 3), "float32"))
>>> y = b.op("Relu", [b.op("MatMul", [x, w])])
>>> g = b.build([y])
>>> g.type_of(y).shape
(4, 3)

Each ``op`` call checks the node against its op kind and infers its output types at once,
so a shape error names the node where it happens.
"""
from __future__ import annotations

import numpy as np

from graph.ir import Graph, GraphError, Node, TensorType
from graph.ops.registry import get_op, infer_types


class GraphBuilder:
    """Accumulates inputs, constants and nodes; ``build(outputs)`` returns the frozen Graph."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: list = []
        self.constants: dict = {}
        self.nodes: list = []
        self.types: dict = {}
        self._counter = 0

    def _fresh(self, base: str) -> str:
        while True:
            name = f"{base}_{self._counter}"
            self._counter += 1
            if name not in self.types and all(n.name != name for n in self.nodes):
                return name

    def _define(self, name: str, t: TensorType) -> str:
        if not name:
            raise GraphError("a value name must be a non-empty string")
        if name in self.types:
            raise GraphError(f"graph {self.name}: value {name!r} is defined twice")
        self.types[name] = t
        return name

    def input(self, name: str, shape, dtype: str = "float32") -> str:
        """Declare a runtime input; returns its name."""
        self.inputs.append(self._define(name, TensorType(tuple(shape), dtype)))
        return name

    def constant(self, name: str | None, value) -> str:
        """Declare a constant (weights); ``name`` None picks a fresh one. Returns its name."""
        a = np.asarray(value)
        name = name or self._fresh("const")
        self._define(name, TensorType(a.shape, a.dtype.name))
        self.constants[name] = a
        return name

    def op(self, kind: str, inputs, name: str | None = None, outputs=None, **attrs):
        """Add a node; returns its output name (a tuple of names when the op has several outputs).

        ``inputs``: value names, ``None`` or ``""`` for an absent optional input. ``outputs``:
        names to give the outputs (default: the node's name, then ``name:1``, ...).
        """
        op = get_op(kind)
        name = name or self._fresh(kind)
        ins = tuple("" if v is None else v for v in inputs)
        for v in ins:
            if v and v not in self.types:
                raise GraphError(f"node {name} ({kind}) reads {v!r}, which is not defined yet")
        if outputs is None:
            outputs = (name,) + tuple(f"{name}:{i}" for i in range(1, op.outputs))
        elif isinstance(outputs, str):
            outputs = (outputs,)
        node = Node(name, kind, ins, tuple(outputs), attrs)
        out_types = infer_types(node, [self.types[v] if v else None for v in ins])
        for v, t in zip(node.outputs, out_types):
            self._define(v, t)
        self.nodes.append(node)
        return node.outputs[0] if len(node.outputs) == 1 else node.outputs

    def build(self, outputs) -> Graph:
        """The graph computing ``outputs`` (names) from the inputs."""
        outputs = (outputs,) if isinstance(outputs, str) else tuple(outputs)
        return Graph(self.name, tuple(self.inputs), outputs, tuple(self.nodes), dict(self.types),
                     dict(self.constants))


def retype(graph: Graph) -> Graph:
    """Re-infer every node's output types from the inputs' and constants' (after a rewrite)."""
    types = {v: graph.types[v] for v in graph.inputs}
    types.update({k: TensorType(a.shape, a.dtype.name) for k, a in graph.constants.items()})
    for node in graph.nodes:
        for v, t in zip(node.outputs, infer_types(node, [types[v] if v else None for v in node.inputs])):
            types[v] = t
    return graph.replace(types=types)
