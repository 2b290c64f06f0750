"""A model's tuning tasks: one per distinct fused group, weighted by how often the model runs it.

Groups are told apart by their workload's structural key, so the 2nd and 3rd identical
residual blocks of a ResNet stage are one task of weight 2. A group with no reduction (an
elementwise chain, a layout change) or with little work is not given trials: the generated
space's heuristic start (vectorized, parallel) is what tuning would find for it, so it is
listed as ``heuristic`` and built that way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tensorir.te.evaluate import count_flops, topo_stages

from .model_compile import constant_params
from .spec import WorkloadSpec
from .task_scheduler import Task

MIN_TUNED_FLOPS = 1 << 20
"""A group with fewer floating-point operations per run is built with its heuristic start."""


@dataclass
class ModelTask:
    """One distinct fused group of a model."""
    index: int
    label: str                  # e.g. "Conv+Add+Relu 1x64x56x56->1x64x56x56"
    ops: tuple                  # op kinds of the group, in order
    spec: WorkloadSpec
    weight: int                 # occurrences in the model
    flops: int                  # per run
    groups: list = field(default_factory=list)   # the FusedGroup of each occurrence
    tuned: bool = True          # False: built with its heuristic start, no trials
    why_not: str = ""           # why it gets no trials
    constants: set = field(default_factory=set)   # placeholder indices every occurrence feeds a constant

    def task(self, model: str | None = None) -> Task:
        """The scheduler's task; its records carry ``meta["model"]`` = ``model``, the task id and weight."""
        meta = {"model": model, "task": self.index, "weight": self.weight} if model else {}
        names = [t.name for t in self.spec.tensors() if t.is_placeholder]
        return Task(self.spec, self.weight, tag="+".join(self.ops), name=self.label, meta=meta,
                    constants=tuple(names[i] for i in sorted(self.constants)))


def _has_reduction(tensors) -> bool:
    return any(not t.is_placeholder and t.op.reduce_axes for t in topo_stages(tensors))


def group_label(group, graph) -> str:
    """``"Conv+Add+Relu 1x64x56x56->1x64x56x56"``: the group's op kinds, the shape of its first input
    that is not a constant, and its (first) output's shape."""
    def dims(value):
        return "x".join(map(str, graph.types[value].shape)) or "scalar"
    data = [v for v in group.inputs if v not in graph.constants]
    shapes = f"{dims(data[0])}->{dims(group.outputs[0])}" if data else dims(group.outputs[0])
    return f"{'+'.join(n.op for n in group.nodes)} {shapes}"


def extract_tasks(graph, groups: list, lowered: list, min_flops: int = MIN_TUNED_FLOPS) -> list:
    """The distinct tasks of ``groups`` (fused groups of ``graph``) and ``lowered`` (their workloads).

    Returns the ModelTasks in the order each first occurs, tuned ones and heuristic ones alike.
    """
    by_key: dict = {}
    for group, low in zip(groups, lowered):
        task = by_key.get(low.key)
        # weights (constants) are packed once when the model is built, so tuning times kernels that way
        constant = constant_params(low, graph)
        if task is not None:
            task.weight += 1
            task.groups.append(group)
            task.constants &= constant
            continue
        label = group_label(group, graph)
        spec = WorkloadSpec.from_tensors(low.tensors, label)
        flops = int(count_flops(low.tensors))
        task = ModelTask(len(by_key), label, tuple(n.op for n in group.nodes), spec, 1, flops, [group],
                         constants=constant)
        if not _has_reduction(low.tensors):
            task.tuned, task.why_not = False, "no reduction (elementwise or layout): heuristic start"
        elif flops < min_flops:
            task.tuned, task.why_not = False, f"under {min_flops:.0e} FLOP: heuristic start"
        by_key[low.key] = task
    return list(by_key.values())


def select_tasks(tasks: list, subset: str | None) -> list:
    """The tuned tasks named by ``subset`` (``"0,3,5"`` task ids; None: all tuned tasks).

    Raises ValueError naming an id that is not a tuned task.
    """
    tuned = [t for t in tasks if t.tuned]
    if not subset:
        return tuned
    ids = {t.index: t for t in tuned}
    chosen = []
    for part in subset.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) not in ids:
            valid = ", ".join(str(i) for i in sorted(ids)) or "none"
            raise ValueError(f"--tasks: {part!r} is not a tuned task id (tuned tasks: {valid})")
        chosen.append(ids[int(part)])
    return chosen
