"""``Schedule``: an immutable, replayable trace of primitives on a workload.

>>> s = Schedule([A, B, C])                 # default (naive) loop nest
>>> s = s.split("C.i", factor=32)           # loops are named "stage.loop"
>>> s = s.split("C.j", factor=32).reorder("C.i.0", "C.j.0", "C.i.1", "C.j.1")
>>> print(s.lower())                        # the loop nest as pseudo-code
>>> kernel = s.build()                      # native code, callable on numpy arrays

Every primitive returns a new ``Schedule`` whose trace is the old one plus one
instruction ``[kind, inputs, attrs, outputs]``; replaying the trace on the fresh
workload rebuilds the same loop nest.  Attribute values may refer to *decisions*
(``{"$decision": "tile_i"}``) kept apart from the instructions, so a search can
change the numbers without changing the program (TVM's sampling instructions).
"""
from __future__ import annotations

import json
import numbers
from dataclasses import dataclass

from schedules.errors import DecisionError, RFactorError, ScheduleError, UnknownHandleError
from schedules.state import AttachKind, StageGraph
from tensorir.te import AxisKind

from .arguments import SIGNATURES, check_instruction, show
from .prefetch import apply_prefetch
from .primitives import PRIMITIVES, check_attachments, get_stage
from .skip import apply_skip_padding

TRACE_VERSION = 1
_APPLY = {**PRIMITIVES, "prefetch": apply_prefetch, "skip_padding": apply_skip_padding}


@dataclass(frozen=True)
class Instruction:
    kind: str
    inputs: tuple
    attrs: str = "{}"        # canonical JSON text (hashable, immutable)
    outputs: tuple = ()

    @property
    def attr_dict(self) -> dict:
        return json.loads(self.attrs)

    def to_json(self) -> list:
        return [self.kind, list(self.inputs), self.attr_dict, list(self.outputs)]


def _attrs(d: dict | None) -> str:
    return json.dumps(d or {}, sort_keys=True)


def _plain(value):
    """For ``json.dumps``: integral numbers of other types (numpy's) as ints; nothing else."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"{show(value)} is not JSON data")


def _resolve(value, decisions: dict, kind: str):
    """Replace ``{"$decision": name}`` references by the decision's value."""
    if isinstance(value, dict):
        if set(value) == {"$decision"}:
            name = value["$decision"]
            if not isinstance(name, str) or name not in decisions:
                raise DecisionError(kind, f"the trace refers to decision {name!r}, which has no value "
                                    f"(decisions: {sorted(decisions)})")
            return decisions[name]
        return {k: _resolve(v, decisions, kind) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, decisions, kind) for v in value]
    return value


