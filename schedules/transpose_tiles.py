"""R4's transposing tiles: an elementwise or layout stage whose vector axis strides through an input.

A transpose such as ``out[h, d, s] = in[s, h * 64 + d]`` vectorized along ``s`` gathers every
vector from 16 rows of ``in``, ``4 * 768`` bytes apart. Walked row after row of ``out`` (all of
``s`` for one ``d``, then the next ``d``), the 128 cache lines of one walk map to a few L1 sets
(a stride of 3 KiB) and are evicted before the next ``d`` reuses them: every gather misses L1.
Tiled, the axis that the input reads contiguously (``d``) gets an inner loop of one cache line
right outside the vector loop, so the lines a gather brings in serve the next 15 gathers::

    for h, d.0, s.0 in ...:            # fused, parallel
        for d.1 in range(16):          # one cache line of in's rows
            for s.1 in range(16):      # vectorized (a gather of 16 rows)
                out[h, d.0 * 16 + d.1, s.0 * 16 + s.1] = in[...]

The BERT layer's key transpose ran 4x faster so (docs/decisions/026-row-groups.md).
"""
from __future__ import annotations

from tensorir.tir.analysis.affine import mentions

from .schedule import Schedule


def transposed_axis(stage) -> int | None:
    """Position of the output axis that an input strided along the last (vector) axis reads
    contiguously (the innermost such axis its last index mentions), or None."""
    own = [stage.root_vars[r] for r in stage.spatial_root]
    if len(own) < 2:
        return None
    last, best = own[-1], None
    for read in stage.reads():
        if not read.indices or mentions(read.indices[-1], last) \
                or not any(mentions(i, last) for i in read.indices[:-1]):
            continue
        pos = [p for p, v in enumerate(own[:-1]) if mentions(read.indices[-1], v)]
        if pos:
            best = max(pos) if best is None else max(best, max(pos))
    return best


def transpose_tile(s: Schedule, src, name: str, inner: int) -> tuple:
    """Tile stage ``name`` (its last loop already split for vectors: ``inner`` = 1) as the module
    docstring shows, if it transposes and the decision ``{name}.transpose_tile`` (0: no tiles,
    else the inner extent) says so; returns the schedule and how many innermost loops to keep
    out of the fused parallel loop."""
    st = s._state.stage(name)
    p = transposed_axis(st)
    if p is None or inner != 1:
        return s, inner
    loops = s.loops(name)
    axis = loops[p]
    line = 64 // (8 if st.dtype in ("float64", "int64") else 4)
    choices = [0] + [t for t in (line // 2, line, 2 * line) if 1 < t <= s.extent(axis)]
    if len(choices) == 1:
        return s, inner
    src.hint(f"{name}.transpose_tile", line)
    t = src.choose(f"{name}.transpose_tile", choices)
    if not t:
        return s, inner
    s = s.split(axis, factor=t)
    a_in = s.trace[-1].outputs[1]
    loops = s.loops(name)
    s = s.reorder(*[lp for lp in loops if lp not in (a_in, loops[-1])], a_in, loops[-1])
    return s, inner + 1
