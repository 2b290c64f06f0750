"""Schedule primitives as functions on a (copied) stage graph.

Each ``apply_<kind>(graph, inputs, attrs, outputs)`` checks legality, edits
``graph`` in place and returns the names it created.  ``Schedule`` copies the
graph first, so a schedule never changes once made.  ``outputs`` (names recorded
in a trace, or chosen by the user) are honoured on replay, so a replayed trace
rebuilds the same loops.  Before a primitive runs, ``check_instruction`` has
checked the types of its arguments (the same check for Python calls and traces).
"""
from __future__ import annotations


from schedules.errors import (AnnotationError, CacheWriteError, ComputeAtError, ComputeInlineError,
                             FuseError, PackError, ReorderError, RFactorError, SplitError,
                             UnknownHandleError)
from tensorir.te.expr import Binary, BinOp, const, expr_str, select
from tensorir.tir.analysis.affine import Affine, affine
from tensorir.tir.ir import ForKind
from tensorir.tir.rewrite import rewrite, substitute
from schedules.arguments import ERRORS, new_loop_names, new_stage_name, unique_name
from schedules.state import (INLINE, ROOT, Attach, AttachKind, Fuse, Loop, ProblemKind, Split, Stage, StageGraph,
                             StageOrigin, make_stage)
from tensorir.te import AxisKind, ComputeOp, IterVar, Reduce, Tensor, TensorRead, Var

INDEX_LIMIT = 2 ** 31     # loop indices are 32-bit (tensorir.runtime.safety.INDEX_LIMIT refuses more at build)
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


def _move_attachments(g: StageGraph, st: Stage, old: str, new: str) -> None:
    for s in g.stages:
        if s.attach.kind is AttachKind.AT and s.attach.stage == st.name and s.attach.loop == old:
            s.attach = Attach.at(st.name, new)


def _check_unannotated(st: Stage, loop: str, prim: str, exc) -> None:
    if loop in st.ann:
        raise exc(prim, f"loop {st.name}.{loop} is already {st.ann[loop].value}; apply {prim} before "
                  "annotating it", stage=st.name, loop=loop)
    fetched = [p.tensor for p in st.prefetches if p.loop == loop or loop in p.first]
    if fetched:
        raise exc(prim, f"loop {st.name}.{loop} prefetches {fetched[0]}; apply {prim} before prefetch",
                  stage=st.name, loop=loop)
    skipped = [k.tensor for k in st.skips if k.loop == loop]
    if skipped:
        raise exc(prim, f"loop {st.name}.{loop} skips {skipped[0]}'s padding; apply {prim} before skip_padding",
                  stage=st.name, loop=loop)


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
    return unique_name("_".join(roots) + "_fused", st.loops)


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
    ea, eb = st.loops[a].extent, st.loops[b].extent
    if ea * eb >= INDEX_LIMIT:   # the one primitive that makes a loop longer than its stage's axes
        raise FuseError("fuse", f"loops {inputs[0]} ({ea:,} iterations) and {inputs[1]} ({eb:,}) would make a loop "
                        f"of {ea * eb:,} iterations; expected fewer than 2**31 (loop indices are 32-bit): "
                        "split one of them first and fuse the parts", stage=st.name, loop=a)
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
        if kind == "vectorize" and any(p.loop == loop for p in st.prefetches):
            raise AnnotationError(kind, f"loop {handle} prefetches; a vectorized loop holds its own statement "
                                  "only (prefetch at the loop around it)", stage=st.name, loop=loop)
        old = st.ann.get(loop)
        if old is not None and old is not fk:
            raise AnnotationError(kind, f"loop {handle} is already {old.value}", stage=st.name, loop=loop)
        st.ann[loop] = fk
        return []
    return apply


# -------------------------------------------------------------- placement

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
    if not g.consumers(st):
        raise ComputeAtError("compute_at", f"stage {st.name} has no consumer to be computed at", stage=st.name)
    st.attach = Attach.at(target.name, loop)
    return []   # check_attachments: a loop enclosing every consumer, not circular, not vectorized


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
    attached = [s.name for s in g.stages if s.attach.kind is AttachKind.AT and s.attach.stage == st.name]
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
    if st.relations or st.ann or st.prefetches or st.skips or st.leaf != st.root or st.attach is not ROOT:
        raise exc(prim, f"stage {st.name} has already been scheduled; apply {prim} before splitting, "
                  "reordering, annotating, prefetching or attaching it", stage=st.name)