class Schedule:
    """A workload plus a trace of schedule primitives (immutable)."""

    def __init__(self, tensors, trace: tuple = (), decisions: dict | None = None, *, _state=None):
        try:
            self.tensors = tuple(tensors) if not hasattr(tensors, "op") else (tensors,)
        except TypeError:
            self.tensors = tensors      # not a list: StageGraph.from_tensors says so
        try:
            self.trace = tuple(trace)
        except TypeError:
            raise ScheduleError("replay", f"a trace is a sequence of Instructions, got {show(trace)}") from None
        if decisions is not None and not isinstance(decisions, dict):
            raise DecisionError("replay", f"decisions must be a dict of decision name -> value, got {show(decisions)}")
        self.decisions = dict(decisions or {})
        if _state is None:
            _state = StageGraph.from_tensors(self.tensors)
            for n, inst in enumerate(self.trace):
                if not isinstance(inst, Instruction):
                    raise ScheduleError("replay", f"trace entry {n} is {show(inst)}; expected an Instruction "
                                        "(Schedule.from_json replays JSON traces)")
                try:
                    _state = self._apply(_state, inst)[0]
                except ScheduleError as err:
                    err.args = (f"{err.args[0]} (instruction {n} of the trace)",)
                    raise
        self._state = _state    # never mutated: primitives apply to a copy

    # ------------------------------------------------------------- core
    def _apply(self, state: StageGraph, inst: Instruction):
        """Check ``inst`` (decisions resolved) and apply it to a copy of ``state``.

        Returns (new state, the names it made as the trace records them, checked inputs, checked
        attributes).  Every instruction passes here, from a Python call or a replayed trace.
        """
        try:
            attrs = inst.attr_dict
        except (TypeError, ValueError):
            raise ScheduleError("replay", f"the attributes of {show(inst.kind)} are not JSON text: "
                                f"{show(inst.attrs)}") from None
        attrs = _resolve(attrs, self.decisions, inst.kind)
        inputs, attrs, outputs = check_instruction(inst.kind, inst.inputs, attrs, inst.outputs)
        new = state.copy()
        try:
            made = _APPLY[inst.kind](new, inputs, attrs, outputs)
            check_attachments(new, state, inst.kind, inputs)   # the one check of compute_at's invariants
        except ScheduleError as err:
            err.nest = describe(state, err.stage, err.loop)
            raise
        if inst.kind in ("split", "fuse"):  # loops are recorded as "stage.loop" handles
            made = [f"{inputs[0].split('.', 1)[0]}.{m}" for m in made]
        return new, made, inputs, attrs

    def _do(self, kind: str, inputs, attrs: dict | None = None, outputs=()):
        inputs = [self._name(x, kind) for x in inputs]
        inputs, attrs, _ = check_instruction(kind, inputs, _resolve(attrs or {}, self.decisions, kind), outputs)
        inst = Instruction(kind, tuple(inputs), _attrs(attrs), tuple(outputs))
        state, made, _, _ = self._apply(self._state, inst)
        inst = Instruction(kind, inst.inputs, inst.attrs, tuple(made))
        return Schedule(self.tensors, self.trace + (inst,), self.decisions, _state=state)

    def _name(self, x, prim: str):
        """A tensor given for a stage or tensor name: its name in this schedule."""
        if hasattr(x, "op") and hasattr(x, "name"):
            name = self._state.names.get(id(x))
            if name is None:
                raise UnknownHandleError(prim, f"tensor {x.name!r} is not part of this workload; tensors: "
                                         f"{sorted(self._state.names.values())}")
            return name
        return x

    @staticmethod
    def _loop_outputs(loop, names) -> list:
        """User-chosen names of new loops of ``loop``'s stage as "stage.loop" handles (others: unchanged,
        for the check to refuse)."""
        if not isinstance(names, (list, tuple)):
            return names
        stage = loop.split(".", 1)[0] if isinstance(loop, str) else ""
        return [f"{stage}.{n}" if isinstance(n, str) else n for n in names]

    # ------------------------------------------------------- inspection
    @property
    def stages(self) -> list:
        """Names of the stages that have loops (inlined stages excluded)."""
        return [s.name for s in self._state.stages if s.attach.kind is not AttachKind.INLINE]

    def loops(self, stage) -> list:
        """Current loops of ``stage``, outermost first, as ``"stage.loop"`` handles."""
        st = get_stage(self._state, self._name(stage, "loops"), "loops")
        return [f"{st.name}.{n}" for n in st.leaf]

    def axes(self, stage) -> list:
        """Root spatial axes of ``stage`` as loop handles (original loop names)."""
        st = get_stage(self._state, self._name(stage, "axes"), "axes")
        return [f"{st.name}.{n}" for n in st.spatial_root]

    def reduce_axes(self, stage) -> list:
        st = get_stage(self._state, self._name(stage, "reduce_axes"), "reduce_axes")
        return [f"{st.name}.{n}" for n in st.root if st.loops[n].kind is AxisKind.REDUCE]

    def extent(self, loop: str) -> int:
        """Nominal extent of a loop (for a stage computed at another, the region may be smaller)."""
        from .primitives import get_loop
        st, name = get_loop(self._state, loop, "extent")
        return st.loops[name].extent

    def describe(self) -> str:
        return describe(self._state)

    def stage_graph(self) -> StageGraph:
        """A copy of the stage state this schedule's trace produced (editing it changes nothing)."""
        return self._state.copy()

    # -------------------------------------------------------- primitives
    def split(self, loop: str, factor: int | None = None, nparts: int | None = None,
              names: tuple | None = None) -> "Schedule":
        """Split ``loop`` into an outer and an inner loop (inner extent ``factor``, or ``nparts`` outer).

        Before::

            for C.i in range(100):
              C[C.i] = ...

        ``names=(outer, inner)`` names the new loops (default ``"i.0"``, ``"i.1"``); a factor may be any
        integral number (numpy's too), and one past the extent makes a single outer iteration.

        After ``split("C.i", factor=32)`` (100 is not a multiple of 32: the tail is guarded, and
        full tiles get a guard-free copy when the guard would sit in an unrolled/vectorized loop)::

            for C.i.0 in range(4):
              for C.i.1 in range(32):
                if C.i.0 * 32 + C.i.1 < 100:
                  C[C.i.0 * 32 + C.i.1] = ...
        """
        outputs = () if names is None else self._loop_outputs(loop, names)
        return self._do("split", [loop], {"factor": factor, "nparts": nparts}, outputs)

    def fuse(self, outer: str, inner: str, name: str | None = None) -> "Schedule":
        """Fuse two adjacent loops (``inner`` directly inside ``outer``, same kind) into one.

        Before::

            for C.i in range(4):
              for C.j in range(6):
                C[C.i, C.j] = ...

        After ``fuse("C.i", "C.j")``::

            for C.i_j_fused in range(24):
              C[C.i_j_fused // 6, C.i_j_fused % 6] = ...

        The fused loop is named after the root loops it runs over (``fuse("C.i.0", "C.j.0")`` gives
        ``C.i_j_fused`` too; ``_1``, ``_2``... are appended when that name is taken), or ``name``.
        """
        return self._do("fuse", [outer, inner], None, () if name is None else self._loop_outputs(outer, [name]))

    def reorder(self, *loops: str) -> "Schedule":
        """Put the given loops (of one stage) in this order, in the slots they occupy.

        Before::

            for C.i: for C.j: for C.k: ...

        After ``reorder("C.k", "C.j")`` (the listed loops swap slots; ``C.i`` stays)::

            for C.i: for C.k: for C.j: ...
        """
        if len(loops) == 1 and isinstance(loops[0], (list, tuple)):
            loops = tuple(loops[0])
        return self._do("reorder", loops)

    def unroll(self, loop: str) -> "Schedule":
        """Fully unroll ``loop`` in the generated code (the printed nest marks it)::

            for C_local.i in range(4):  # unrolled
              C_local[C_local.i, ...] = ...      -> emitted 4 times with C_local.i = 0, 1, 2, 3
        """
        return self._do("unroll", [loop])

    def vectorize(self, loop: str) -> "Schedule":
        """Turn the innermost, spatial ``loop`` into SIMD instructions, one lane per iteration.

        After ``vectorize("C.j.1")``::

            for C.j.1 in range(16):  # vectorized
              C[C.i, C.j.0 * 16 + C.j.1] = ...   -> one 16-lane load/FMA/store per statement

        Contiguous accesses become vector loads, lane-invariant ones broadcasts, others gathers;
        a guard that depends on the lane becomes a mask.
        """
        return self._do("vectorize", [loop])

    def parallel(self, loop: str) -> "Schedule":
        """Run the iterations of spatial ``loop`` on all cores (OpenMP, static chunks)::

            for C.i.0 in range(64):  # parallel
              ...                    -> iterations split into one contiguous chunk per thread
        """
        return self._do("parallel", [loop])

    def compute_at(self, stage, loop: str) -> "Schedule":
        """Compute ``stage`` inside ``loop`` of a consumer, only the region that loop needs.

        Before (``pad`` computed whole, then ``conv``)::

            for pad.h in range(12): ...
            for conv.h in range(10): ... pad[conv.h + conv.rr, ...]

        After ``split("conv.h", factor=4).compute_at("pad", "conv.h.0")`` (bound inference
        gives the 6 rows of ``pad`` that 4 output rows read; ``pad`` shrinks to a local buffer)::

            for conv.h.0 in range(3):
              pad = alloc_local([1, 4, 6, 12], float32)
              for pad.h in range(6): ... pad[...] = X[..., conv.h.0 * 4 + pad.h - 1, ...]
              for conv.h.1 in range(4): ... pad[..., conv.h.1 + conv.rr, ...]
        """
        return self._do("compute_at", [stage, loop])

    def compute_root(self, stage) -> "Schedule":
        """Undo ``compute_at``: compute the whole stage (a full buffer) before its consumers."""
        return self._do("compute_root", [stage])

    def compute_inline(self, stage) -> "Schedule":
        """Substitute an elementwise stage's expression into its consumers (no buffer).

        Before::

            for y.i: y[y.i] = x[y.i] * 2.0
            for z.i: z[z.i] = exp(y[z.i])

        After ``compute_inline("y")``::

            for z.i: z[z.i] = exp(x[z.i] * 2.0)
        """
        return self._do("compute_inline", [stage])

    def cache_write(self, stage, name: str | None = None) -> "Schedule":
        """Compute ``stage`` into a new stage ``<stage>_local`` and copy it out.

        Computing ``<stage>_local`` at a tile loop of ``stage`` keeps the
        accumulators of that tile in registers (the register-tile trick).  After
        ``cache_write("C")``, ``tile(...)`` and ``compute_at("C_local", "C.j.0")``::

            for C.i.0: for C.j.0:
              C_local = alloc_local([4, 16], float32)
              C_local[...] = 0.0f ; for k: C_local[i, j] = C_local[i, j] + A[...] * B[...]
              for C.i.1: for C.j.1: C[...] = C_local[C.i.1, C.j.1]
        """
        return self._do("cache_write", [stage], None, () if name is None else [name])

    def pack(self, tensor, splits: dict, order: list | None = None, consumers: list | None = None,
             name: str | None = None, strides: dict | None = None) -> "Schedule":
        """Copy ``tensor`` into a blocked layout and make its readers use the copy.

        ``splits`` maps a dimension to a block size; ``order`` lists the new
        dimensions by key (``"0"``, ``"1.o"``, ``"1.i"``).  Matmul's packed B:
        ``pack("B", {1: 16}, order=["1.o", "0", "1.i"])`` gives ``B_pack[j//16, k, j%16]``.
        ``strides`` maps a dimension to a step: the copy holds every step-th element of it
        only (its readers must read only those), as a strided 1x1 convolution reads its data:
        ``pack("X", {1: 16}, strides={2: 2, 3: 2})`` gives ``X_pack[n, c//16, h//2, w//2, c%16]``.
        """
        attrs = {"splits": splits, "order": order, "consumers": consumers, "strides": strides}
        if isinstance(consumers, (list, tuple)):
            attrs["consumers"] = [self._name(c, "pack") for c in consumers]
        return self._do("pack", [tensor], attrs, () if name is None else [name])

    def rfactor(self, stage, factor: int, axis: str | None = None, name: str | None = None) -> "Schedule":
        """Factor a reduction into ``factor`` interleaved partial results, a new spatial axis (TVM's rfactor).

        The reduce loop ``axis`` (default: the innermost one) becomes ``k_o * factor + k_v``;
        a new stage ``<stage>_rf`` computes the partial reductions with ``k_v`` spatial, so
        it can be vectorized, and ``stage`` sums them.  ``rfactor("y", 8)`` on a row sum::

            for y.i: for y.k: y[i] += A[i, k]
        becomes
            for y_rf.i: for y_rf.k_v: for y_rf.k_o: y_rf[i, k_v] += A[i, k_o * 8 + k_v]
            for y.i: for y.k_v: y[i] += y_rf[i, k_v]
        """
        sname = self._name(stage, "rfactor")
        if isinstance(axis, str) and "." in axis and isinstance(sname, str):   # "y.k" -> "k"
            owner, _, axis = axis.partition(".")
            if owner != sname:
                raise RFactorError("rfactor", f"loop {owner}.{axis} belongs to stage {owner}, not {sname}")
        return self._do("rfactor", [sname], {"factor": factor, "axis": axis}, () if name is None else [name])

    def prefetch(self, tensor, loop: str, offset: int | None = None, offset_bytes: int | None = None,
                 first=None) -> "Schedule":
        """Prefetch ``tensor`` in every iteration of ``loop``: the cache lines the iteration ``offset``
        later reads, or (``offset_bytes``) those ``offset_bytes`` bytes past what it reads now; give one.
        ``first``: loops around ``loop`` (handles); the prefetch runs only while each is at its first
        iteration (the passes after the first over a block already in cache issue none).

        Before::

            for D.k.1 in range(128):
              for D.i.1 in range(4):  # unrolled
                for D.j.1 in range(32):  # vectorized
                  D[...] = D[...] + X[...] * W_pack[p, D.k.0 * 128 + D.k.1, D.j.1]

        After ``prefetch("W_pack", "D.k.1", offset_bytes=1024)`` (a 32-float row: 2 lines)::

            for D.k.1 in range(128):
              prefetch(W_pack[p, D.k.0 * 128 + D.k.1, 0] + 1024 bytes)
              prefetch(W_pack[p, D.k.0 * 128 + D.k.1, 0] + 1088 bytes)
              for D.i.1 in range(4):  # unrolled
                ...

        One prefetch per cache line the iteration reads (not per load); the addresses may run
        past the buffer (a prefetch never faults).  Apply it after the loop's stage is split and
        fused into its final loops (``loop`` must not be vectorized).
        """
        name = self._state.names.get(id(tensor), tensor.name) if hasattr(tensor, "op") else tensor
        return self._do("prefetch", [loop], {"tensor": name, "offset": offset, "offset_bytes": offset_bytes,
                                             "first": first or None})

    def skip_padding(self, tensor, loop: str) -> "Schedule":
        """Skip the iterations of reduce loop ``loop`` whose reads of ``tensor`` (a stage computed as
        ``select(box, x, 0)``: a padding, or a pack it was inlined into) all read padding
        (:mod:`schedules.skip`).  A 3x3 dilated by 6 over 9x9, its loops ``n, k, p, r, q, s, c``, after
        ``skip_padding("Xpad", "Y.r")`` and ``skip_padding("Xpad", "Y.s")``::

            for Y.r in range(3):
              if Y.p + Y.r * 6 >= 6 and Y.p + Y.r * 6 < 15:  # skip
                for Y.q in range(9):
                  for Y.s in range(3):
                    if Y.q + Y.s * 6 >= 6 and Y.q + Y.s * 6 < 15:  # skip
                      for Y.c in range(3):
                        Y[0, Y.k, Y.p, Y.q] = Y[...] + Xpad[0, Y.c, Y.p + Y.r * 6, Y.q + Y.s * 6] * Wt[...]

        A condition on the loops inside ``loop`` is bounded over them: a tile loop of 11 columns skips a
        tap only where all 11 columns read padding.
        """
        name = self._state.names.get(id(tensor), tensor.name) if hasattr(tensor, "op") else tensor
        return self._do("skip_padding", [loop], {"tensor": name})

    def tile(self, loops: list, factors: list) -> "Schedule":
        """Split each loop by its factor and put all outer loops before all inner loops."""
        listed = [_as_list(loops), _as_list(factors)]
        if None in listed or not listed[0]:
            raise ScheduleError("tile", f"expected a non-empty list of loops and a list of factors, got "
                                f"{show(loops)} and {show(factors)}")
        loops, factors = listed
        if len(loops) != len(factors):
            raise ScheduleError("tile", f"got {len(loops)} loops but {len(factors)} factors")
        for lp in loops:
            if loops.count(lp) > 1:
                raise ScheduleError("tile", f"loop {show(lp)} is listed twice; expected distinct loops")
        s, outers, inners = self, [], []
        for lp, f in zip(loops, factors):
            s = s.split(lp, factor=f)
            o, i = s.trace[-1].outputs
            outers.append(o)
            inners.append(i)
        return s.reorder(*outers, *inners)

    # ------------------------------------------------------------ output
    def lower(self, name: str | None = None, target=None, *, until: str | None = None, print_after=None):
        """The loop nest code generation compiles for ``target`` (default: the host).

        Runs the lowering passes (``schedules.lowering.PASSES``; ``until`` stops after
        one); ``print_after`` (True or pass names) prints the IR after those passes.
        """
        from schedules.lowering import lower
        try:
            return lower(self._state, target, name, until=until, print_after=print_after)
        except ScheduleError as err:
            err.nest = describe(self._state, err.stage, err.loop)
            raise

    def lower_steps(self, name: str | None = None, target=None) -> list:
        """``[(pass name, PrimFunc after it)]`` for every lowering pass, in order."""
        from schedules.lowering import lower_steps
        try:
            return lower_steps(self._state, target, name)
        except ScheduleError as err:
            err.nest = describe(self._state, err.stage, err.loop)
            raise

    def build(self, name: str | None = None, target=None, checked: bool = False, memory=None):
        """Lower for ``target`` (default: the host) and compile (:func:`tensorir.runtime.build`:
        ``checked=True`` checks every access against its buffer's bounds; ``memory`` is a
        ``MemoryLimits``)."""
        from tensorir.runtime import build
        return build(self.lower(name, target), target=target, checked=checked, memory=memory)

    def to_json(self) -> dict:
        return {"version": TRACE_VERSION, "instructions": [i.to_json() for i in self.trace],
                "decisions": dict(self.decisions)}

    @classmethod
    def from_json(cls, tensors, obj) -> "Schedule":
        """Replay a trace (dict or JSON text) onto a fresh workload."""
        if isinstance(obj, str):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as err:
                raise ScheduleError("replay", f"trace is not valid JSON: {err}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("instructions"), list):
            raise ScheduleError("replay", "a trace is a JSON object with an 'instructions' list")
        if obj.get("version", TRACE_VERSION) != TRACE_VERSION:
            raise ScheduleError("replay", f"trace version {obj.get('version')} is not supported "
                                f"(this tensortune writes version {TRACE_VERSION})")
        trace = []
        for n, item in enumerate(obj["instructions"]):
            if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                    and isinstance(item[1], list) and isinstance(item[2], dict) and isinstance(item[3], list)):
                raise ScheduleError("replay", f"instruction {n} is malformed: {show(item)}; expected "
                                    "[kind, inputs, attrs, outputs]")
            kind, inputs, attrs, outputs = item
            try:
                text = json.dumps(attrs, sort_keys=True, default=_plain)
            except (TypeError, ValueError) as err:
                raise ScheduleError("replay", f"instruction {n} ({kind}): attributes must be JSON data; {err}") from None
            trace.append(Instruction(kind, tuple(inputs), text, tuple(outputs)))
        decisions = obj.get("decisions")
        if decisions is not None and not (isinstance(decisions, dict) and all(isinstance(k, str) for k in decisions)):
            raise DecisionError("replay", f"decisions must be a JSON object of name -> value, got {show(decisions)}")
        return cls(tensors, tuple(trace), decisions or {})

    def to_python(self) -> str:
        """The trace as Python code that rebuilds this schedule: every argument of every primitive.

        A name chosen for what a primitive made (``names=`` of split, ``name=`` of the others) is
        printed where it is not the name the primitive would choose itself (a trace written by an
        earlier version, whose default names differ, prints them too).
        """
        lines = ["s = Schedule(tensors)"]
        state = StageGraph.from_tensors(self.tensors)
        for inst in self.trace:
            new, made, inputs, attrs = self._apply(state, inst)
            names = None
            if SIGNATURES[inst.kind][2][0]:          # a primitive that names what it makes
                try:
                    default = self._apply(state, Instruction(inst.kind, inst.inputs, inst.attrs))[1]
                except ScheduleError:
                    default = None
                if default != made:
                    names = [m.split(".", 1)[1] for m in made] if inst.kind in ("split", "fuse") else made
            lines.append(f"s = s.{inst.kind}({', '.join(_python_args(inst.kind, inputs, attrs, names))})")
            state = new
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_python()

    def __repr__(self) -> str:
        return f"<Schedule {len(self.trace)} instruction(s) on {[t.name for t in self.tensors]}>"


