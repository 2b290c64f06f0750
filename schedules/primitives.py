"""Schedule primitives as functions on a (copied) stage graph.

Each ``apply_<kind>(graph, inputs, attrs, outputs)`` checks legality, edits
``graph`` in place and returns the names it created.  ``Schedule`` copies the
graph first, so a schedule never changes once made.  ``outputs`` (names recorded
in a trace, or chosen by the user) are honoured on replay, so a replayed trace
rebuilds the same loops.  Before a primitive runs, ``check_instruction`` has
checked the types of its arguments (the same check for Python calls and traces).
"""
from __future__ import annotations

import numbers
import operator
import re

from schedules.errors import (AnnotationError, CacheWriteError, ComputeAtError, ComputeInlineError,
                             FuseError, PackError, ReorderError, RFactorError, ScheduleError, SplitError,
                             UnknownHandleError)
from tensorir.te.expr import Binary, BinOp, const, select
from tensorir.tir.ir import ForKind
from tensorir.tir.rewrite import rewrite, substitute
from schedules.state import INLINE, ROOT, Attach, Fuse, Loop, Split, Stage, StageGraph, make_stage
from tensorir.te import AxisKind, ComputeOp, IterVar, Reduce, Tensor, TensorRead, Var

ANNOTATIONS = {"unroll": ForKind.UNROLLED, "vectorize": ForKind.VECTORIZED, "parallel": ForKind.PARALLEL}


# ---------------------------------------------------------------- resolving

def get_stage(g: StageGraph, name, prim: str) -> Stage:
    if isinstance(name, Tensor):
        name = g.names.get(id(name), name.name)
    st = g.stage(name) if isinstance(name, str) else None
    if st is None:
        inputs = [g.name_of(t) for t in g.params if t.is_placeholder]
        if name in inputs:
            raise UnknownHandleError(prim, f"{name} is an input placeholder, not a computed stage", stage=name)
        raise UnknownHandleError(prim, f"no stage named {name!r}; stages: {[s.name for s in g.stages]}")
    if st.attach is INLINE:
        raise UnknownHandleError(prim, f"stage {name} was inlined (compute_inline) and has no loops", stage=name)
    return st


def get_loop(g: StageGraph, handle, prim: str) -> tuple:
    """Resolve ``"Stage.loop"`` to (stage, loop name); the loop must be a current leaf."""
    if not isinstance(handle, str) or "." not in handle:
        raise UnknownHandleError(prim, f"expected a loop handle like 'C.i' (stage.loop), got {handle!r}")
    sname, lname = handle.split(".", 1)
    st = get_stage(g, sname, prim)
    if lname not in st.leaf:
        why = "was split or fused away" if lname in st.loops else "does not exist"
        raise UnknownHandleError(prim, f"loop {handle} {why}; current loops of {st.name}: "
                                 f"{[f'{st.name}.{n}' for n in st.leaf]}", stage=st.name, loop=lname)
    return st, lname


# ------------------------------------------------------- argument checking
#
# One path for every argument of every primitive: a Python call (``Schedule.split`` ...) and a
# replayed trace (``Schedule.from_json``, user input like any other) both reach the primitive
# through ``check_instruction``, which checks the arity, the types and the plain values of the
# inputs, attributes and output names, and turns integral numbers (numpy's included) into
# ints.  What depends on the schedule (does the loop exist, is the name free, does the factor
# fit the extent) is checked by the primitive itself, the same way for both callers.

ERRORS = {"split": SplitError, "fuse": FuseError, "reorder": ReorderError, "unroll": AnnotationError,
          "vectorize": AnnotationError, "parallel": AnnotationError, "compute_at": ComputeAtError,
          "compute_root": ComputeAtError, "compute_inline": ComputeInlineError,
          "cache_write": CacheWriteError, "pack": PackError, "rfactor": RFactorError}

