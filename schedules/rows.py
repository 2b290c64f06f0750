"""R2 of the generated space: stages computed row by row inside an elementwise output (the host).

Softmax, LayerNorm and the like are an elementwise output reading per-row reductions (a row's
max and sum, mean and variance) and, when not inlined, per-row intermediates (softmax's ``exp``).
Such a group runs one parallel loop over its rows; per row, its reductions and intermediates are
computed into row-sized local buffers right before the row's outputs::

    for block in range(rows // 8):     # parallel: the host's leading row axes, fused, in blocks
        max[8 rows] = ...              # hosted reductions (vectorized partials, rfactor)
        exp[8 rows, 0:n] = ...         # a hosted intermediate read twice: computed once, vectorized
        sum[8 rows] = ...
        for row in range(8):
            for j.0 in range(n // 16):
                for j.1 in range(16):  # vectorized
                    out[row, j] = exp[row, j] * (1 / sum[row])

The row axes are the host's leading axes at which every hosted reduction is read by an
identical index (softmax over the last axis: all but the last; over axis 1 of NCHW: only N).
Attached at a fused loop of all of them (in blocks of a few rows, whose reductions' dependent
chains then overlap), a thread's rows are independent and their data stays in L1. Without row axes (or with the ``{host}.rows`` decision off) the stages are attached at the
host's outermost loop, which alone is parallel (the rule before rows: for a batch axis of extent
1 that meant one thread and whole-tensor intermediates; why: docs/decisions/026-row-groups.md).
"""
from __future__ import annotations

from tensorir.te import AxisKind
from tensorir.tir.analysis.affine import mentions

from .read_walk import row_block
from .schedule import Schedule
from .state import AttachKind
from .tiling import fuse_loops


# a norm's reductions over the planes of blocked channels run with the rows (channels) as vector lanes; False: one
# scalar chain per row (docs/decisions/105-blocked-row-reductions-on-lanes.md)
ROWS_AS_LANES = True

BLOCK_ELEMENTS = 512
"""Most elements per block of rows of a stage computed per row, at the heuristic start."""


def row_axes(state, host: str, hosted: list) -> int:
    """How many leading axes of ``host`` are row axes of every reduction in ``hosted`` (0: none).

    Readers considered: the host and the hosted elementwise stages of the host's shape; a
    position is a row axis of a reduction when each such reader's reads of it mention the
    reader's variable of that position. The last axis is never one (it is the vector axis).
    """
    h = state.stage(host)
    rank = len(h.spatial_root)
    stages = [state.stage(n) for n in hosted]
    readers = [h] + [st for st in stages if not st.is_reduction and st.shape == h.shape]
    positions = set(range(rank - 1))
    seen = False
    for red in (st for st in stages if st.is_reduction):
        for c in readers:
            own = [c.root_vars[r] for r in c.spatial_root]
            for read in c.reads():
                if read.tensor is not red.tensor:
                    continue
                seen = True
                positions &= {p for p, v in enumerate(own) if any(mentions(i, v) for i in read.indices)}
    if not seen:
        return 0
    m = 0
    while m in positions:
        m += 1
    return m


def schedule_host(space, s: Schedule, src, host: str, hosted: list) -> Schedule:
    """Schedule elementwise output ``host`` and the stages ``hosted`` in it (names, producers first)."""
    m = row_axes(s._state, host, hosted)
    rows = False
    if m >= 1 and len(s.loops(host)) > 1:
        src.hint(f"{host}.rows", True)
        rows = src.choose(f"{host}.rows", [False, True])
    if rows:
        s = space._elementwise(s, src, host, keep_outer=True, parallel=False)
        loops = s.loops(host)[:m]
        # blocks split the innermost row axis before fusing: split after, the rows a block covers
        # would be bounded as a whole range of the axes fused into it
        per_row = not all(s._state.stage(n).is_reduction or _inlined(s, n) for n in hosted)
        block = _row_block(space, s, src, host, loops, per_row)
        if block > 1:
            s = s.split(loops[-1], factor=block)
            loops = loops[:-1] + [s.trace[-1].outputs[0]]
        s, fused = fuse_loops(s, loops)
        if src.choose(f"{host}.parallel", [True, False]):
            s = s.parallel(fused)
        outer = fused
    else:
        s = space._elementwise(s, src, host, keep_outer=True)
        outer = s.loops(host)[0]
    inside = {host}
    for name in reversed(hosted):
        # offered only when every consumer already runs inside the host's loop
        st = s._state.stage(name)
        cons = {c.name for c in s._state.consumers(st)}
        if m == 0 and st.is_reduction:
            # the host's outermost loop runs along the reduced axis (softmax over axis 0, a 1-d
            # row): computed there, the reduction would be recomputed in every iteration
            src.hint(f"{name}.compute_at", False)
        if not (cons <= inside and src.choose(f"{name}.compute_at", [True, False])):
            continue
        f = space._row_rfactor(src, st)
        if f:
            s = s.rfactor(name, f)
            rf = s.trace[-1].outputs[0]
            s = s.compute_at(name, outer).compute_at(rf, outer)
            # (the rf stage's spatial axes end in the partials' lanes; every reduce loop goes around them)
            rst = s._state.stage(rf)
            k_v = f"{rf}.{rst.spatial_root[-1]}"
            s = s.reorder(*[f"{rf}.{n}" for n in rst.root if rst.loops[n].kind is AxisKind.REDUCE], k_v).vectorize(k_v)
            inside.add(rf)
        else:
            s = s.compute_at(name, outer)
            if rows and not st.is_reduction:
                s = _vectorize_last(space, s, src, name)
            elif rows and ROWS_AS_LANES and _rows_contiguous(st):
                # (a norm over the planes of blocked channels: the block's rows are the contiguous axis) the rows
                # are the lanes, the reduce loops around them: a vector of rows' partials, no scalar chain per row
                red = [lp for lp in s.loops(name) if st.loops[lp.split(".", 1)[1]].kind is AxisKind.REDUCE]
                last = [lp for lp in s.loops(name) if lp not in red][-1]
                s = s.reorder(*red, last).vectorize(last)
        inside.add(name)
    return s


