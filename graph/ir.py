"""The graph IR: typed values, op nodes with typed attributes, constants, a frozen DAG.

>>> from graph.builder import GraphBuilder
>>> b = GraphBuilder("tiny")
>>> x = b.input("x", (2, 3))
>>> y = b.op("Relu", [x])
>>> g = b.build([y])
>>> print(g)                                             # doctest: +NORMALIZE_WHITESPACE
graph tiny(x: float32[2,3]) -> (Relu_0: float32[2,3])
  Relu_0: float32[2,3] = Relu(x)

Values are named; a node reads values by name and defines its outputs' names. An absent
optional input (a Conv without bias) is the empty name ``""``. Constants (weights) are
values with an array; their arrays are read-only. Nodes are kept in a topological order,
checked when the graph is built, so every pass can walk ``graph.nodes`` front to back.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping

import numpy as np


class GraphError(ValueError):
    """A malformed graph or a bad use of the IR; the message is one line naming the culprit."""


# Attribute values are kept hashable so nodes compare and hash structurally.
AttrValue = int | float | str | tuple


def freeze_attr(value) -> AttrValue:
    """An attribute value as a hashable one: lists become tuples, numpy scalars Python numbers."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze_attr(v) for v in value)
    if isinstance(value, np.ndarray):
        return tuple(freeze_attr(v) for v in value.tolist()) if value.ndim else freeze_attr(value.item())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (bool, int, float, str)):
        return value
    raise GraphError(f"attribute value {value!r} of type {type(value).__name__} is not an int, float, "
                     "string or a tuple of them")


@dataclass(frozen=True, slots=True)
class TensorType:
    """A value's static type: shape (ints), numpy dtype name, layout (``""`` = plain row-major)."""
    shape: tuple
    dtype: str = "float32"
    layout: str = ""

    def __post_init__(self):
        shape = tuple(self.shape)
        for d in shape:
            if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
                raise GraphError(f"shape {shape} has the dimension {d!r}: dimensions are non-negative ints")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        try:
            object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
        except TypeError:
            raise GraphError(f"{self.dtype!r} is not a numpy dtype") from None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        text = f"{self.dtype}[{','.join(map(str, self.shape))}]"
        return f"{text}@{self.layout}" if self.layout else text


@dataclass(frozen=True, slots=True)
class Node:
    """One operation: ``outputs = op(inputs; attrs)``. ``attrs`` is a sorted tuple of (key, value)."""
    name: str
    op: str
    inputs: tuple
    outputs: tuple
    attrs: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        attrs = self.attrs.items() if isinstance(self.attrs, Mapping) else self.attrs
        object.__setattr__(self, "attrs", tuple(sorted((str(k), freeze_attr(v)) for k, v in attrs)))

    def attr(self, key: str, default=None):
        """The attribute ``key``, or ``default`` when the node has none."""
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def attr_dict(self) -> dict:
        return dict(self.attrs)

    def with_(self, **changes) -> "Node":
        """A copy with some fields replaced (``attrs`` may be a dict)."""
        fields = {"name": self.name, "op": self.op, "inputs": self.inputs, "outputs": self.outputs,
                  "attrs": self.attrs}
        fields.update(changes)
        return Node(**fields)