def _as_list(x):
    """``x`` as a list if it is a sequence of items (list, tuple, numpy array), else None."""
    if isinstance(x, (str, bytes, dict)) or not hasattr(x, "__iter__"):
        return None
    return list(x)


def _python_args(kind: str, inputs: list, attrs: dict, names) -> list:
    """The arguments of the ``Schedule`` method call that records ``[kind, inputs, attrs, names]``."""
    args = [repr(x) for x in inputs]
    if kind == "split":
        args += [f"{k}={attrs[k]!r}" for k in ("factor", "nparts") if k in attrs]
    elif kind == "pack":
        args.append(repr({int(k): v for k, v in attrs["splits"].items()}))
        args += [f"{k}={attrs[k]!r}" for k in ("order", "consumers") if k in attrs]
        if "strides" in attrs:
            args.append(f"strides={ {int(k): v for k, v in attrs['strides'].items()}!r}")
    elif kind == "rfactor":
        args += [f"{k}={attrs[k]!r}" for k in ("factor", "axis") if k in attrs]
    elif kind == "prefetch":
        args = [repr(attrs["tensor"]), *args] + [f"{k}={attrs[k]!r}" for k in ("offset", "offset_bytes", "first")
                                                 if k in attrs]
    elif kind == "skip_padding":
        args = [repr(attrs["tensor"]), *args]
    if names is not None:
        args.append(f"names={tuple(names)!r}" if kind == "split" else f"name={names[0]!r}")
    return args