# (inputs, attributes, output names): inputs are "loop" handles ('C.i'), "stage" or "tensor"
# names, "loops" one or more loop handles; outputs is how many names the primitive makes
# (0: none) and what they name.
SIGNATURES = {
    "split": (("loop",), ("factor", "nparts"), (2, "loop")),
    "fuse": (("loop", "loop"), (), (1, "loop")),
    "reorder": (("loops",), (), (0, None)),
    "unroll": (("loop",), (), (0, None)),
    "vectorize": (("loop",), (), (0, None)),
    "parallel": (("loop",), (), (0, None)),
    "compute_at": (("stage", "loop"), (), (0, None)),
    "compute_root": (("stage",), (), (0, None)),
    "compute_inline": (("stage",), (), (0, None)),
    "cache_write": (("stage",), (), (1, "stage")),
    "pack": (("tensor",), ("splits", "order", "consumers"), (1, "stage")),
    "rfactor": (("stage",), ("factor", "axis"), (1, "stage")),
}

_WHAT = {"loop": "a loop handle like 'C.i'", "stage": "a stage name", "tensor": "a tensor name",
         "loops": "one or more loop handles like 'C.i'"}
_LOOP_NAME = re.compile(r"\w+(\.\w+)*")     # 'i_o', 'i.0', 'i_j_fused'
_STAGE_NAME = re.compile(r"(?!\d)\w+")   # no '.': handles are 'stage.loop'


