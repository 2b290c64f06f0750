"""Compile a graph into a :class:`graph.runtime.CompiledModel`: passes, fusion, one workload per
fused group, one kernel per DISTINCT workload (structural key) built with the best logged
schedule for this machine (:func:`logs.build`), else the heuristic start.

>>> model = compile_graph(graph, log="run.jsonl", threads=2)      # doctest: +SKIP
>>> model.run({"x": x})
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from graph.fusion import fuse
from graph.ir import Graph
from graph.lower import lower_group, plan_blocked, plan_layouts, storage_dtype, to_storage
from graph.lower.core import storage_shape
from graph.runtime import Buffer, CompiledModel, Step
from tensorir.te.evaluate import evaluate
from tuner.model_threads import model_threads
from tuner.prepack import replaced_inputs


def run_passes(graph: Graph, trace=None) -> Graph:
    """The graph after the pass pipeline of ``graph.passes`` (the graph itself while there is none).

    ``trace(pass_name, graph)``, if given, is called after each pass.
    """
    try:
        from graph.passes import run_passes as pipeline
    except ImportError:
        return graph
    return pipeline(graph, print_after=trace) if trace is not None else pipeline(graph)


@dataclass
class Plan:
    """What compiling produced before kernels are built: the graph, its groups and workloads."""
    graph: Graph
    groups: list
    lowered: list          # LoweredGroup per group
    seconds: float
    layouts: dict          # value -> layout of values not stored row-major


def plan_graph(graph: Graph, passes: bool = True, layouts: bool = False, blocked: bool = True) -> Plan:
    """Passes (if ``passes``), fusion, layouts (conv outputs channels-innermost if ``layouts``, else
    blocked between convolutions if ``blocked``) and lowering of every group (LoweringError on an
    unsupported op)."""
    t0 = time.perf_counter()
    if passes:
        graph = run_passes(graph)
    groups = fuse(graph)
    if layouts:
        graph, groups, chosen = plan_layouts(graph, groups)
    elif blocked:
        graph, groups, chosen = plan_blocked(graph, groups)
    else:
        chosen = {}
    lowered = [lower_group(graph, g, chosen) for g in groups]
    return Plan(graph, groups, lowered, time.perf_counter() - t0, chosen)


def build_kernels(plan: Plan, log=None, threads: int | None = None, prepack: bool = True,
                  choices: bool = True) -> dict:
    """One kernel per distinct workload key: key -> Kernel (its ``lookup`` says what schedule).

    ``choices``: let a model's choice (``tune-model``'s final check) rank first (default); False:
    each task's fastest measurement.

    With ``prepack``, a kernel whose schedule packs a constant input (weights) into a blocked
    layout is rebuilt to read a packed copy made once by :func:`assemble` (``kernel.prepacked``).
    """
    from logs import build
    kernels = {}
    for lw in plan.lowered:
        if lw.key not in kernels:
            kernels[lw.key] = build(lw.tensors, log=log, threads=threads, warn=False, choices=choices)
    if prepack:
        for key, kernel in kernels.items():
            kernels[key] = _prepacked(plan, key, kernel, threads)
    return kernels


def constant_params(lw, graph) -> set:
    """Indices of the placeholders of lowered group ``lw`` that ``graph`` feeds with a constant."""
    return {i for i, (kind, what) in enumerate(lw.params) if kind == "const" or what in graph.constants}


def _constant_inputs(plan: Plan, key: str) -> set:
    """Indices of the placeholders of workload ``key`` that every occurrence feeds with a constant."""
    sets = [constant_params(lw, plan.graph) for lw in plan.lowered if lw.key == key]
    return set.intersection(*sets) if sets else set()


def _prepacked(plan: Plan, key: str, kernel, threads):
    from tensorir.runtime import build as build_func
    from tuner.prepack import prepack
    schedule = getattr(kernel, "schedule", None)
    constant = _constant_inputs(plan, key)
    if schedule is None or not constant:
        return kernel
    lw = next(lw for lw in plan.lowered if lw.key == key)
    pre = prepack(lw.tensors, schedule, constant)
    if pre is None:
        return kernel
    new = build_func(pre.schedule.lower())
    if threads is not None:
        new.threads = threads
    new.lookup, new.schedule, new.prepacked = getattr(kernel, "lookup", None), pre.schedule, pre
    return new


def _copy(src, dst):
    np.copyto(dst, src)


def assemble(plan: Plan, kernels: dict, info: dict | None = None) -> CompiledModel:
    """The CompiledModel running ``plan``'s groups with ``kernels`` (key -> callable)."""
    graph = plan.graph
    buffers, ids, constants = [], {}, {}

    def buffer_of(value: str) -> int:
        if value not in ids:
            t = graph.types[value]
            ids[value] = len(buffers)
            buffers.append(Buffer(value, t.shape, t.dtype, storage_shape(t.shape, plan.layouts.get(value)),
                                  storage_dtype(t.dtype)))
            if value in graph.constants:
                constants[ids[value]] = to_storage(graph.constants[value])
        return ids[value]

    inputs = [buffer_of(v) for v in graph.inputs]
    steps = []
    read_directly: set = set()      # buffers some kernel reads as they are
    packed: dict = {}       # (source buffer, pack stage) -> buffer of the packed copy

    def constant_buffer(label: str, array) -> int:
        b = len(buffers)
        buffers.append(Buffer(label, array.shape, array.dtype.name, array.shape, array.dtype.name))
        constants[b] = array
        return b

    for g, lw in zip(plan.groups, plan.lowered):
        args = []
        for kind, what in lw.params:
            args.append(buffer_of(what) if kind == "value" else constant_buffer(f"{g.name}.const{len(buffers)}", what))
        pre = getattr(kernels[lw.key], "prepacked", None)
        if pre is not None:     # the kernel reads packed copies of its constants, made here once
            t0 = time.perf_counter()
            base, args = args, []
            for feed in pre.feeds:
                if feed[0] == "input":
                    args.append(base[feed[1]])
                    continue
                src = base[feed[1]]
                if (src, feed[2].name, feed[2].shape) not in packed:
                    array = evaluate(feed[2].layout(), [constants[src]])[0]
                    packed[(src, feed[2].name, feed[2].shape)] = constant_buffer(f"{g.name}.{feed[2].name}", array)
                args.append(packed[(src, feed[2].name, feed[2].shape)])
            if info is not None:
                info["prepack_seconds"] = info.get("prepack_seconds", 0.0) + time.perf_counter() - t0
            replaced = {base[j] for j in replaced_inputs(pre)}
            read_directly.update(b for j, b in enumerate(args) if b not in replaced)
        else:
            read_directly.update(args)
        args += [buffer_of(v) for v in lw.outputs]
        kernel = kernels[lw.key]
        # a group computing its plane as one row (graph/lower/flat.py) reads the same buffers reshaped
        want = getattr(kernel, "param_shapes", None)
        shapes = want if want is not None and want != tuple(buffers[b].storage_shape for b in args) else None
        steps.append(Step(kernel, tuple(args), g.name, shapes))
    outputs = []
    for v in graph.outputs:
        b = buffer_of(v)
        if b in inputs or b in constants or b in outputs:
            # an output that is an input, a constant or listed twice gets a buffer of its own
            t = graph.types[v]
            out = len(buffers)
            buffers.append(Buffer(v, t.shape, t.dtype, storage_shape(t.shape), storage_dtype(t.dtype)))
            steps.append(Step(_copy, (b, out), f"copy {v}"))
            read_directly.add(b)
            b = out
        outputs.append(b)
    # A weight that every kernel reads only through its packed copy is not kept: the kernels
    # still take it (their signatures), and get an array of zeros the OS never backs with memory.
    unread = {b for b in constants if b not in read_directly}
    for b in unread:
        constants[b] = np.zeros(constants[b].shape, constants[b].dtype)
    return CompiledModel(graph.name, buffers, inputs, outputs, constants, steps, info, unread=unread,
                         index_limits=_index_limits(graph, ids))


