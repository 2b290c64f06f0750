"""The Winograd rule of the generated space: a F(m x m, 3x3) convolution (``tensorir/ops/winograd.py``)
computed one block of tile rows at a time, every stage of the block in cache.

The workload's stages are the padded data ``D``, the transformed windows ``V``, the products ``M``
((m + 2)^2 matrix products, tiles x C times C x K) and the output ``Y`` (the inverse transform, with any
elementwise epilogue inlined into it).  Computed stage after stage, ``V`` and ``M`` are 4x the data
(3 MiB each for a 64-channel 56x56 layer) and pass through L3; per block of tile rows they stay in
L1/L2 (one row of 28 tiles: 115 KiB), so the schedule is, per task:

- ``D``'s rows the block reads (padding and any relayout, inlined into that copy), then ``V`` of the
  block: the (m + 2)^2 positions of a tile unrolled (each keeps only its taps), channels vectorized;
- ``M`` of the block as register tiles of ``qt`` tiles x ``kv`` output channels (``kv`` a multiple of
  the vector), accumulated over the input channels; ``U``'s rows (C x kv) stream from L2;
- ``Y``'s rows of the block, each m x m output from its tile's products, channels vectorized.

Decisions: ``<M>.kv``, ``<M>.qt`` (the register tile), ``<Y>.rows`` (tile rows per task; more rows
read ``U`` once for more tiles), ``<Y>.kgroups`` (output channels split across tasks, for planes of
few tile rows), ``<Y>.parallel``.  The start fills the vector registers as the
convolution rule's start does (decision 044).
"""
from __future__ import annotations

from dataclasses import dataclass

from tensorir.te import Reduce, TensorRead
from tensorir.te.expr import Binary, BinOp

from .conv_match import matching_stages
from .conv_start import edge_share
from .tiling import fuse_loops, split_all

QT_CHOICES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 14, 16)   # register-tile tiles offered
POSITIONS = {(m + 2) ** 2: m for m in (2, 4)}       # transform positions -> output tile side
ROW_CHOICES = (1, 2, 4, 7)                           # tile rows per task offered


@dataclass(frozen=True)
class WinogradInfo:
    """A recognized F(m x m, 3x3) pipeline: the stage names and the sizes the rule tiles."""
    product: str           # M (N, (m + 2)^2, T, Tq, K): the reduction over input channels
    windows: str           # V (N, (m + 2)^2, T, Tq, C/cb, cb)
    pad_stage: str | None  # D, the padded data V reads (None: a placeholder)
    tiles: int             # T, tile rows
    tiles_q: int           # Tq, tiles per row
    K: int
    C: int
    tile: int = 2          # m, outputs per tile side


def find_winograd(g) -> dict:
    """``{product stage name: WinogradInfo}`` for every Winograd product of stage graph ``g``: a sum over
    two reduce axes of ``V[n, e, ty, tx, co, ci] * U[e, co * cb + ci, k]``, shaped (N, E, T, Tq, K) with E
    (m + 2)^2 for an offered tile m, with ``V`` computed (not a reduction) from one tensor and shaped
    (N, E, T, Tq, C/cb, cb)."""
    return matching_stages(g, _match)


def _match(g, st) -> WinogradInfo | None:
    body = st.body
    if not isinstance(body, Reduce) or body.reducer.value != "sum" or len(st.shape) != 5 \
            or st.shape[1] not in POSITIONS:
        return None
    src = body.source
    if not (isinstance(src, Binary) and src.op is BinOp.MUL and isinstance(src.a, TensorRead)
            and isinstance(src.b, TensorRead)) or len(body.axes) != 2:
        return None
    v, u = g.stage_of(src.a.tensor), src.b.tensor
    n_, e_, t, tq, k_ = st.shape
    if v is None or v.is_reduction or v.is_output or len(v.shape) != 6 or tuple(v.shape[:4]) != (n_, e_, t, tq):
        return None
    if tuple(u.shape) != (e_, v.shape[4] * v.shape[5], k_):
        return None
    feeds = v.read_tensors()
    if len(feeds) != 1:
        return None
    pad = g.stage_of(feeds[0])
    if pad is not None and (pad.is_reduction or pad.is_output or len(g.consumers(pad)) != 1):
        return None
    return WinogradInfo(st.name, v.name, pad.name if pad is not None else None, t, tq, k_, v.shape[4] * v.shape[5],
                        POSITIONS[e_])


def start_tile(tiles_q: int, k: int, lanes: int, registers: int) -> tuple:
    """``(kv, qt)``: accumulators ``qt * kv/lanes`` plus ``kv/lanes`` vectors of ``U`` filling the vector
    registers, the broadcast of ``V`` a memory operand of the FMAs (on AVX-512, 7 x 4 vectors ran
    1.00 ms on ResNet's 64@56 layer, 14 x 2 vectors 1.07 ms, at 1 thread, in runs one after the other:
    within noise, decision 044); ties: more vectors per broadcast.  As in the convolution rule, a
    partial last tile runs guarded code with its accumulators in memory (``edge_share``), and widths
    that divide the output channels come first: on AVX2, 3 vectors x 4 tiles over 256 channels in
    groups of 128 and rows of 7 tiles ran at 8 GFLOP/s, 1 vector x 7 tiles at 65
    (docs/decisions/054-blocked-conv-start-scores-whole-blocks.md)."""
    best, best_score = (lanes, 1), -1.0
    widths = [m for m in (1, 2, 3, 4) if (m - 1) * lanes < k]
    widths = [m for m in widths if k % (m * lanes) == 0] or widths
    for m in widths:
        kv = m * lanes
        for qt in QT_CHOICES:
            if qt > tiles_q or qt * m + m > registers - (0 if registers >= 32 else 1):
                continue
            score = qt * m * edge_share(tiles_q, qt) * edge_share(k, kv) * (1 + 0.01 * m)
            if score > best_score + 1e-9:
                best, best_score = (kv, qt), score
    return best


