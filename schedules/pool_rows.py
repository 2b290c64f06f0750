"""Pooling (and row-major depthwise convs) on the NCHW rows themselves: vectors along the output columns,
no channel blocks.

A pooling window (``Y[n, c, p, q] = max or sum over (r, s) of D[n, c, p*st + r, q*st + s]``, recognized
by :func:`schedules.conv_space.find_convs`) reduces nothing across channels, so it needs no
channel-innermost layout: every output row is a max (sum) of ``R*S`` shifted input rows, one vector
operation per tap and vector of columns.  At stride 2 a tap's input vector is every other element of
the row, which code generation loads as two contiguous vectors and one shuffle (not a gather).

- The padding (a pooling pad stage) is packed as a plain padded copy of the rows a task reads (vector
  loads and stores, the padding inlined into it), computed inside the task, so it is hot when read; with
  16 vector registers (AVX2) the start reads it in place instead (masked loads on every tap: decision 063);
  without padding the rows are read where they are.
- The tasks are output rows of one channel (``pt`` rows, fused with the channels and the batch into
  one parallel loop); the output tile is a local buffer of ``pt`` rows x ``qt`` columns whose taps
  are unrolled around the vector of columns, so the accumulators stay in registers.

The channel-blocked form (decision 023) packed the data channel-innermost with a gather of 16 planes
per vector and copied the output back with another; docs/decisions/033-pool-rows.md has the figures.
A depthwise conv on row-major data is the same nest with one weight per channel and tap, broadcast
(docs/decisions/083-row-major-depthwise-convs-run-on-their-rows.md).
"""
from __future__ import annotations

from .tiling import fuse_loops, split_all

MAX_ROW_VECTORS = 4      # vectors of columns per register tile (accumulators of one row)
TASK_VALUES = 512        # output values per task the start aims at (ResNet's pool: 8 rows of 56)
# with 16 registers, the start reads a pool's padding in place rather than copying the task's rows: the copy
# ran 2.9-4.6x slower on Zen 3 (docs/decisions/063-avx2-pool-padding-read-in-place.md); False: as with 32
AVX2_PAD_INLINE = True


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def column_choices(Q: int, lanes: int) -> list:
    """Columns per register tile: whole vectors up to ``MAX_ROW_VECTORS``, the row itself when it fits,
    and the row's divisors that fill at least one vector (no guarded edge)."""
    cap = MAX_ROW_VECTORS * lanes
    opts = {m * lanes for m in range(1, MAX_ROW_VECTORS + 1) if m * lanes <= Q}
    opts |= {d for d in _divisors(Q) if lanes <= d <= cap}
    if Q <= cap:
        opts.add(Q)
    return sorted(opts) or [Q]


def heuristic_columns(Q: int, lanes: int) -> int:
    """The widest divisor of the row within the register tile (the whole row up to 64 columns)."""
    cap = MAX_ROW_VECTORS * lanes
    fits = [d for d in _divisors(Q) if d <= cap]
    best = max(fits)
    return best if best >= min(Q, lanes) else min(Q, cap)


def tile_pool_rows(space, s, src, info, epilogue: str | None):
    """Schedule pooling or a depthwise conv ``info`` (a ``ConvInfo``) on NCHW rows; ``(schedule, stages done)``."""
    name = info.anchor
    lanes = space.lanes(s._state.stage(name).dtype)
    P, Q = info.P, info.Q
    src.hint(f"{name}.row_qt", heuristic_columns(Q, lanes))
    qt = src.choose(f"{name}.row_qt", column_choices(Q, lanes))
    p_opts = _divisors(P)
    # rows per task: the most within TASK_VALUES (smaller tasks measured 6-20% faster on ResNet's pool than
    # 28 rows: docs/decisions/033), at least 2 where the rows allow (a padded task copies R - stride rows twice)
    fits = [d for d in p_opts if d * Q <= TASK_VALUES]
    src.hint(f"{name}.row_pt", max(fits) if fits and max(fits) > 1 else min([d for d in p_opts if d > 1] or [1]))
    pt = src.choose(f"{name}.row_pt", p_opts)

    pack, pad_at = None, None
    if info.pad_stage is not None:
        # the padding read in place (its test on every tap, masked loads), or copied as padded rows
        src.hint(f"{name}.pad_at", "inline" if AVX2_PAD_INLINE and space.registers < 32 else "task")
        pad_at = src.choose(f"{name}.pad_at", ["task", "row", "inline", "root"])
        if pad_at != "inline":
            s = s.pack(info.data, {}, order=["0", "1", "2", "3"], consumers=[name])
            pack = s.trace[-1].outputs[0]
        s = s.compute_inline(info.pad_stage)

    outer, local = epilogue, name
    if outer is None:
        s = s.cache_write(name)
        outer, local = name, f"{name}_local"
    # tasks: (n, c, p.0), each one channel's pt output rows; the local tile is those rows' output
    s, l0, l1 = split_all(s, s.axes(outer), [1, 1, pt, Q])
    s = s.reorder(*l0, *l1)
    s = s.compute_at(local, l0[-1])
    s, task = fuse_loops(s, l0)
    if src.choose(f"{outer}.parallel", [True, False]):
        s = s.parallel(task)
    s = _vectorize_row(s, l1[-1], lanes)

    # the local: rows, then register tiles of qt columns with the taps unrolled around them
    lst = s._state.stage(local)
    n_l, c_l, p_l, q_l = (f"{local}.{a}" for a in lst.spatial_root)
    r, s_ = (f"{local}.{a}" for a in lst.root if a not in lst.spatial_root)
    s = s.split(q_l, factor=qt)
    q0, q1 = s.trace[-1].outputs
    s = s.reorder(n_l, c_l, p_l, q0, r, s_, q1)
    s = _vectorize_row(s, q1, lanes)
    if pack is not None:
        where = pad_at
        if where == "root":
            s = space._elementwise(s, src, pack, keep_outer=False)
        else:
            # copied where it is read: per task (its padded rows), or per window row (one padded input
            # row per tap row, re-copied for each output row that reads it: the loop over the window's
            # rows then indexes no stack buffer, so the lowering keeps the row's accumulators in registers)
            s = s.compute_at(pack, task if where == "task" else r)
            s = space._elementwise(s, src, pack, keep_outer=True, parallel=False)
    # the taps of a window row unrolled; the loop over its rows stays a loop, so the lowering keeps
    # the tile's accumulators in registers across it (promote)
    if s.extent(s_) > 1 and src.choose(f"{name}.unroll_taps", [True, False]):
        s = s.unroll(s_)
    done = {name, outer, local}
    if info.pad_stage is not None:
        done.add(info.pad_stage)
    if pack is not None:
        done.add(pack)
    return s, done


def _vectorize_row(s, loop: str, lanes: int):
    """Vectorize a row loop; one longer than ``MAX_ROW_VECTORS`` vectors is split into such pieces."""
    n = s.extent(loop)
    if n > MAX_ROW_VECTORS * lanes:
        s = s.split(loop, factor=MAX_ROW_VECTORS * lanes)
        loop = s.trace[-1].outputs[1]
    return s.vectorize(loop)
