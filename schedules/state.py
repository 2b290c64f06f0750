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

import enum
import re
from dataclasses import dataclass, field

from schedules.errors import WorkloadListError
from tensorir.tir.ir import ForKind
from tensorir.te import AxisKind, Reduce, Tensor, TensorRead, walk
from tensorir.te.workload import WorkloadError, check_workload, computed_tensors


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


class AttachKind(enum.Enum):
    ROOT = "root"          # its own loop nest at the top level
    INLINE = "inline"      # substituted into its consumers (compute_inline)
    AT = "at"              # inside a loop of another stage (compute_at)


class StageOrigin(enum.Enum):
    """Which primitive made a stage (workload stages are COMPUTE)."""
    COMPUTE = "compute"
    CACHE_WRITE = "cache_write"
    PACK = "pack"
    RFACTOR = "rfactor"


@dataclass(frozen=True, slots=True)
class Attach:
    """Where a stage's loop nest goes: at root, inline, or at loop ``loop`` of stage ``stage``."""
    kind: AttachKind
    stage: str | None = None
    loop: str | None = None

    @classmethod
    def at(cls, stage: str, loop: str) -> "Attach":
        return cls(AttachKind.AT, stage, loop)


ROOT = Attach(AttachKind.ROOT)
INLINE = Attach(AttachKind.INLINE)


class ProblemKind(enum.Enum):
    DANGLING = "dangling"      # attached at a stage or loop that no longer exists
    CYCLE = "cycle"            # attached, through other stages, inside itself
    OUTSIDE = "outside"        # a consumer is not inside the loop it is attached at
    VECTORIZED = "vectorized"  # attached inside a vectorized loop


@dataclass(frozen=True, slots=True)
class AttachProblem:
    """A broken invariant of ``compute_at`` that lowering relies on (see ``StageGraph.attach_problem``)."""
    kind: ProblemKind
    stage: str                 # the attached stage whose placement is broken
    host: str | None           # the stage and loop it is attached at
    loop: str | None
    consumers: tuple = ()      # "outside": its consumers that are not inside host.loop


@dataclass(frozen=True, slots=True)
class PrefetchSpec:
    """``prefetch``: in every iteration of leaf loop ``loop``, prefetch the lines of ``tensor`` (a
    name) the loop reads ``offset`` iterations later, or ``offset_bytes`` bytes past what it reads now;
    with ``first`` (names of leaf loops around ``loop``), only while each of them is at its first iteration."""
    tensor: str
    loop: str
    offset: int | None = None
    offset_bytes: int | None = None
    first: tuple = ()


@dataclass(frozen=True)
class SkipSpec:
    """``skip_padding``: iterations of reduce loop ``loop`` whose reads of ``tensor`` (a zero padding) are
    all padding are skipped (:mod:`schedules.skip`)."""
    tensor: str
    loop: str


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
    origin: StageOrigin = StageOrigin.COMPUTE
    read_cache: tuple | None = field(default=None, repr=False, compare=False)   # (body, its read tensors)
    prefetches: list = field(default_factory=list)   # PrefetchSpec, in the order given
    skips: list = field(default_factory=list)        # SkipSpec, in the order given

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
        """The distinct tensor reads of the body, in order (a transform's branches repeat the same reads
        hundreds of times; bounds inference and the rules need each once)."""
        return list(dict.fromkeys(n for n in walk(self.body) if isinstance(n, TensorRead)))

    def read_tensors(self) -> list:
        if self.read_cache is None or self.read_cache[0] is not self.body:   # bodies are immutable
            seen = {}
            for r in self.reads():
                seen.setdefault(id(r.tensor), r.tensor)
            self.read_cache = (self.body, tuple(seen.values()))
        return list(self.read_cache[1])

    def copy(self) -> "Stage":
        return Stage(self.name, self.tensor, self.body, list(self.root), dict(self.root_vars),
                     {k: Loop(v.name, v.kind, v.extent) for k, v in self.loops.items()},
                     list(self.leaf), list(self.relations), dict(self.ann), self.attach,
                     self.is_output, self.origin, self.read_cache, list(self.prefetches), list(self.skips))

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
        return [s for s in self.stages if s.attach is not INLINE and s.attach.kind is not AttachKind.INLINE
                and any(t is stage.tensor for t in s.read_tensors())]

    def inside(self, y: Stage, x: Stage, loop: str) -> bool:
        """Is stage ``y`` computed within loop ``x.loop`` (``y`` is ``x``, or attached there or deeper,
        directly or through the stages hosting it)?"""
        pos = x.leaf.index(loop)
        cur, seen = y, set()
        while cur is not None and cur.name not in seen:
            seen.add(cur.name)
            if cur.name == x.name:
                return True
            if cur.attach.kind is not AttachKind.AT:
                return False
            if cur.attach.stage == x.name:
                return cur.attach.loop in x.leaf and x.leaf.index(cur.attach.loop) >= pos
            cur = self.stage(cur.attach.stage)
        return False

    def attach_problem(self) -> AttachProblem | None:
        """The first broken attach invariant, or None.  What lowering needs of every stage ``P``
        computed at loop ``L`` of stage ``T`` (``compute_at``), in the order checked:

        - ``dangling``: ``T`` is a stage with loops (not inlined) and ``L`` one of its current loops;
        - ``cycle``: ``P`` is not (through the stages hosting ``T``) computed inside itself;
        - ``outside``: every consumer of ``P`` is computed inside ``L`` (bound inference gives ``P``
          the region the consumers read in one iteration of ``L``; one outside would read a buffer
          that is not there);
        - ``vectorized``: ``L`` is not vectorized (a vectorized loop holds its own statement only).

        Schedule checks it after every primitive, so that the primitive that breaks one is refused.
        """
        attached = [s for s in self.stages if s.attach.kind is AttachKind.AT]
        if not attached:
            return None
        for p in attached:
            t = self.stage(p.attach.stage)
            if t is None or t.attach.kind is AttachKind.INLINE or p.attach.loop not in t.leaf:
                return AttachProblem(ProblemKind.DANGLING, p.name, p.attach.stage, p.attach.loop)
        for p in attached:
            cur, seen = p, []
            while cur.attach.kind is AttachKind.AT and cur.name not in seen:
                seen.append(cur.name)
                cur = self.stage(cur.attach.stage)
                if cur is p:
                    return AttachProblem(ProblemKind.CYCLE, p.name, p.attach.stage, p.attach.loop, tuple(seen[1:]))
        for p in attached:
            t = self.stage(p.attach.stage)
            outside = tuple(c.name for c in self.consumers(p) if not self.inside(c, t, p.attach.loop))
            if outside:
                return AttachProblem(ProblemKind.OUTSIDE, p.name, t.name, p.attach.loop, outside)
        for p in attached:
            t = self.stage(p.attach.stage)
            if t.annotation(p.attach.loop) is ForKind.VECTORIZED:
                return AttachProblem(ProblemKind.VECTORIZED, p.name, t.name, p.attach.loop)
        return None

    def fresh_name(self, base: str) -> str:
        taken = set(self.names.values())
        name, n = base, 1
        while name in taken:
            name = f"{base}_{n}"
            n += 1
        return name

    @classmethod
    def from_tensors(cls, tensors) -> "StageGraph":
        try:
            params = check_workload(tensors)
        except WorkloadError as err:
            raise WorkloadListError("Schedule", str(err)) from None
        names: dict = {}
        taken: set = set()
        order = computed_tensors(params)
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


def make_stage(name: str, tensor: Tensor, is_output: bool, origin: StageOrigin = StageOrigin.COMPUTE) -> Stage:
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