def apply_cache_write(g, inputs, attrs, outputs):
    (sname,) = inputs
    st = get_stage(g, sname, "cache_write")
    _check_fresh(st, "cache_write", CacheWriteError)
    name = new_stage_name(g, outputs, f"{st.name}_local", "cache_write")
    op = st.tensor.op
    cache_t = Tensor(st.shape, st.dtype, name, ComputeOp(op.axes, st.body))
    g.names[id(cache_t)] = name
    cache = make_stage(name, cache_t, False, origin=StageOrigin.CACHE_WRITE)
    if len(cache.root) != len(st.root):
        raise CacheWriteError("cache_write", f"stage {st.name} has loops {st.root}, but its computation has "
                              f"{cache.root}; expected the same axes", stage=st.name)
    # the computation moves to the cache stage: so do the stages computed inside its loops
    # (compute_at("e", "r.k").cache_write("r") computes e at r_local.k, where it is read)
    same = dict(zip(st.root, cache.root))
    for s in g.stages:
        if s.attach.kind is AttachKind.AT and s.attach.stage == st.name and s.attach.loop in same:
            s.attach = Attach.at(name, same[s.attach.loop])
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
    strides = {}
    for d, step in attrs.get("strides", {}).items():
        d = int(d)
        if not 0 <= d < n or d in splits:
            raise PackError("pack", f"tensor {tname}: a stride needs a dimension of its {n} that is not split, "
                            f"got dimension {d}")
        if step > 1:
            strides[d] = step
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
        ext[k] = -(-s // splits[d]) if p == "o" else splits[d] if p == "i" else -(-s // strides.get(d, 1))
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
            old_idx.append(avar[str(d)] * strides[d] if d in strides else avar[str(d)])
    body = TensorRead(source, tuple(old_idx))
    if conds:
        cond = conds[0]
        for c in conds[1:]:
            cond = Binary(BinOp.AND, cond, c)
        body = select(cond, body, const(0, source.dtype))
    packed = Tensor(new_shape, source.dtype, name, ComputeOp(axes, body))
    g.names[id(packed)] = name

    def new_index(idx, reader):
        parts = {}
        for d, i in enumerate(idx):
            if d in splits:
                parts[f"{d}.o"] = i // splits[d]
                parts[f"{d}.i"] = i % splits[d]
            elif d in strides:
                parts[str(d)] = _divide_index(i, strides[d], reader, tname, d)
            else:
                parts[str(d)] = i
        return tuple(parts[k] for k in order)

    for r in readers:
        def repl(node, r=r):
            if isinstance(node, TensorRead) and node.tensor is source:
                return TensorRead(packed, new_index(tuple(rewrite(i, repl) for i in node.indices), r))
            return None
        r.body = rewrite(r.body, repl)
    stage = make_stage(name, packed, False, origin=StageOrigin.PACK)
    src_stage = g.stage_of(source)
    pos = g.stages.index(src_stage) + 1 if src_stage is not None else 0
    g.stages.insert(pos, stage)
    return [name]


def _divide_index(e, step: int, reader: Stage, tname: str, dim: int):
    """``e // step`` for a reader's index ``e`` that is a multiple of ``step`` (its loops of one
    iteration count as 0, as a 1x1 window's taps are); else a ``PackError``."""
    unit = {reader.root_vars[a] for a in reader.root
            if a in reader.root_vars and a in reader.loops and reader.loops[a].extent == 1}
    form = affine(e)
    terms = {}
    for term, c in form.terms.items():
        if term in unit:
            continue
        if c % step:
            form = None
            break
        terms[term] = c // step
    if form is None or form.const % step:
        raise PackError("pack", f"stage {reader.name} reads dimension {dim} of {tname} at {expr_str(e)}, not only at "
                        f"multiples of its stride {step}", stage=reader.name)
    return Affine(terms, form.const // step).to_expr()


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
    hosted = [s for s in g.stages if s.attach.kind is AttachKind.AT and s.attach.stage == st.name]
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
        source = select(ko * f + kv < extent, source, red.reducer.identity(source.dtype))
    rf_op = ComputeOp(op_axes, Reduce(red.reducer, source, rest + (IterVar(ko, -(-extent // f), AxisKind.REDUCE),)))
    rf = Tensor(tuple(ax.extent for ax in op_axes), st.dtype, name, rf_op)
    g.names[id(rf)] = name
    kr = IterVar(kv, f, AxisKind.REDUCE)
    st.body = Reduce(red.reducer, TensorRead(rf, tuple(st.root_vars[n] for n in spatial) + (kv,)), (kr,))
    st.root = spatial + [kv.name]
    st.leaf = list(st.root)
    st.loops = {**{n: st.loops[n] for n in spatial}, kv.name: Loop(kv.name, AxisKind.REDUCE, f)}
    st.root_vars = {**{n: st.root_vars[n] for n in spatial}, kv.name: kv}
    g.stages.insert(g.stages.index(st), make_stage(name, rf, False, origin=StageOrigin.RFACTOR))
    return [name]


def _fresh_var(base: str, taken: set) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}{n}", n + 1
    taken.add(name)
    return name


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


# ------------------------------------------------------------- invariants

def check_attachments(g: StageGraph, before: StageGraph, kind: str, inputs) -> None:
    """Refuse primitive ``kind`` (which made ``g`` from a copy of ``before``) if it broke an invariant of
    ``compute_at`` that lowering relies on (``StageGraph.attach_problem``): one line, with the error class
    of that primitive, naming the stage, the loop and what to do instead.

    ``Schedule`` calls it after every primitive, from a Python call or a replayed trace, so ``before``
    has no broken invariant (the unscheduled workload attaches nothing) and the primitive that breaks
    one is the one refused, not ``lower()`` later, blaming an earlier ``compute_at``.
    """
    pr = g.attach_problem()
    if pr is None:
        return
    exc = ERRORS[kind]
    p, at = pr.stage, f"{pr.host}.{pr.loop}"
    moved = inputs[0] if kind in ("compute_at", "compute_root") else None   # the stage it placed
    if pr.kind is ProblemKind.DANGLING:
        msg = (f"stage {p} is computed at {at}, which would no longer be a loop of the schedule; "
               f"compute_root {p} first")
    elif pr.kind is ProblemKind.CYCLE:
        if moved == p:
            msg = (f"stage {pr.host} is already computed inside {p}; computing {p} at {at} would be "
                   "circular")
        else:
            msg = f"stage {p} would be computed inside itself (at {at}); compute_root {p} first"
    elif pr.kind is ProblemKind.OUTSIDE:
        if kind == "compute_at" and moved == p:
            out = pr.consumers
            msg = (f"loop {at} does not enclose {', '.join(out)}, which read{'s' if len(out) == 1 else ''} "
                   f"{p}; expected a loop of a stage that contains every consumer of {p} (move those "
                   "consumers inside it first)")
        else:
            c = g.stage(pr.consumers[0])
            where = "at root" if c.attach.kind is AttachKind.ROOT else f"at {c.attach.stage}.{c.attach.loop}"
            old_p, old_c = before.stage(p), before.stage(c.name)
            new = old_p is None or old_c is None or all(t is not old_p.tensor for t in old_c.read_tensors())
            if kind == "pack":
                hint = (f"pack {p} before compute_at {p} (then compute_at {c.name} at {at} too), "
                        f"or compute_root {p} first")
            elif kind == "compute_at":
                hint = f"compute_root {p} first, or compute {moved} at a loop inside {at}"
            else:
                hint = f"compute_root {p} first"
            msg = (f"stage {p} is computed at {at}, so its {'new ' if new else ''}consumer {c.name} {where} "
                   f"would not be inside that loop; {hint}")
    else:   # vectorized
        if moved == p:
            msg = (f"loop {at} is vectorized; a vectorized loop must contain only its own statement "
                   f"(compute {p} at an outer loop)")
        else:
            msg = (f"loop {at} has stage {p} computed at it; a vectorized loop must contain only its own "
                   f"statement (compute_at {p} at an outer loop first)")
    raise exc(kind, msg, stage=pr.host, loop=pr.loop)


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