def describe(state: StageGraph, stage: str | None = None, loop: str | None = None) -> str:
    """Loop structure of every stage; ``stage.loop`` (or the whole stage) is marked."""
    lines = []
    for st in state.stages:
        if st.attach.kind is AttachKind.INLINE:
            lines.append(f"stage {st.name}: inlined")
            continue
        where = "root" if st.attach.kind is AttachKind.ROOT else f"at {st.attach.stage}.{st.attach.loop}"
        mark = "   <-- here" if stage == st.name and loop is None else ""
        kind = "reduction" if st.is_reduction else "elementwise"
        lines.append(f"stage {st.name} ({kind}{', output' if st.is_output else ''}), computed {where}:{mark}")
        for depth, name in enumerate(st.leaf):
            lp = st.loops[name]
            ann = st.ann.get(name)
            tag = f" {ann.value}" if ann else ""
            tag += " (reduce)" if lp.kind is AxisKind.REDUCE else ""
            tag += "".join(f" (prefetch {p.tensor})" for p in st.prefetches if p.loop == name)
            tag += "".join(f" (skips {k.tensor}'s padding)" for k in st.skips if k.loop == name)
            here = "   <-- here" if stage == st.name and loop == name else ""
            lines.append(f"{'  ' * (depth + 1)}for {st.name}.{name} in range({lp.extent}){tag}{here}")
    return "\n".join(lines)