def _rows_contiguous(st) -> bool:
    """Whether reduction ``st`` walks the contiguous axis along its innermost row axis (``read_walk.row_block`` of
    the rows' variable: a blocked layout's lanes too) with no reduce variable in that axis: rows can be lanes."""
    v = st.root_vars[st.spatial_root[-1]]
    reduce = [st.root_vars[n] for n in st.root if st.loops[n].kind is AxisKind.REDUCE]
    reads = [r for r in st.reads() if any(mentions(i, v) for i in r.indices)]
    return bool(reads) and row_block(reads, v) is not None and \
        not any(mentions(r.indices[-1], k) for r in reads for k in reduce)


def _inlined(s: Schedule, name: str) -> bool:
    return s._state.stage(name).attach.kind is AttachKind.INLINE


def _row_block(space, s: Schedule, src, host: str, loops: list, per_row: bool) -> int:
    """Rows per iteration of the parallel loop: a decision among the divisors 1-16 of the innermost
    row axis ``loops[-1]``.

    A row's reductions end in a chain of dependent scalar steps (the partials' sum, then the
    next reduction that needs it); a block of rows gives the core independent chains to overlap.
    The heuristic takes 8 rows while that leaves at least two blocks per core and, with an
    elementwise stage computed per row (``per_row``: softmax's ``exp``), at most
    :data:`BLOCK_ELEMENTS` elements of it per block: its small local buffer is walked by unrolled
    loops, and 8 rows of 128 ``exp`` took 0.43 s to compile against 0.23 s for 4 rows, which ran
    as fast (docs/decisions/026-row-groups.md)."""
    rows = 1
    for lp in loops:
        rows *= s.extent(lp)
    row_len = 1
    for lp in s.loops(host)[len(loops):]:
        row_len *= s.extent(lp)
    choices = [b for b in (1, 2, 4, 8, 16) if s.extent(loops[-1]) % b == 0]
    want = 8
    while want > 1 and (rows // want < 2 * space.options.cores or (per_row and want * row_len > BLOCK_ELEMENTS)):
        want //= 2
    src.hint(f"{host}.row_block", want)
    return src.choose(f"{host}.row_block", choices)


def _vectorize_last(space, s: Schedule, src, name: str) -> Schedule:
    """Split the last loop of attached elementwise stage ``name`` by the vector width and vectorize."""
    last = s.loops(name)[-1]
    v = src.choose(f"{name}.vector", space.vector_choices(s.extent(last), s._state.stage(name).dtype))
    if v > 1:
        s = s.split(last, factor=v)
        s = s.vectorize(s.loops(name)[-1])
    return s


def shared_in_row(state, st) -> bool:
    """``st`` (an elementwise intermediate) is read by two or more stages that all end in one
    elementwise output of its shape, directly or through stages of one consumer each (softmax's
    ``exp``, read by the row sum and the output): computing it once per row beats inlining it
    into each reader."""
    cons = state.consumers(st)
    if len(cons) < 2:
        return False
    hosts = set()
    for c in cons:
        while not c.is_output:
            after = state.consumers(c)
            if len(after) != 1:
                return False
            c = after[0]
        if c.is_reduction or c.shape != st.shape:
            return False
        hosts.add(c.name)
    return len(hosts) == 1