def show(value, limit: int = 60) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (for error messages)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def as_int(value, prim: str, what: str, minimum: int | None = 1) -> int:
    """``value`` as a plain int: any integral number (numpy's too), not bool, not a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        kind = "a positive integer" if minimum == 1 else "an integer"
        raise ERRORS.get(prim, ScheduleError)(prim, f"{what} must be {kind}, got {show(value)}")
    value = int(operator.index(value))
    if minimum is not None and value < minimum:
        raise ERRORS.get(prim, ScheduleError)(prim, f"{what} must be a positive integer, got {value}")
    return value


def _seq(value) -> bool:
    return isinstance(value, (list, tuple))


def check_instruction(kind, inputs, attrs, outputs) -> tuple:
    """Check one instruction's arguments; returns (inputs, attrs, outputs) as plain JSON values.

    ``outputs`` are the names the instruction is to give what it makes (``"stage.loop"``
    handles for split and fuse, stage names for the others; empty: the primitive's defaults).
    """
    if not isinstance(kind, str) or kind not in SIGNATURES:
        raise ScheduleError("replay", f"unknown instruction {show(kind)}; known: {sorted(SIGNATURES)}")
    exc = ERRORS[kind]
    want_in, known_attrs, (n_out, out_kind) = SIGNATURES[kind]
    # inputs
    if not _seq(inputs):
        raise exc(kind, f"expected a list of inputs ({', '.join(_WHAT[w] for w in want_in)}), got {show(inputs)}")
    inputs = list(inputs)
    if want_in == ("loops",):
        if not inputs:
            raise exc(kind, "expected at least one loop handle like 'C.i', got none")
        want_in = ("loop",) * len(inputs)
    if len(inputs) != len(want_in):
        raise exc(kind, f"expected {len(want_in)} input(s) ({', '.join(_WHAT[w] for w in want_in)}), got "
                  f"{len(inputs)}: {show(inputs)}")
    for x, w in zip(inputs, want_in):
        if not isinstance(x, str):
            raise exc(kind, f"expected {_WHAT[w]}, got {show(x)}")
    # attributes
    if attrs is None:
        attrs = {}
    if not isinstance(attrs, dict):
        raise exc(kind, f"expected the attributes as a dict, got {show(attrs)}")
    unknown = [k for k in attrs if k not in known_attrs]
    if unknown:
        allowed = f"expected only {list(known_attrs)}" if known_attrs else "it takes none"
        raise exc(kind, f"unexpected attribute(s) {show(unknown)}; {allowed}")
    attrs = {k: v for k, v in attrs.items() if v is not None}
    checker = _ATTR_CHECKS.get(kind)
    if checker is not None:
        attrs = checker(inputs, attrs)
    # output names
    if not _seq(outputs):
        raise exc(kind, f"expected the names of the new {out_kind or 'loop'}s as a list, got {show(outputs)}")
    outputs = list(outputs)
    if outputs:
        if n_out == 0:
            raise exc(kind, f"{kind} makes nothing to name; got names {show(outputs)}")
        if len(outputs) != n_out:
            what = "2 names (outer, inner)" if n_out == 2 else "1 name"
            raise exc(kind, f"expected {what} for the new {out_kind}{'s' if n_out > 1 else ''}, got "
                      f"{len(outputs)}: {show(outputs)}")
        for o in outputs:
            if not isinstance(o, str):
                raise exc(kind, f"expected a {out_kind} name (a string), got {show(o)}")
        if out_kind == "loop":   # "stage.loop" handles of the input's stage
            stage = inputs[0].split(".", 1)[0]
            for o in outputs:
                if not o.startswith(stage + "."):
                    raise exc(kind, f"new loop {o!r} must be a loop of stage {stage} (a handle '{stage}.name')")
            outputs = [o[len(stage) + 1:] for o in outputs]
    return inputs, attrs, outputs


def _check_split_attrs(inputs, attrs):
    for key in ("factor", "nparts"):
        if key in attrs:
            attrs[key] = as_int(attrs[key], "split", f"{key} for loop {inputs[0]}")
    return attrs


def _check_pack_attrs(inputs, attrs):
    (tname,) = inputs
    splits = attrs.get("splits", {})
    if not isinstance(splits, dict):
        raise PackError("pack", f"splits of {tname} must map a dimension to a block size, like {{1: 16}}; got "
                        f"{show(splits)}")
    out = {}
    for d, f in splits.items():
        if isinstance(d, str) and re.fullmatch(r"[0-9]+", d, re.ASCII):
            dim = int(d)
        elif isinstance(d, numbers.Integral) and not isinstance(d, bool):
            dim = int(operator.index(d))
        else:
            raise PackError("pack", f"splits of {tname} must map a dimension (an integer) to a block size; got "
                            f"the key {show(d)}")
        if str(dim) in out:
            raise PackError("pack", f"splits of {tname} give dimension {dim} twice")
        out[str(dim)] = as_int(f, "pack", f"split factor of dimension {dim} of {tname}")
    attrs["splits"] = out
    if "order" in attrs:
        order = attrs["order"]
        if not _seq(order) or not all(isinstance(k, str) or (isinstance(k, numbers.Integral) and
                                                            not isinstance(k, bool)) for k in order):
            raise PackError("pack", f"order of {tname} must list dimension keys like ['1.o', '0', '1.i']; got "
                            f"{show(order)}")
        attrs["order"] = [k if isinstance(k, str) else str(int(k)) for k in order]
    if "consumers" in attrs:
        cons = attrs["consumers"]
        if not _seq(cons) or not all(isinstance(c, str) for c in cons):
            raise PackError("pack", f"consumers of the packed {tname} must be a list of stage names; got "
                            f"{show(cons)}")
        attrs["consumers"] = list(cons)
    return attrs


def _check_rfactor_attrs(inputs, attrs):
    if "factor" not in attrs:
        raise RFactorError("rfactor", f"expected a factor for stage {inputs[0]}, got none")
    attrs["factor"] = as_int(attrs["factor"], "rfactor", f"factor of stage {inputs[0]}", minimum=None)
    if "axis" in attrs and not isinstance(attrs["axis"], str):
        raise RFactorError("rfactor", f"axis of stage {inputs[0]} must be the name of a reduce loop, got "
                           f"{show(attrs['axis'])}")
    return attrs


_ATTR_CHECKS = {"split": _check_split_attrs, "pack": _check_pack_attrs, "rfactor": _check_rfactor_attrs}


def _unique(base: str, taken) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def new_loop_names(st: Stage, given: list, defaults: list, prim: str, accepted=()) -> list:
    """Names for the loops ``prim`` adds to ``st``: ``given`` (checked) or ``defaults`` (made unique).

    A given name must be new to the stage and to the other new loops; a name equal to the default
    or in ``accepted`` (the default of an earlier version, in recorded traces) skips the spelling check.
    """
    exc = ERRORS[prim]
    out: list = []
    if not given:
        for d in defaults:
            out.append(_unique(d, set(st.loops) | set(out)))
        return out
    for name, default in zip(given, defaults):
        if name != default and name not in accepted and not _LOOP_NAME.fullmatch(name):
            raise exc(prim, f"loop name {name!r} is not valid; expected letters, digits and '_', in parts "
                      "joined by '.' (like 'i_o' or 'i.0')", stage=st.name)
        if name in st.loops:
            raise exc(prim, f"loop name {st.name}.{name} is already taken; expected a name stage {st.name} "
                      "has not used for a loop", stage=st.name)
        if name in out:
            raise exc(prim, f"the new loops need distinct names, got {st.name}.{name} twice", stage=st.name)
        out.append(name)
    return out


def new_stage_name(g: StageGraph, given: list, default: str, prim: str) -> str:
    """The name of the stage ``prim`` creates: ``given[0]`` (checked) or ``default`` made unique."""
    exc = ERRORS[prim]
    if not given:
        return g.fresh_name(default)
    (name,) = given
    if not _STAGE_NAME.fullmatch(name):
        raise exc(prim, f"stage name {name!r} is not valid; expected letters, digits and '_', not starting "
                  "with a digit (no '.': loops are named 'stage.loop')")
    if g.stage(name) is not None or name in g.names.values():
        raise exc(prim, f"name {name!r} is already taken; expected a name no tensor or stage of the workload has")
    return name


def _move_attachments(g: StageGraph, st: Stage, old: str, new: str) -> None:
    for s in g.stages:
        if s.attach.kind == "at" and s.attach.stage == st.name and s.attach.loop == old:
            s.attach = Attach("at", st.name, new)


def _check_unannotated(st: Stage, loop: str, prim: str, exc) -> None:
    if loop in st.ann:
        raise exc(prim, f"loop {st.name}.{loop} is already {st.ann[loop].value}; apply {prim} before "
                  "annotating it", stage=st.name, loop=loop)


# --------------------------------------------------------------- loop shape

def apply_split(g, inputs, attrs, outputs):
    (handle,) = inputs
    st, loop = get_loop(g, handle, "split")
    factor, nparts = attrs.get("factor"), attrs.get("nparts")
    if (factor is None) == (nparts is None):
        raise SplitError("split", f"give exactly one of factor= or nparts= for loop {handle}")
    ext = st.loops[loop].extent
    if factor is None:
        factor = -(-ext // nparts)
    factor = min(factor, ext)        # a factor past the extent makes one outer iteration, as the extent does
    _check_unannotated(st, loop, "split", SplitError)
    outer, inner = new_loop_names(st, outputs, [f"{loop}.0", f"{loop}.1"], "split")
    kind = st.loops[loop].kind
    st.loops[outer] = Loop(outer, kind, -(-ext // factor))
    st.loops[inner] = Loop(inner, kind, factor)
    pos = st.leaf.index(loop)
    st.leaf[pos:pos + 1] = [outer, inner]
    st.relations.append(Split(loop, outer, inner, factor))
    _move_attachments(g, st, loop, inner)
    return [outer, inner]


def _roots(st: Stage, loop: str) -> list:
    """The root loops ``loop`` derives from, outermost first (``i.0`` -> [i]; ``i_j_fused`` -> [i, j])."""
    for rel in reversed(st.relations):
        if isinstance(rel, Split) and loop in (rel.outer, rel.inner):
            return _roots(st, rel.parent)
        if isinstance(rel, Fuse) and loop == rel.fused:
            return _roots(st, rel.outer) + _roots(st, rel.inner)
    return [loop]


def fused_name(st: Stage, outer: str, inner: str) -> str:
    """Default name of ``fuse(outer, inner)``: its root loops joined, ``i_j_fused`` (unique in the stage).

    (Before, it was ``f"{outer}.{inner}.fused"``, which grew with every level of tiling and fusion;
    recorded traces name their fused loops explicitly, so they replay with the old names.)
    """
    roots = list(dict.fromkeys(_roots(st, outer) + _roots(st, inner)))
    return _unique("_".join(roots) + "_fused", st.loops)


def apply_fuse(g, inputs, attrs, outputs):
    st, a = get_loop(g, inputs[0], "fuse")
    st2, b = get_loop(g, inputs[1], "fuse")
    if st2 is not st:
        raise FuseError("fuse", f"loops {inputs[0]} and {inputs[1]} belong to different stages", stage=st.name)
    pa, pb = st.leaf.index(a), st.leaf.index(b)
    if pb != pa + 1:
        between = st.leaf[pa + 1:pb] if pb > pa else []
        what = (f"found {[f'{st.name}.{n}' for n in between]} between them" if between else
                f"{inputs[1]} is outside {inputs[0]}")
        raise FuseError("fuse", f"loops {inputs[0]} and {inputs[1]} must be adjacent with {inputs[1]} directly "
                        f"inside {inputs[0]}; {what}", stage=st.name, loop=a)
    ka, kb = st.loops[a].kind, st.loops[b].kind
    if ka is not kb:
        raise FuseError("fuse", f"cannot fuse {ka.value} loop {inputs[0]} with {kb.value} loop {inputs[1]}",
                        stage=st.name, loop=a)
    _check_unannotated(st, a, "fuse", FuseError)
    _check_unannotated(st, b, "fuse", FuseError)
    (fused,) = new_loop_names(st, outputs, [fused_name(st, a, b)], "fuse", accepted=[f"{a}.{b}.fused"])
    st.loops[fused] = Loop(fused, ka, st.loops[a].extent * st.loops[b].extent)
    st.leaf[pa:pb + 1] = [fused]
    st.relations.append(Fuse(a, b, fused))
    _move_attachments(g, st, a, fused)
    _move_attachments(g, st, b, fused)
    return [fused]


def apply_reorder(g, inputs, attrs, outputs):
    if not inputs:
        raise ReorderError("reorder", "expected at least one loop")
    resolved = [get_loop(g, h, "reorder") for h in inputs]
    st = resolved[0][0]
    for (s, _), h in zip(resolved, inputs):
        if s is not st:
            raise ReorderError("reorder", f"loop {h} belongs to stage {s.name}, expected loops of stage {st.name} "
                               f"(reorder works within one stage)", stage=st.name)
    names = [n for _, n in resolved]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ReorderError("reorder", f"loop {st.name}.{dup} is listed twice", stage=st.name, loop=dup)
    slots = sorted(st.leaf.index(n) for n in names)
    for pos, n in zip(slots, names):
        st.leaf[pos] = n
    return []


def _annotate(kind: str):
    fk = ANNOTATIONS[kind]

    def apply(g, inputs, attrs, outputs):
        (handle,) = inputs
        st, loop = get_loop(g, handle, kind)
        lk = st.loops[loop].kind
        if lk is AxisKind.REDUCE and kind in ("vectorize", "parallel"):
            why = "lanes" if kind == "vectorize" else "threads"
            raise AnnotationError(kind, f"loop {handle} is a reduction loop; expected a spatial loop (a "
                                  f"{'vectorized' if kind == 'vectorize' else 'parallel'} reduction would race "
                                  f"between {why})", stage=st.name, loop=loop)
        old = st.ann.get(loop)
        if old is not None and old is not fk:
            raise AnnotationError(kind, f"loop {handle} is already {old.value}", stage=st.name, loop=loop)
        st.ann[loop] = fk
        return []
    return apply


# -------------------------------------------------------------- placement

def _inside(g: StageGraph, y: Stage, x: Stage, loop: str) -> bool:
    pos = x.leaf.index(loop)
    cur, seen = y, set()
    while cur.name not in seen:
        seen.add(cur.name)
        if cur.name == x.name:
            return True
        if cur.attach.kind != "at":
            return False
        if cur.attach.stage == x.name:
            return cur.attach.loop in x.leaf and x.leaf.index(cur.attach.loop) >= pos
        cur = g.stage(cur.attach.stage)
    return False


def apply_compute_at(g, inputs, attrs, outputs):
    sname, handle = inputs
    st = get_stage(g, sname, "compute_at")
    target, loop = get_loop(g, handle, "compute_at")
    if st.is_output:
        raise ComputeAtError("compute_at", f"stage {st.name} is an output of the workload; only intermediate "
                             "stages can be computed inside another stage's loop", stage=st.name)
    if target is st:
        raise ComputeAtError("compute_at", f"cannot compute stage {st.name} at its own loop {handle}",
                             stage=st.name)
    cur = target
    while cur.attach.kind == "at":
        if cur.attach.stage == st.name:
            raise ComputeAtError("compute_at", f"stage {target.name} is already computed inside {st.name}; "
                                 f"computing {st.name} at {handle} would be circular", stage=st.name)
        cur = g.stage(cur.attach.stage)
    consumers = g.consumers(st)
    if not consumers:
        raise ComputeAtError("compute_at", f"stage {st.name} has no consumer to be computed at", stage=st.name)
    old = st.attach
    st.attach = Attach("at", target.name, loop)
    outside = [c.name for c in consumers if not _inside(g, c, target, loop)]
    if outside:
        st.attach = old
        raise ComputeAtError("compute_at", f"loop {handle} does not enclose {', '.join(outside)}, which "
                             f"read{'s' if len(outside) == 1 else ''} {st.name}; expected a loop of a stage "
                             f"that contains every consumer of {st.name} (move those consumers inside it first)",
                             stage=st.name, loop=loop)
    return []


def apply_compute_root(g, inputs, attrs, outputs):
    (sname,) = inputs
    st = get_stage(g, sname, "compute_root")
    st.attach = ROOT  # stages attached to st's loops stay attached to them
    return []


def apply_compute_inline(g, inputs, attrs, outputs):
    (sname,) = inputs
    st = get_stage(g, sname, "compute_inline")
    if st.is_output:
        raise ComputeInlineError("compute_inline", f"stage {st.name} is an output of the workload and must be "
                                 "stored; expected an intermediate stage", stage=st.name)
    if st.is_reduction:
        raise ComputeInlineError("compute_inline", f"stage {st.name} is a reduction ({st.body.reducer.value} "
                                 f"over {[a.name for a in st.body.axes]}); only elementwise stages can be inlined",
                                 stage=st.name)
    attached = [s.name for s in g.stages if s.attach.kind == "at" and s.attach.stage == st.name]
    if attached:
        raise ComputeInlineError("compute_inline", f"stages {attached} are computed at loops of {st.name}; "
                                 "move them first (compute_root)", stage=st.name)
    params = [st.tensor.op.axes[d].var for d in range(len(st.shape))]

    def inline(node):
        if isinstance(node, TensorRead) and node.tensor is st.tensor:
            idx = [rewrite(i, inline) for i in node.indices]
            return substitute(st.body, dict(zip(params, idx)))
        return None

    for c in g.consumers(st):
        c.body = rewrite(c.body, inline)
    st.attach = INLINE
    return []


# ------------------------------------------------------------ new stages

def _check_fresh(st: Stage, prim: str, exc) -> None:
    if st.relations or st.ann or st.leaf != st.root or st.attach is not ROOT:
        raise exc(prim, f"stage {st.name} has already been scheduled; apply {prim} before splitting, "
                  "reordering, annotating or attaching it", stage=st.name)


def apply_cache_write(g, inputs, attrs, outputs):
    (sname,) = inputs
    st = get_stage(g, sname, "cache_write")
    _check_fresh(st, "cache_write", CacheWriteError)
    name = new_stage_name(g, outputs, f"{st.name}_local", "cache_write")
    op = st.tensor.op
    cache_t = Tensor(st.shape, st.dtype, name, ComputeOp(op.axes, st.body))
    g.names[id(cache_t)] = name
    cache = make_stage(name, cache_t, False, origin="cache_write")
    if len(cache.root) != len(st.root):
        raise CacheWriteError("cache_write", f"stage {st.name} has loops {st.root}, but its computation has "
                              f"{cache.root}; expected the same axes", stage=st.name)
    # the computation moves to the cache stage: so do the stages computed inside its loops
    # (compute_at("e", "r.k").cache_write("r") computes e at r_local.k, where it is read)
    same = dict(zip(st.root, cache.root))
    for s in g.stages:
        if s.attach.kind == "at" and s.attach.stage == st.name and s.attach.loop in same:
            s.attach = Attach("at", name, same[s.attach.loop])
    spatial = st.spatial_root
    st.body = TensorRead(cache_t, tuple(st.root_vars[r] for r in spatial))
    st.root = list(spatial)
    st.leaf = list(spatial)
    st.loops = {r: st.loops[r] for r in spatial}
    g.stages.insert(g.stages.index(st), cache)
    return [name]


def apply_pack(g, inputs, attrs, outputs):
    """Copy a tensor into a blocked layout and make its readers use the copy."""
    (tname,) = inputs
    source = _find_tensor(g, tname)
    n = source.ndim
    splits = {}
    for d, f in attrs.get("splits", {}).items():
        d = int(d)
        if not 0 <= d < n:
            raise PackError("pack", f"tensor {tname} has {n} dimension(s); cannot split dimension {d}")
        splits[d] = min(f, source.shape[d])   # as split does: a block larger than the dimension is the dimension
    dims = []  # (key, source dim, part) part in {"", "o", "i"}
    for d in range(n):
        if d in splits:
            dims += [(f"{d}.o", d, "o"), (f"{d}.i", d, "i")]
        else:
            dims.append((str(d), d, ""))
    keys = [k for k, _, _ in dims]
    order = [str(k) for k in attrs.get("order") or
             ([k for k, _, p in dims if p != "i"] + [k for k, _, p in dims if p == "i"])]
    if sorted(order) != sorted(keys):
        raise PackError("pack", f"order {order} must list each of {keys} exactly once")
    readers = _readers(g, source, attrs.get("consumers"))
    if not readers:
        raise PackError("pack", f"no stage reads {tname}; nothing would use the packed copy")
    name = new_stage_name(g, outputs, f"{g.names.get(id(source), tname)}_pack", "pack")
    by_key = {k: (d, p) for k, d, p in dims}
    ext = {}
    for k, d, p in dims:
        s = source.shape[d]
        ext[k] = -(-s // splits[d]) if p == "o" else splits[d] if p == "i" else s
    new_shape = tuple(ext[k] for k in order)
    axes = tuple(IterVar(Var(f"d{k}"), ext[k]) for k in order)
    avar = {k: ax.var for k, ax in zip(order, axes)}
    old_idx, conds = [], []
    for d in range(n):
        if d in splits:
            e = avar[f"{d}.o"] * splits[d] + avar[f"{d}.i"]
            if source.shape[d] % splits[d]:
                conds.append(e < source.shape[d])
            old_idx.append(e)
        else:
            old_idx.append(avar[str(d)])
    body = TensorRead(source, tuple(old_idx))
    if conds:
        cond = conds[0]
        for c in conds[1:]:
            cond = Binary(BinOp.AND, cond, c)
        body = select(cond, body, const(0, source.dtype))
    packed = Tensor(new_shape, source.dtype, name, ComputeOp(axes, body))
    g.names[id(packed)] = name

    def new_index(idx):
        parts = {}
        for d, i in enumerate(idx):
            if d in splits:
                parts[f"{d}.o"] = i // splits[d]
                parts[f"{d}.i"] = i % splits[d]
            else:
                parts[str(d)] = i
        return tuple(parts[k] for k in order)

    def repl(node):
        if isinstance(node, TensorRead) and node.tensor is source:
            return TensorRead(packed, new_index(tuple(rewrite(i, repl) for i in node.indices)))
        return None

    for r in readers:
        r.body = rewrite(r.body, repl)
    stage = make_stage(name, packed, False, origin="pack")
    src_stage = g.stage_of(source)
    pos = g.stages.index(src_stage) + 1 if src_stage is not None else 0
    g.stages.insert(pos, stage)
    return [name]


def apply_rfactor(g, inputs, attrs, outputs):
    """Split a reduce axis ``k`` into ``k_o * f + k_v`` and make ``k_v`` a spatial axis of a new stage.

    ``st[i] = sum_k x[i, k]`` becomes ``st_rf[i, k_v] = sum_{k_o} x[i, k_o * f + k_v]`` (terms past
    the axis's extent read as the reducer's identity) and ``st[i] = sum_{k_v} st_rf[i, k_v]``: the
    partial results of ``f`` interleaved slices, one per vector lane once ``k_v`` is vectorized.
    """
    (sname,) = inputs
    st = get_stage(g, sname, "rfactor")
    if not st.is_reduction:
        raise RFactorError("rfactor", f"stage {st.name} is not a reduction; nothing to factor", stage=st.name)
    _check_fresh(st, "rfactor", RFactorError)
    red: Reduce = st.body
    reduce_loops = [n for n in st.root if st.loops[n].kind is AxisKind.REDUCE]
    axis = attrs.get("axis") or reduce_loops[-1]
    if axis not in reduce_loops:
        raise RFactorError("rfactor", f"{st.name}.{axis} is not a reduce loop of {st.name}; reduce loops: "
                           f"{[f'{st.name}.{n}' for n in reduce_loops]}", stage=st.name)
    f = attrs["factor"]
    extent = st.loops[axis].extent
    if not 2 <= f <= extent:
        raise RFactorError("rfactor", f"factor of {st.name}.{axis} must be between 2 and its extent {extent}, "
                           f"got {f!r}", stage=st.name, loop=axis)
    hosted = [s for s in g.stages if s.attach.kind == "at" and s.attach.stage == st.name]
    if hosted:
        s = hosted[0]
        raise RFactorError("rfactor", f"stage {s.name} is computed at loop {st.name}.{s.attach.loop}; expected no "
                           f"stage computed inside the loops of {st.name}, whose reads move to the partial "
                           f"stage (apply rfactor before compute_at, or compute_root {s.name} first)", stage=st.name)
    name = new_stage_name(g, outputs, f"{st.name}_rf", "rfactor")
    k = st.root_vars[axis]
    taken = {v.name for v in st.root_vars.values()}
    kv, ko = (Var(_fresh_var(f"{axis}_{suffix}", taken)) for suffix in ("v", "o"))
    spatial = st.spatial_root
    op_axes = tuple(IterVar(st.root_vars[n], st.loops[n].extent) for n in spatial) + (IterVar(kv, f),)
    rest = tuple(ax for ax in red.axes if ax.var is not k)
    source = substitute(red.source, {k: ko * f + kv})
    if extent % f:
        source = select(ko * f + kv < extent, source, _identity_of(red.reducer, source.dtype))
    rf_op = ComputeOp(op_axes, Reduce(red.reducer, source, rest + (IterVar(ko, -(-extent // f), AxisKind.REDUCE),)))
    rf = Tensor(tuple(ax.extent for ax in op_axes), st.dtype, name, rf_op)
    g.names[id(rf)] = name
    kr = IterVar(kv, f, AxisKind.REDUCE)
    st.body = Reduce(red.reducer, TensorRead(rf, tuple(st.root_vars[n] for n in spatial) + (kv,)), (kr,))
    st.root = spatial + [kv.name]
    st.leaf = list(st.root)
    st.loops = {**{n: st.loops[n] for n in spatial}, kv.name: Loop(kv.name, AxisKind.REDUCE, f)}
    st.root_vars = {**{n: st.root_vars[n] for n in spatial}, kv.name: kv}
    g.stages.insert(g.stages.index(st), make_stage(name, rf, False, origin="rfactor"))
    return [name]


def _fresh_var(base: str, taken: set) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}{n}", n + 1
    taken.add(name)
    return name


def _identity_of(reducer, dtype: str):
    from schedules.lower import _identity
    return _identity(reducer, dtype)


def _find_tensor(g: StageGraph, tname) -> Tensor:
    for t in g.params:
        if g.name_of(t) == tname or t is tname:
            return t
    st = g.stage(tname) if isinstance(tname, str) else None
    if st is None:
        raise UnknownHandleError("pack", f"no tensor named {tname!r}; tensors: "
                                 f"{[g.name_of(t) for t in g.params] + [s.name for s in g.stages]}")
    if st.attach is INLINE:
        raise PackError("pack", f"stage {tname} was inlined; it has no buffer to pack")
    return st.tensor


def _readers(g: StageGraph, source: Tensor, names) -> list:
    readers = [s for s in g.stages if s.attach is not INLINE and any(t is source for t in s.read_tensors())]
    if names is None:
        return readers
    out = []
    for n in names:
        st = get_stage(g, n, "pack")
        if st not in readers:
            raise PackError("pack", f"stage {n} does not read {g.names.get(id(source), source.name)}", stage=n)
        out.append(st)
    return out


PRIMITIVES = {
    "split": apply_split,
    "fuse": apply_fuse,
    "reorder": apply_reorder,
    "unroll": _annotate("unroll"),
    "vectorize": _annotate("vectorize"),
    "parallel": _annotate("parallel"),
    "compute_at": apply_compute_at,
    "compute_root": apply_compute_root,
    "compute_inline": apply_compute_inline,
    "cache_write": apply_cache_write,
    "pack": apply_pack,
    "rfactor": apply_rfactor,
}
