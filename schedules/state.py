"""Schedule state: the stages of a workload and the loop structure of each.

This is the IR level between tensor expressions and the loop nest (TVM's TE
schedule): every compute tensor is a *stage* with root axes, the loops that
primitives derived from them (``Split`` / ``Fuse`` relations), the leaf-loop
order, loop annotations and where the stage is attached.  Schedule primitives
(``schedules/``) edit a copy of this state; ``lower`` turns it into a loop nest.
Loop extents here are nominal (full-shape); lowering recomputes them for stages
attached inside another stage's loop, from the region that is actually needed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from schedules.errors import WorkloadListError
from tensorir.tir.ir import ForKind
from tensorir.te import AxisKind, Reduce, Tensor, TensorRead, walk


@dataclass(frozen=True, slots=True)
class Split:
    parent: str
    outer: str
    inner: str
    factor: int          # inner extent (from factor=, or derived from nparts=)


@dataclass(frozen=True, slots=True)
class Fuse:
    outer: str
    inner: str
    fused: str


@dataclass(frozen=True, slots=True)
class Attach:
    """Where a stage's loop nest goes: ``root``, ``inline``, or ``at`` a loop of another stage."""
    kind: str                  # "root" | "inline" | "at"
    stage: str | None = None
    loop: str | None = None


ROOT = Attach("root")
INLINE = Attach("inline")


@dataclass
class Loop:
    name: str
    kind: AxisKind
    extent: int   # nominal extent


@dataclass
class Stage:
    """One compute tensor and its loop structure."""
    name: str
    tensor: Tensor
    body: object                      # Expr (a Reduce for reductions), reads via TensorRead
    root: list                        # root loop names: spatial axes then reduce axes
    root_vars: dict                   # root loop name -> Var used in ``body``
    loops: dict = field(default_factory=dict)        # name -> Loop (every loop ever made)
    leaf: list = field(default_factory=list)         # current loop order, outermost first
    relations: list = field(default_factory=list)    # Split / Fuse, in application order
    ann: dict = field(default_factory=dict)          # leaf loop name -> ForKind
    attach: Attach = ROOT
    is_output: bool = False
    origin: str = "compute"           # "compute" | "cache_write" | "pack" | "rfactor"

    @property
    def shape(self) -> tuple:
        return self.tensor.shape

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.body, Reduce)

    @property
    def spatial_root(self) -> list:
        return [n for n in self.root if self.loops[n].kind is AxisKind.SPATIAL]

    def reads(self) -> list:
        return [n for n in walk(self.body) if isinstance(n, TensorRead)]

    def read_tensors(self) -> list:
        seen = {}
        for r in self.reads():
            seen.setdefault(id(r.tensor), r.tensor)
        return list(seen.values())

    def copy(self) -> "Stage":
        return Stage(self.name, self.tensor, self.body, list(self.root), dict(self.root_vars),
                     {k: Loop(v.name, v.kind, v.extent) for k, v in self.loops.items()},
                     list(self.leaf), list(self.relations), dict(self.ann), self.attach,
                     self.is_output, self.origin)

    def annotation(self, loop: str) -> ForKind:
        return self.ann.get(loop, ForKind.SERIAL)


@dataclass
class StageGraph:
    """All stages in a valid execution order, plus the workload's parameter tensors."""
    params: list          # workload tensors in kernel-argument order
    stages: list          # Stage objects, producers before consumers
    names: dict           # id(tensor) -> unique sanitized name

    def copy(self) -> "StageGraph":
        return StageGraph(list(self.params), [s.copy() for s in self.stages], dict(self.names))

    def stage(self, name: str) -> Stage | None:
        for s in self.stages:
            if s.name == name:
                return s
        return None

    def stage_of(self, tensor: Tensor) -> Stage | None:
        for s in self.stages:
            if s.tensor is tensor:
                return s
        return None

    def name_of(self, tensor: Tensor) -> str:
        return self.names[id(tensor)]

    def consumers(self, stage: Stage) -> list:
        return [s for s in self.stages if s.attach is not INLINE and s.attach.kind != "inline"
                and any(t is stage.tensor for t in s.read_tensors())]

    def fresh_name(self, base: str) -> str:
        taken = set(self.names.values())
        name, n = base, 1
        while name in taken:
            name = f"{base}_{n}"
            n += 1
        return name

    @classmethod
    def from_tensors(cls, tensors) -> "StageGraph":
        params = _check_workload(tensors)
        names: dict = {}
        taken: set = set()
        order = _topo_order(params)
        for t in [p for p in params if p.is_placeholder] + order:
            base = re.sub(r"\W", "_", t.name) or "t"
            if base[0].isdigit():
                base = "t" + base
            name, n = base, 1
            while name in taken:
                name = f"{base}_{n}"
                n += 1
            taken.add(name)
            names[id(t)] = name
        outputs = {id(t) for t in params if not t.is_placeholder}
        stages = [make_stage(names[id(t)], t, id(t) in outputs) for t in order]
        return cls(params, stages, names)


def make_stage(name: str, tensor: Tensor, is_output: bool, origin: str = "compute") -> Stage:
    op = tensor.op
    axes = list(op.axes) + list(op.reduce_axes)
    root, root_vars, loops = [], {}, {}
    for ax in axes:
        lname, n = ax.name, 1
        while lname in loops:
            lname = f"{ax.name}_{n}"
            n += 1
        root.append(lname)
        root_vars[lname] = ax.var
        loops[lname] = Loop(lname, ax.kind, ax.extent)
    return Stage(name, tensor, op.body, root, root_vars, loops, list(root), [], {}, ROOT, is_output, origin)


def _check_workload(tensors) -> list:
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    try:
        params = list(tensors)
    except TypeError:
        raise WorkloadListError("Schedule", f"expected a list of tensors (inputs then outputs), got "
                                f"{type(tensors).__name__}") from None
    if not params:
        raise WorkloadListError("Schedule", "the workload's tensor list is empty")
    for i, t in enumerate(params):
        if not isinstance(t, Tensor):
            raise WorkloadListError("Schedule", f"workload entry {i} is {type(t).__name__} {t!r}, expected a "
                                    "te.Tensor (placeholder or compute)")
    ids = [id(t) for t in params]
    if len(set(ids)) != len(ids):
        dup = next(t for t in params if ids.count(id(t)) > 1)
        raise WorkloadListError("Schedule", f"tensor {dup.name!r} appears twice in the workload list")
    if all(t.is_placeholder for t in params):
        raise WorkloadListError("Schedule", "the workload has no output: list the computed tensors after the inputs")
    listed = set(ids)
    for t in _topo_order(params):
        for src in t.inputs:
            if src.is_placeholder and id(src) not in listed:
                raise WorkloadListError("Schedule", f"tensor {t.name!r} reads placeholder {src.name!r}, which is "
                                        "not in the workload list (inputs must be listed, e.g. [A, B, C])")
    return params


def _topo_order(params) -> list:
    """Compute tensors reachable from the listed outputs, producers first (deterministic)."""
    order, seen = [], set()

    def visit(t: Tensor):
        if id(t) in seen or t.is_placeholder:
            return
        seen.add(id(t))
        for src in t.inputs:
            visit(src)
        order.append(t)

    for t in params:
        visit(t)
    return order
