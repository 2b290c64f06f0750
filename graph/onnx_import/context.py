"""The state of one conversion: which ONNX values are known at import time (initializers,
constants, everything computed from them and from static shapes) and which are graph values.

Converters refer to values by their ONNX names. ``emit`` adds a canonical node, or folds it
with the op's numpy semantics when every input is known, so shape plumbing never reaches the
graph. Known values become graph constants only where a graph node reads them.
"""
from __future__ import annotations

import numpy as np

from graph.builder import GraphBuilder
from graph.ir import Graph, GraphError, Node, TensorType
from graph.onnx_import.errors import OnnxImportError, OnnxNode
from graph.ops.registry import get_op, infer_types


def sanitize(name: str) -> str:
    """A value name as the graph keeps it: ONNX's own unless empty or holding whitespace."""
    cleaned = "_".join(name.split())
    return cleaned or "value"


class ImportContext:
    """Known arrays and graph values of the model being converted, keyed by ONNX name."""

    def __init__(self, name: str, reserved: set):
        self.builder = GraphBuilder(name)
        self.known: dict = {}        # ONNX name -> array computed at import time
        self.values: dict = {}       # ONNX name -> graph value name
        self._taken = set(reserved) | {sanitize(n) for n in reserved}
        self._node_names: set = set()
        self._materialized: dict = {}  # ONNX name -> graph constant name
        self.readers: dict = {}        # ONNX name -> (op type, output names) of each node reading it

    # ------------------------------------------------------------ names
    def fresh(self, base: str) -> str:
        """A value or node name used nowhere in the model."""
        base = sanitize(base)
        name, i = base, 1
        while name in self._taken:
            name, i = f"{base}_{i}", i + 1
        self._taken.add(name)
        return name

    def _node_name(self, preferred: str, fallback: str) -> str:
        for name in (preferred, fallback):
            if name and name not in self._node_names:
                self._node_names.add(name)
                return name
        name = self.fresh(fallback or preferred or "node")
        self._node_names.add(name)
        return name

    # ------------------------------------------------------------ values
    def add_input(self, onnx_name: str, shape: tuple, dtype: str) -> None:
        self.values[onnx_name] = self.builder.input(sanitize(onnx_name), shape, dtype)

    def set_known(self, onnx_name: str, array) -> None:
        if onnx_name:
            self.known[onnx_name] = np.asarray(array)

    def alias(self, out: str, source: str) -> None:
        """``out`` is the same value as ``source`` (Identity, Dropout)."""
        if source in self.known:
            self.known[out] = self.known[source]
        else:
            self.values[out] = self.values[source]

    def is_known(self, onnx_name: str) -> bool:
        return onnx_name in self.known

    def const(self, node: OnnxNode, onnx_name: str, what: str) -> np.ndarray:
        """The import-time value of an attribute-like input, or a one-line refusal."""
        if onnx_name not in self.known:
            raise node.error(f"{what} ({onnx_name!r}) must be a constant or computable from static "
                             "shapes")
        return self.known[onnx_name]

    def type(self, onnx_name: str) -> TensorType:
        if onnx_name in self.known:
            a = self.known[onnx_name]
            return TensorType(a.shape, a.dtype.name)
        return self.builder.types[self.values[onnx_name]]

    def graph_value(self, onnx_name: str) -> str:
        """The graph value for ``onnx_name``, making a known array a graph constant if needed."""
        if onnx_name in self.values:
            return self.values[onnx_name]
        if onnx_name not in self._materialized:
            name = sanitize(onnx_name)
            if name in self.builder.types:
                name = self.fresh(onnx_name)
            self._materialized[onnx_name] = self.builder.constant(name, self.known[onnx_name])
        return self._materialized[onnx_name]

    # ------------------------------------------------------------ nodes
    def emit(self, node: OnnxNode, kind: str, inputs, out: str | None = None, **attrs) -> str:
        """Add ``kind(inputs; attrs)`` defining the ONNX value ``out`` (a fresh one when None);
        fold it when every input is known. Returns the ONNX-level name of the result."""
        inputs = tuple(inputs)
        main = out is not None
        out = out if main else self.fresh(f"{node.name}/{kind}")
        try:
            if inputs and all((not v) or v in self.known for v in inputs):
                probe = Node(node.name, kind, inputs, (out,), attrs)
                types = [self.type(v) if v else None for v in inputs]
                (t,) = infer_types(probe, types)
                (a,) = get_op(kind).evaluate(probe, [self.known[v] if v else None for v in inputs])
                self.known[out] = np.asarray(a).astype(t.dtype, copy=False)
                return out
            graph_inputs = [self.graph_value(v) if v else "" for v in inputs]
            value = sanitize(out) if main else out
            if value in self.builder.types:
                value = self.fresh(out)
            name = self._node_name(node.name if main else "", value)
            self.values[out] = self.builder.op(kind, graph_inputs, name=name, outputs=(value,), **attrs)
        except OnnxImportError:
            raise
        except GraphError as e:
            text = str(e)
            raise OnnxImportError(text if text.startswith(f"node {node.name} ") else f"{node.label}: {text}") \
                from None
        except (ValueError, TypeError, ArithmeticError) as e:     # numpy, while folding constants
            raise OnnxImportError(f"{node.label}: cannot compute {kind} at import time ({e})") from None
        return out

    def finish(self, outputs) -> Graph:
        """The graph with the ONNX outputs, each under its own ONNX name."""
        names = []
        for onnx_name in outputs:
            want = sanitize(onnx_name)
            if onnx_name in self.known and onnx_name not in self._materialized and \
                    want not in self.builder.types:
                self._materialized[onnx_name] = self.builder.constant(want, self.known[onnx_name])
            have = self.graph_value(onnx_name)
            if have != want and want not in self.builder.types:
                have = self.builder.op("Identity", [have], name=self._node_name(want, want), outputs=(want,))
            names.append(have)
        return self.builder.build(names)
