"""A fused group -> ONE workload (a list of te tensors: the group's inputs as placeholders, the
constants a lowering adds, then the group's outputs).

>>> lowered = lower_group(graph, group)            # doctest: +SKIP
>>> lowered.tensors, lowered.key, lowered.params

Placeholders are named ``in0, in1, ...`` in the group's input order and stages by op kind and
position, so the same group in two places of a model (or two models) is the same workload:
the same :func:`tensorir.te.serialize.workload_key`, one kernel, one tuning log entry.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graph.ir import Graph
from graph.lower.core import (NHWC, Ctx, LoweringError, Val, block_of, from_storage, storage_dtype, storage_shape,
                              to_storage)
from graph.lower.elementwise import LOWERINGS
from graph.lower.flat import flat_values, flattened
from tensorir import te
from tensorir.te.evaluate import evaluate, topo_stages
from tensorir.te.expr import ExprError
from tensorir.te.serialize import workload_key


@dataclass
class LoweredGroup:
    """One fused group as a workload.

    Attributes
    ----------
    tensors : list of te.Tensor
        The workload: placeholders (group inputs, then added constants), then the outputs.
    params : list of tuple
        What feeds each tensor, in order: ``("value", name)`` for a graph value (an input,
        a constant or another group's output) and ``("const", array)`` for an array the
        lowering made (in its kernel dtype).
    outputs : tuple of str
        The graph values the workload's outputs hold.
    key : str
        The workload's structural key.
    layouts : dict
        Value -> layout of the values the workload reads or writes in a layout other than the
        graph's row-major one (:data:`graph.lower.core.NHWC`, :func:`graph.lower.core.blocked`).
    """
    tensors: list
    params: list
    outputs: tuple
    key: str = field(default="")
    layouts: dict = field(default_factory=dict)

    def feeds(self, graph: Graph, env: dict) -> list:
        """The input arrays of the workload (kernel dtype) from ``env`` (value -> graph array)."""
        out = []
        for kind, what in self.params:
            if kind == "const":
                out.append(what)
            else:
                a = env[what] if what in env else graph.constants[what]
                # (a flattened group reads its values as one row: graph/lower/flat.py)
                out.append(to_storage(a, self.layouts.get(what)).reshape(self.tensors[len(out)].shape))
        return out


def lower_node(ctx: Ctx, graph: Graph, node, vals: dict) -> list:
    """``node``'s outputs as Vals (``vals``: graph value -> Val of its inputs)."""
    fn = LOWERINGS.get(node.op)
    if fn is None:
        raise LoweringError(f"node {node.name} ({node.op}): no lowering to a tensor expression for {node.op}")
    ins = [vals[v] if v else None for v in node.inputs]
    outs = [graph.types[v] for v in node.outputs if v]
    for t in outs + [v and graph.types[v] for v in node.inputs if v]:
        try:
            storage_dtype(t.dtype)
        except LoweringError as err:
            raise LoweringError(f"node {node.name} ({node.op}): {err}") from None
    try:
        return fn(ctx, node, ins, outs)
    except (te.TEError, ExprError) as err:
        raise LoweringError(f"node {node.name} ({node.op}): {err}") from None


def lower_group(graph: Graph, group, layouts: dict | None = None) -> LoweredGroup:
    """The workload of ``group`` (a :class:`graph.fusion.FusedGroup` or anything with ``nodes``,
    ``inputs`` and ``outputs``); ``layouts`` (value -> layout, see :func:`graph.lower.layout.choose_layouts`)
    says which values are stored in a layout other than row-major, the group's output included."""
    layouts = dict(layouts or {})
    flat = flat_values(graph, group, layouts)
    if flat:    # a pointwise conv group on its plane as one row (graph/lower/flat.py)
        graph = flattened(graph, flat)
    ctx = Ctx(graph)
    out_layout = layouts.get(group.outputs[0])
    if out_layout == NHWC:
        ctx.nhwc_shape = graph.types[group.outputs[0]].shape
    elif block_of(out_layout):
        ctx.blocked_shape, ctx.blocked_layout = graph.types[group.outputs[0]].shape, out_layout
    vals, params, placeholders = {}, [], []
    for n, v in enumerate(group.inputs):
        t = graph.types[v]
        try:
            ph = te.placeholder(storage_shape(t.shape, layouts.get(v)), storage_dtype(t.dtype), f"in{n}")
        except te.TEError as err:
            raise LoweringError(f"value {v!r}: {err}") from None
        vals[v] = Val(ph, t.dtype, t.shape, layouts.get(v))
        placeholders.append(ph)
        params.append(("value", v))
    for node in group.nodes:
        for v, val in zip([o for o in node.outputs if o], lower_node(ctx, graph, node, vals)):
            vals[v] = val
    for ph, array in ctx.constants:
        placeholders.append(ph)
        params.append(("const", array))
    for v in group.outputs:
        if vals[v].layout != layouts.get(v):
            raise LoweringError(f"internal: group {group.nodes[-1].name} computes {v!r} in layout "
                                f"{vals[v].layout or 'row-major'}, the plan asked for {layouts.get(v) or 'row-major'}")
    outputs = [vals[v].tensor for v in group.outputs]
    # a group output that is a group input (a no-op group) still needs a stage of its own
    for n, (v, t) in enumerate(zip(group.outputs, outputs)):
        if t.is_placeholder:
            outputs[n] = te.compute(t.shape, lambda *i, t=t: t[i], f"copy{n}")
    # placeholders no stage reads (a constant exponent or index the lowering folded in) are dropped
    read = {id(t) for t in topo_stages(outputs)}
    keep = [n for n, ph in enumerate(placeholders) if id(ph) in read]
    placeholders, params = [placeholders[n] for n in keep], [params[n] for n in keep]
    tensors = placeholders + outputs
    used = {v: layouts[v] for v in list(group.inputs) + list(group.outputs) if v in layouts}
    return LoweredGroup(tensors, params, tuple(group.outputs), workload_key(tensors), used)


def evaluate_group(lowered: LoweredGroup, graph: Graph, env: dict) -> dict:
    """The group's outputs computed by the numpy reference evaluator of ``tensorir`` (for tests)."""
    arrays = evaluate(lowered.tensors, lowered.feeds(graph, env))
    return {v: from_storage(a, graph.types[v].dtype, graph.types[v].shape, lowered.layouts.get(v))
            for v, a in zip(lowered.outputs, arrays)}


__all__ = ["LoweredGroup", "lower_group", "lower_node", "evaluate_group"]