TASK_TILES = 28            # tiles per task that read U once, where U fits L2
TASK_TILES_BIG_U = 64      # where it does not (U streams from L3)
BIG_U = 1 << 20            # bytes of U past which a task takes more tiles


def start_tasks(n: int, info: WinogradInfo, kblocks: int, kb: int, cores: int, kv: int = 1) -> tuple:
    """``(rows, groups)``: tile rows per task, so that a task multiplies enough tiles by each row of ``U``
    it reads (ResNet's 256@14 at 1 thread: 1.81 ms with one row of 7 tiles per task, 1.07 ms with the
    plane's 49; decision 044), and groups of output channels, so that there are tasks for every core.
    F(4x4, 3x3) keeps 28 tiles per task however large ``U``: each group of output channels transforms the
    task's windows again, and its 36-position transform is costly (128@28, each against F(2x2, 3x3) side by
    side: 0.96x / 1.04x at 1 / 2 threads with 49 tiles in two groups, 1.39x / 1.40x with 28 in one;
    decision 046).  A group's channels are whole register tiles of ``kv``."""
    u_bytes = (info.tile + 2) ** 2 * info.C * info.K * 4
    want = TASK_TILES if u_bytes <= BIG_U or info.tile == 4 else TASK_TILES_BIG_U
    rows = min(info.tiles, -(-want // info.tiles_q))
    tasks = n * -(-info.tiles // rows)
    groups = 1
    for g in (2, 4, 8):
        if tasks * groups >= cores or kblocks % g or (kblocks // g) * kb < max(32, kv) or (kblocks // g) * kb % kv:
            break
        groups = g
    if tasks * groups < cores:       # no channel groups to split: fewer rows per task instead
        rows = -(-info.tiles // -(-cores // (n * groups)))
    return rows, groups


def tile_winograd(space, s, src, info: WinogradInfo):
    """Schedule ``info``'s pipeline (see the module docstring); ``(schedule, stages done)``, or
    ``(s, set())`` when the product's consumer is not the blocked output the rule expects."""
    g = s._state
    cons = g.consumers(g.stage(info.product))
    if len(cons) != 1 or len(cons[0].shape) != 5 or cons[0].relations:
        return s, set()
    out = cons[0].name
    n_, kblocks, p_, q_, kb = cons[0].shape
    m = info.tile
    if -(-p_ // m) != info.tiles or -(-q_ // m) != info.tiles_q:
        return s, set()
    dtype = cons[0].dtype
    lanes, regs = space.lanes(dtype), space.registers
    kv0, qt0 = start_tile(info.tiles_q, info.K, lanes, regs)
    kvs = sorted({m * lanes for m in (1, 2, 3, 4) if (m - 1) * lanes < info.K} | {kv0})
    src.hint(f"{info.product}.kv", kv0)
    kv = src.choose(f"{info.product}.kv", kvs)
    src.hint(f"{info.product}.qt", qt0)
    qt = src.choose(f"{info.product}.qt", sorted({q for q in QT_CHOICES if q <= info.tiles_q} | {qt0}))
    rows0, groups0 = start_tasks(n_, info, kblocks, kb, space.options.cores, kv)
    src.hint(f"{out}.rows", rows0)
    rows = src.choose(f"{out}.rows", sorted({r for r in ROW_CHOICES if r <= info.tiles} | {1, info.tiles, rows0}))
    src.hint(f"{out}.kgroups", groups0)
    groups = src.choose(f"{out}.kgroups", [g for g in (1, 2, 4, 8) if kblocks % g == 0])

    # the output: tasks of ``rows`` tile rows x a group of output-channel blocks; inside, each m x m
    # output unrolled, channels vectorized
    n_l, k_l, p_l, q_l, v_l = s.loops(out)
    s, (p0, q0), (p1, q1) = split_all(s, [p_l, q_l], [m, m])
    s, (pr, kg), (pw, kw) = split_all(s, [p0, k_l], [rows, kblocks // groups])
    s = s.reorder(n_l, pr, kg, kw, pw, q0, p1, q1, v_l)
    s, task = fuse_loops(s, [n_l, pr, kg])
    if src.choose(f"{out}.parallel", [True, False]):
        s = s.parallel(task)
    s = s.unroll(p1).unroll(q1).vectorize(v_l)

    # the products of the task's tiles: register tiles of qt tiles x kv channels over all input channels
    s = s.compute_at(info.product, task)
    m_n, m_e, m_ty, m_tx, m_k, m_co, m_ci = s.loops(info.product)
    s, (tx0, k0), (tx1, k1) = split_all(s, [m_tx, m_k], [qt, kv])
    s = s.reorder(m_n, m_e, m_ty, tx0, k0, m_co, m_ci, tx1, k1)
    if s.extent(tx1) > 1:
        s = s.unroll(tx1)
    s = s.vectorize(k1)

    # the transformed windows of the task's tiles: a tile's positions unrolled, channels vectorized
    s = s.compute_at(info.windows, task)
    v_n, v_e, v_ty, v_tx, v_co, v_ci = s.loops(info.windows)
    s = s.reorder(v_n, v_ty, v_tx, v_co, v_e, v_ci).unroll(v_e).vectorize(v_ci)
    done = {out, info.product, info.windows}
    if info.pad_stage is not None:
        s = s.compute_at(info.pad_stage, task)
        s = s.vectorize(s.loops(info.pad_stage)[-1])
        done.add(info.pad_stage)
    return s, done
