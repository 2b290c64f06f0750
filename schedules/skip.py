"""The ``skip_padding`` primitive: a reduce loop skips the iterations whose every read of a zero padding
reads padding (onnxruntime's convolutions skip the taps of a dilated window that fall off the image;
we computed them on the padded copy's zeros: DeepLab's ASPP at rate 18 over 33x33 spends 60% of its FMAs
on them).

``Schedule.skip_padding(tensor, loop)``: ``tensor`` is a stage computed as ``select(box, x, 0)`` (a
padding stage, or a pack it was inlined into) and read by a sum of products, each of its reads a factor
of the product; an iteration of ``loop`` (a reduce loop of the reading stage) whose reads of ``tensor``
all fall outside ``box``, for every value of the loops inside it, adds only zeros, and is skipped.
Lowering (:mod:`schedules.lowering.skip`) guards the loop's body with the condition that some inner
iteration reads inside the box (an ``IfThenElse`` marked ``skip``): exact in the loop's own and outer
variables, a bound over the inner ones (an iteration is run where in doubt, never skipped wrongly).

Weights that are inf or NaN give NaN on a padded tap when it is computed and nothing when it is skipped,
as in onnxruntime, whose kernels never read the padding.
"""
from __future__ import annotations

import numpy as np

from schedules.errors import SkipPaddingError
from schedules.primitives import get_loop
from schedules.state import INLINE, SkipSpec, StageGraph
from tensorir.te import AxisKind, Reduce, TensorRead, free_vars, walk
from tensorir.te.expr import Binary, BinOp, Const, Select
from tensorir.te.tensor import Reducer
from tensorir.tir.analysis.values import int_values
from tensorir.tir.rewrite import substitute

MAX_SHARE_POINTS = 1 << 22   # iterations :func:`padding_share` enumerates at most (else it answers 0.0)


def conjuncts(e) -> list:
    """``a and b and ...`` as ``[a, b, ...]``."""
    if isinstance(e, Binary) and e.op is BinOp.AND:
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


def zero_box(st) -> list | None:
    """The conditions (in ``st``'s root variables) outside which stage ``st`` is zero, if its body is
    ``select(box, x, 0)`` (nested selects with zero too), else None."""
    body, box = st.body, []
    while isinstance(body, Select) and isinstance(body.f, Const) and body.f.value == 0:
        box += conjuncts(body.cond)
        body = body.t
    return box or None


def _factors(e) -> list:
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        return _factors(e.a) + _factors(e.b)
    return [e]


def padded_reads(g: StageGraph, st, name: str) -> list:
    """The reads of tensor ``name`` by stage ``st`` in terms of the zero box (``[[condition, ...]]``, one list
    per read, in ``st``'s root variables), or None when skipping its padding would change ``st``: ``st``
    is not a sum of products with each read of ``name`` a factor, or ``name`` is no zero padding."""
    src = g.stage(name)
    if src is None or src.attach is INLINE or not isinstance(st.body, Reduce) or st.body.reducer is not Reducer.SUM:
        return None
    box = zero_box(src)
    reads = [r for r in st.reads() if g.names.get(id(r.tensor)) == name]
    if box is None or not reads:
        return None
    source = st.body.source
    factors = _factors(source)
    every = [n for n in walk(source) if isinstance(n, TensorRead) and n in reads]
    if any(all(f is not n and f != n for f in factors) for n in every):
        return None
    axes = [src.root_vars[a] for a in src.spatial_root]
    out = []
    for r in reads:
        sub = dict(zip(axes, r.indices))
        out.append([substitute(c, sub) for c in box])
    return out


def _groups(conds: list) -> list:
    """``conds`` in groups that share no variable with each other (a window's row conditions, its column ones)."""
    groups: list = []          # [(variable names, conditions)]
    for c in conds:
        names, members = {v.name for v in free_vars(c)}, [c]
        for other in [gr for gr in groups if gr[0] & names]:
            groups.remove(other)
            names |= other[0]
            members += other[1]
        groups.append((names, members))
    return groups


def padding_share(g: StageGraph, st, name: str) -> float:
    """The share of stage ``st``'s reduction terms that read ``name``'s padding (its first read), counted
    over the root loops the box conditions use, each group of conditions on its own variables apart (rows times
    columns, not their product's points); 0.0 when unknown (too many points, not integer arithmetic)."""
    reads = padded_reads(g, st, name)
    if not reads:
        return 0.0
    inside = 1.0
    for names, conds in _groups(reads[0]):
        roots = [(n, st.loops[n].extent) for n in st.root if st.root_vars[n].name in names]
        if not roots or np.prod([e for _, e in roots], dtype=np.int64) > MAX_SHARE_POINTS:
            return 0.0
        env = {}
        for i, (n, ext) in enumerate(roots):
            shape = [1] * len(roots)
            shape[i] = ext
            env[st.root_vars[n].name] = np.arange(ext).reshape(shape)
        cond = conds[0]
        for c in conds[1:]:
            cond = Binary(BinOp.AND, cond, c)
        values = int_values(cond, env)
        if values is None:
            return 0.0
        inside *= float(np.broadcast_to(values, [e for _, e in roots]).mean())
    return 1.0 - inside


def apply_skip_padding(g: StageGraph, inputs, attrs, outputs):
    """Record that reduce loop ``inputs[0]`` skips iterations reading only ``attrs["tensor"]``'s padding."""
    (handle,) = inputs
    st, loop = get_loop(g, handle, "skip_padding")
    name = attrs["tensor"]
    if st.loops[loop].kind is not AxisKind.REDUCE:
        raise SkipPaddingError("skip_padding", f"loop {handle} is not a reduce loop; only a reduction's terms "
                               "can be skipped", stage=st.name, loop=loop)
    if st.annotation(loop).value in ("vectorized", "parallel"):
        raise SkipPaddingError("skip_padding", f"loop {handle} is {st.annotation(loop).value}; skip in a serial or "
                               "unrolled loop", stage=st.name, loop=loop)
    if padded_reads(g, st, name) is None:
        raise SkipPaddingError("skip_padding", f"stage {st.name} does not read {name} as a factor of a sum of "
                               f"products, or {name} is not a stage computed as select(box, x, 0)",
                               stage=st.name, loop=loop)
    if any(k.loop == loop and k.tensor == name for k in st.skips):
        raise SkipPaddingError("skip_padding", f"loop {handle} already skips {name}'s padding", stage=st.name,
                               loop=loop)
    st.skips.append(SkipSpec(name, loop))
    return []
