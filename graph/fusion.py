"""Operator fusion by op kind (TVM's FuseOps rules on each op's :class:`~graph.ops.registry.Pattern`).

>>> groups = fuse(graph)                                  # doctest: +SKIP
>>> print(format_groups(graph, groups))

Walking the nodes in topological order, a node joins the group that produced one of its inputs
when that input is the group's output, has no other use (not read by another node, not a graph
output), and the rules allow it:

- a group anchored by a conv or matmul/gemm (OUT_FUSABLE) takes an elementwise or broadcast
  epilogue of the anchor's output shape (bias, ReLU, residual add, Gelu, Clip);
- elementwise, broadcast and injective nodes chain (reshape -> transpose -> add is one group);
- a reduction (Reduce*, Softmax, LayerNormalization, pools) takes its elementwise, broadcast or
  injective producers, and then elementwise/broadcast consumers;
- OPAQUE ops and unknown kinds are groups of their own; a group never holds two reductions
  or two anchors;
- a group holds at most :data:`MAX_GROUP_NODES` nodes (long elementwise chains are cut: a
  bigger body does not make a kernel faster once its loads are shared, and compile time grows).

A value used by two nodes (or a graph output) is materialized, so every group has exactly one
output. The groups come back in a topological order of their data dependences.
"""
from __future__ import annotations

from dataclasses import dataclass

from graph.ir import Graph
from graph.ops.registry import Pattern, get_op

MAX_GROUP_NODES = 16
"""Largest number of nodes in one fused group."""


@dataclass(frozen=True)
class FusedGroup:
    """Nodes computed by one kernel.

    ``nodes`` in topological order; ``inputs``: the values read from outside the group (graph
    inputs, constants, other groups' outputs), in first-read order; ``outputs``: the values
    other groups or the graph's outputs read; ``pattern``: the group's kind (its anchor's
    pattern, or the most restrictive of its nodes').
    """
    nodes: tuple
    inputs: tuple
    outputs: tuple
    pattern: Pattern

    @property
    def name(self) -> str:
        """The group's name: its last node's (the output's producer)."""
        return self.nodes[-1].name

    @property
    def ops(self) -> tuple:
        return tuple(n.op for n in self.nodes)


def _pattern(op: str) -> Pattern:
    try:
        return get_op(op).pattern
    except KeyError:
        return Pattern.OPAQUE


class _Group:
    def __init__(self, node, pattern):
        self.nodes = [node]
        self.pattern = pattern           # ELEMWISE..INJECTIVE: a chain; REDUCE / OUT_FUSABLE: anchored
        self.output = node.outputs[0]
        self.shape = None


def _can_join(group: _Group, pattern: Pattern, out_shape: tuple, anchor_shape: tuple) -> bool:
    if len(group.nodes) >= MAX_GROUP_NODES or pattern is Pattern.OPAQUE:
        return False
    if group.pattern is Pattern.OPAQUE:
        return False
    if group.pattern is Pattern.OUT_FUSABLE:
        return pattern <= Pattern.BROADCAST and out_shape == anchor_shape
    if group.pattern is Pattern.REDUCE:
        return pattern <= Pattern.BROADCAST
    # an elementwise / broadcast / injective chain takes more of them, or ends in a reduction
    return pattern <= Pattern.REDUCE


def fuse(graph: Graph) -> list:
    """The fused groups of ``graph``, in a topological order (see the module docstring)."""
    group_of: dict = {}       # value -> _Group that produced it
    groups: list = []
    for node in graph.nodes:
        pattern = _pattern(node.op)
        outs = [v for v in node.outputs if v]
        out_shape = graph.types[outs[0]].shape if outs else ()
        joined = None
        if len(outs) == 1:
            for v in node.inputs:
                g = group_of.get(v)
                if g is None or g.output != v or joined is not None:
                    continue
                users = graph.consumers(v)
                if v in graph.outputs or any(u is not node for u in users):
                    continue
                if _can_join(g, pattern, out_shape, g.shape):
                    joined = g
        if joined is None:
            g = _Group(node, pattern)
            g.shape = out_shape
            groups.append(g)
        else:
            g = joined
            g.nodes.append(node)
            if pattern in (Pattern.REDUCE, Pattern.OUT_FUSABLE):
                g.pattern, g.shape = pattern, out_shape
            elif g.pattern < Pattern.REDUCE:
                g.pattern = max(g.pattern, pattern)
            g.output = outs[0]
        for v in outs:
            group_of[v] = g
    return _finish(graph, groups, group_of)


def _finish(graph: Graph, groups: list, group_of: dict) -> list:
    made = {}
    for g in groups:
        inside = {v for n in g.nodes for v in n.outputs}
        inputs = []
        for n in g.nodes:
            for v in n.inputs:
                if v and v not in inside and v not in inputs:
                    inputs.append(v)
        outputs = tuple(v for n in g.nodes for v in n.outputs
                        if v and (v in graph.outputs or any(group_of.get(u.outputs[0]) is not g
                                                            for u in graph.consumers(v))))
        made[id(g)] = FusedGroup(tuple(g.nodes), tuple(inputs), outputs or (g.output,), g.pattern)
    # a topological order of the groups: a group runs once the groups it reads have run
    ready = set(graph.inputs) | set(graph.constants)
    pending = [made[id(g)] for g in groups]
    order = []
    while pending:
        rest = []
        for fg in pending:
            if all(v in ready for v in fg.inputs):
                order.append(fg)
                ready.update(v for n in fg.nodes for v in n.outputs if v)
            else:
                rest.append(fg)
        if len(rest) == len(pending):
            raise AssertionError(f"fusion made a cycle through group {rest[0].name}")  # a bug, not bad input
        pending = rest
    return order


def format_groups(graph: Graph, groups: list, workloads: dict | None = None) -> str:
    """One block per group: its kind, inputs -> outputs, and its nodes (graph printer lines);
    ``workloads`` (group name -> text) adds each group's workload description."""
    lines = [f"{len(groups)} fused groups ({len(graph.nodes)} nodes):"]
    for n, g in enumerate(groups):
        outs = ", ".join(f"{v}: {graph.types[v]}" for v in g.outputs)
        lines.append(f"group {n} {g.pattern.name.lower()} [{'+'.join(g.ops)}]: ({', '.join(g.inputs)}) -> ({outs})")
        lines += ["    " + graph.format_node(node) for node in g.nodes]
        if workloads and g.name in workloads:
            lines += ["    " + line for line in workloads[g.name].splitlines()]
    return "\n".join(lines)