def _index_limits(graph: Graph, ids: dict) -> dict:
    """Model inputs read as Gather / GatherElements indices: buffer id -> (axis length, node)."""
    limits: dict = {}
    for node in graph.nodes:
        if node.op not in ("Gather", "GatherElements") or node.inputs[1] not in graph.inputs:
            continue
        data = graph.types[node.inputs[0]]
        axis = node.attr("axis", 0)
        n = data.shape[axis % len(data.shape)]
        b = ids[node.inputs[1]]
        if b not in limits or n < limits[b][0]:
            limits[b] = (n, f"{node.op} {node.name}")
    return limits


def compile_graph(graph: Graph, log=None, threads: int | None = None, passes: bool = True,
                  layouts: bool = False, prepack: bool = True, blocked: bool = True) -> CompiledModel:
    """Compile ``graph`` (see the module docstring); ``model.info`` holds the plan, the kernels and
    the time each phase took. ``layouts``: compute conv outputs channels-innermost (off by default:
    docs/decisions/024-model-conv-nhwc-layout.md); ``blocked``: activations blocked between
    convolutions (docs/decisions/035-blocked-activations-between-convs.md).
    ``prepack``: pack constant weights once here rather than in every call (default)."""
    plan = plan_graph(graph, passes, layouts, blocked)
    t0 = time.perf_counter()
    kernels = build_kernels(plan, log, threads, prepack)
    build_s = time.perf_counter() - t0
    matches = {}
    for k in kernels.values():
        m = getattr(getattr(k, "lookup", None), "match", "built")
        matches[m] = matches.get(m, 0) + 1
    info = {"plan": plan, "kernels": kernels, "groups": len(plan.groups), "distinct_kernels": len(kernels),
            "schedules": matches, "lower_seconds": plan.seconds, "build_seconds": build_s,
            "prepacked_kernels": sum(1 for k in kernels.values() if getattr(k, "prepacked", None) is not None)}
    _warn_failed_starts(plan, kernels)
    run_threads, info["serial"] = model_threads(plan.lowered, threads)
    model = assemble(plan, kernels, info)
    if run_threads is not None:
        model.threads = run_threads
    return model


def _warn_failed_starts(plan: Plan, kernels: dict) -> None:
    """One warning naming the groups whose heuristic start failed to build: they run the naive
    loop nest, correct but often 10-100x slower, which the kernel counts alone would hide.
    (:func:`build_kernels` asks for the heuristic start, so a naive kernel is one whose start failed.)"""
    import warnings
    from logs import TuningFallbackWarning
    failed = []
    for key, kernel in kernels.items():
        lookup = getattr(kernel, "lookup", None)
        if getattr(lookup, "match", None) == "naive":
            names = [g.name for g, lw in zip(plan.groups, plan.lowered) if lw.key == key]
            failed.append(f"{names[0]}{f' (+{len(names) - 1} alike)' if len(names) > 1 else ''}: {lookup.why}")
    if failed:
        warnings.warn(f"{plan.graph.name}: {len(failed)} kernel(s) run the naive loop nest because their "
                      f"heuristic start failed to build (slow, still correct; please report): "
                      + "; ".join(failed), TuningFallbackWarning, stacklevel=3)