def _attr_text(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return "[" + ",".join(_attr_text(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Graph:
    """A frozen dataflow DAG.

    Parameters
    ----------
    name : the model's name.
    inputs : names of the runtime inputs, in call order.
    outputs : names of the graph outputs, in order.
    nodes : the nodes, in a topological order.
    types : the type of every value (inputs, constants, node outputs).
    constants : name -> array of every constant value (read-only copies are kept).
    """
    name: str
    inputs: tuple
    outputs: tuple
    nodes: tuple
    types: Mapping = field(default_factory=dict)
    constants: Mapping = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        consts = {}
        for k, a in dict(self.constants).items():
            a = np.asarray(a)
            if a.flags.writeable:
                a = a.copy()
                a.flags.writeable = False
            consts[k] = a
        types = dict(self.types)
        for k, a in consts.items():
            want = TensorType(a.shape, a.dtype.name)
            if k in types and (types[k].shape, types[k].dtype) != (want.shape, want.dtype):
                raise GraphError(f"constant {k!r} is {want} but typed {types[k]}")
            types.setdefault(k, want)
        object.__setattr__(self, "constants", MappingProxyType(consts))
        object.__setattr__(self, "types", MappingProxyType(types))
        self._check()

    # ------------------------------------------------------------ checking
    def _check(self) -> None:
        defined = set()
        for name in self.inputs:
            if name in self.constants:
                raise GraphError(f"graph {self.name}: {name!r} is both an input and a constant")
            if name in defined:
                raise GraphError(f"graph {self.name}: input {name!r} is listed twice")
            defined.add(name)
        defined |= set(self.constants)
        names = set()
        for node in self.nodes:
            if not isinstance(node, Node):
                raise GraphError(f"graph {self.name}: {node!r} is not a Node")
            if node.name in names:
                raise GraphError(f"graph {self.name}: two nodes are named {node.name!r}")
            names.add(node.name)
            for v in node.inputs:
                if v and v not in defined:
                    raise GraphError(f"graph {self.name}: node {node.name} ({node.op}) reads {v!r}, which "
                                     "no input, constant or earlier node defines")
            for v in node.outputs:
                if not v:
                    continue
                if v in defined:
                    raise GraphError(f"graph {self.name}: value {v!r} is defined twice "
                                     f"(again by node {node.name})")
                defined.add(v)
        for v in self.outputs:
            if v not in defined:
                raise GraphError(f"graph {self.name}: output {v!r} is not defined")
        untyped = sorted(v for v in defined if v not in self.types)
        if untyped:
            raise GraphError(f"graph {self.name}: values without a type: {', '.join(untyped[:5])}")

    # ------------------------------------------------------------ queries
    def type_of(self, value: str) -> TensorType:
        try:
            return self.types[value]
        except KeyError:
            raise GraphError(f"graph {self.name}: no value named {value!r}") from None

    def is_constant(self, value: str) -> bool:
        return value in self.constants

    @property
    def _index(self) -> tuple:
        cached = self.__dict__.get("_index_cache")
        if cached is None:
            producer, users = {}, {}
            for node in self.nodes:
                for v in node.outputs:
                    producer[v] = node
                for v in node.inputs:
                    if v:
                        users.setdefault(v, []).append(node)
            cached = (producer, {k: tuple(u) for k, u in users.items()})
            object.__setattr__(self, "_index_cache", cached)
        return cached

    def producer(self, value: str) -> Node | None:
        """The node that computes ``value`` (None for inputs and constants)."""
        return self._index[0].get(value)

    def consumers(self, value: str) -> tuple:
        """The nodes that read ``value`` (a node reading it twice appears once per read)."""
        return self._index[1].get(value, ())

    def use_count(self, value: str) -> int:
        """Reads of ``value`` by nodes, plus one if it is a graph output."""
        return len(self.consumers(value)) + (value in self.outputs)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise GraphError(f"graph {self.name}: no node named {name!r}")

    # ------------------------------------------------------------ rebuilding
    def replace(self, **changes) -> "Graph":
        """A new graph with some fields replaced; types of values no longer defined are dropped."""
        fields = {"name": self.name, "inputs": self.inputs, "outputs": self.outputs, "nodes": self.nodes,
                  "types": self.types, "constants": self.constants}
        fields.update(changes)
        nodes = tuple(fields["nodes"])
        live = set(fields["inputs"]) | set(fields["constants"]) | {v for n in nodes for v in n.outputs}
        fields["types"] = {k: t for k, t in dict(fields["types"]).items() if k in live}
        return Graph(**fields)

    def op_counts(self) -> dict:
        counts = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    # ------------------------------------------------------------ printing
    def format_node(self, node: Node) -> str:
        outs = ", ".join(f"{v}: {self.types[v]}" if v else "_" for v in node.outputs)
        attrs = ", ".join(f"{k}={_attr_text(v)}" for k, v in node.attrs)
        args = ", ".join(v if v else "_" for v in node.inputs)
        line = f"{outs} = {node.op}({args}{'; ' + attrs if attrs else ''})"
        return line if node.name == node.outputs[0] else f"{line}  # {node.name}"

    def __str__(self) -> str:
        ins = ", ".join(f"{v}: {self.types[v]}" for v in self.inputs)
        outs = ", ".join(f"{v}: {self.types[v]}" for v in self.outputs)
        lines = [f"graph {self.name}({ins}) -> ({outs})"]
        for k, a in self.constants.items():
            if any(k in n.inputs for n in self.nodes) or k in self.outputs:
                lines.append(f"  const {k}: {self.types[k]}" + (f" = {_attr_text(freeze_attr(a))}"
                                                                 if a.size <= 8 else ""))
        lines += ["  " + self.format_node(n) for n in self.nodes]
        return "\n".join(lines)


def topological_order(nodes: Iterable[Node], defined: Iterable[str]) -> tuple:
    """``nodes`` sorted so each comes after the producers of its inputs (stable otherwise).

    Raises GraphError naming a node that reads an undefined value or sits on a cycle.
    """
    pending = list(nodes)
    known = set(defined)
    order = []
    while pending:
        rest = []
        for n in pending:
            if all((not v) or v in known for v in n.inputs):
                order.append(n)
                known.update(v for v in n.outputs if v)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            bad = rest[0]
            missing = [v for v in bad.inputs if v and v not in known]
            raise GraphError(f"node {bad.name} ({bad.op}) reads {missing[0]!r}, which is never defined "
                             "or depends on the node itself (a cycle)")
        pending = rest
    return tuple(order)
