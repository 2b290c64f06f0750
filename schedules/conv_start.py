"""The convolution rule's heuristic start: the register tile, the depthwise tile and the local tile's
rows chosen from the shape and the CPU (vector lanes, registers, cores), so that trial 1 is already good.

The start fills the vector registers (accumulators + weight vectors + one broadcast) with
the tile that wastes least on the edges of this shape, and where a task's weights pass L1 grows the
local tile over more output rows (the whole plane of a 7x7 or 14x14 layer), so each channel block's
weights are read once per local tile instead of once per row; a 1x1 whose task's weights fit L1
keeps its whole reduction inside the register tile.  Why these defaults:
docs/decisions/023-convolution-rule.md and 029-conv-start-odd-widths-and-small-1x1.md
"""
from __future__ import annotations

from schedules.lowering.checks import MAX_VECTOR_LANES
from tensorir.tir.transform.promote import REGISTER_TILE_UNROLL
from tensorir.tir.transform.vector_chunks import vector_chunks

from .conv_match import ConvInfo

# a vector of output channels takes as many registers as lowering cuts it into pieces (12 of 16 lanes: 8 + 4);
# False: one per ``lanes`` (docs/decisions/085-a-partial-vector-is-its-pieces.md)
COUNT_PIECES = True
LOCAL_VALUES = 8192       # accumulators of one local tile (32 KiB of fp32, in L1 beside a weight block)
TASK_BALANCE = 0.85       # least share of the cores' time a local tile's task count keeps busy


def vector_registers(kb: int, lanes: int) -> int:
    """Registers a vector of ``kb`` output channels takes: the pieces lowering cuts it into
    (:func:`tensorir.tir.transform.vector_chunks.vector_chunks`), more than ``kb / lanes`` rounded up
    where the last vector's lanes are not a power of two."""
    if not COUNT_PIECES:
        return -(-kb // lanes)
    # (a power of two wider than the lanes stays one chunk, of several registers)
    return sum(-(-n // lanes) for _, n in vector_chunks(kb, lanes))


def lane_choices(K: int, lanes: int) -> list:
    """Output channels per register tile: 1-4 vectors (not past the channels by a whole vector),
    narrower powers of two when there are fewer channels than lanes."""
    opts = {m * lanes for m in (1, 2, 3, 4) if (m - 1) * lanes < K and m * lanes <= MAX_VECTOR_LANES}
    if K < lanes:
        opts = {p for p in (4, 8) if p < lanes and p < 2 * K} | {lanes}
    return sorted(opts)


def block_widths(info: ConvInfo) -> list:
    """Output channels per register tile of a blocked form: 1-4 whole blocks (not past the channels
    by a whole block, nor past ``MAX_VECTOR_LANES`` unless one block is); a grouped conv's one block."""
    per = info.kb
    if info.grouped:
        return [per]
    return [b * per for b in (1, 2, 3, 4) if b * per <= max(per, MAX_VECTOR_LANES) and (b - 1) * per < info.K]


def block_choices(C: int) -> list:
    """Input channels per block: the powers of two from 4 to 64 below ``C``, and ``C`` itself up to 64."""
    return sorted({b for b in (4, 8, 16, 32, 64) if b < C} | ({C} if C <= 64 else set()))


def spare_registers(info: ConvInfo, registers: int, vectors: int) -> int:
    """Registers a tile needs besides its accumulators and weight vectors: the broadcast input, in a
    register unless one FMA alone reads it (one weight vector) with AVX-512's broadcast memory
    operand (32 registers); a depthwise window's input vector always, and a lane-grouped conv's
    shuffled input vector."""
    return 0 if not info.depthwise and not info.lane_group and registers >= 32 and vectors == 1 else 1


def live_inputs(info: ConvInfo) -> int:
    """Vectors a register tile keeps per accumulator: 1; a lane-grouped conv 2, each column's input
    vector loaded once and shuffled for each of its group's channels (docs/decisions/076)."""
    return 2 if info.lane_group else 1


GUARDED_COST = 4.0   # a guarded edge tile's time per useful FMA, in full tiles' (memory accumulators)
# ... but with 16 registers an edge in the rows or the columns alone runs as a smaller register tile (decision
# 058): about a full tile's time, its few accumulators latency-bound (docs/decisions/072-avx2-pinned-edges-cost-a-full-tile.md)
PINNED_EDGE_COST = 1.0
# ... and so does the last task of a blocked conv whose tile's blocks do not divide the channels' (decision 074)
AVX2_RAGGED_BLOCKS = True


def edge_share(n: int, t: int, cost: float | None = None) -> float:
    """Useful share of the time over ``n`` in tiles of ``t``: the edge tile runs guarded code at
    ``cost`` (default ``GUARDED_COST``) times a full tile's time (a single tile wider than ``n`` is
    clipped to it instead: its waste is the lanes past ``n``)."""
    if n < t:
        return n / t
    full, rest = divmod(n, t)
    return n / (full * t + ((GUARDED_COST if cost is None else cost) * t if rest else 0))


# One-vector tiles with 16 registers (AVX2): the vector loads, broadcasts included, a core feeds its FMAs
# per cycle, and the FMAs it keeps in flight (latency 4 x 2 pipes); 0: scored by their accumulators,
# as every tile is (why: docs/decisions/060-avx2-one-vector-conv-tiles-are-load-bound.md)
AVX2_LOAD_RATE = 1.5
AVX2_IN_FLIGHT = 8


def fma_rate(acc: int, vectors: int, registers: int) -> float:
    """A register tile's score before its edges: its accumulators; but with 16 registers a one-vector
    tile's FMA rate (x ``AVX2_IN_FLIGHT``), bounded by latency and by its loads: each reduction step
    loads a weight vector and a broadcast per FMA, so however wide, it feeds its FMAs at about
    ``AVX2_LOAD_RATE / 2`` of their peak (3x3 64@56 on Zen 3: 14 columns x 1 vector ran at 0.73-0.88x
    of 4 columns x 2 vectors, 8 accumulators). Wider tiles load less per FMA the more accumulators
    they have (12 of 2 vectors ran 1.06-1.2x of 8), so their accumulators stay their score."""
    if registers >= 32 or vectors > 1 or not AVX2_LOAD_RATE:
        return float(acc)
    loads_per_fma = 1 + 1 / acc
    return min(acc, AVX2_IN_FLIGHT) * min(1.0, AVX2_LOAD_RATE / 2 / loads_per_fma)


def heuristic_tile(info: ConvInfo, lanes: int, registers: int) -> tuple:
    """``(kb, qt, pt)``: the register tile that best fills ``registers`` vector registers.

    Accumulators ``pt * qt * kb/lanes`` plus ``kb/lanes`` weight vectors must fit, and a register
    for the broadcast input (see :func:`spare_registers`).  Among those, the tile with the most
    useful FMAs per register (with 16 registers, at the highest FMA rate: :func:`fma_rate`): a
    tile that does not divide ``K``, or both ``P`` and ``Q``, runs its edges in
    guarded code without register accumulators, ``GUARDED_COST`` times slower (ResNet 512@7: 2
    vectors x 7 columns x 2 rows, whose last row is such an edge, ran at 0.6x of 2 x 7 x 1, before
    decision 058); with 16 registers, one that divides one of ``P`` and ``Q`` runs its edge as a smaller
    register tile, ``PINNED_EDGE_COST``.
    """
    best, best_score = (lanes, 1, 1), -1.0
    # (not a 1x1's: its tiles of 3 blocks ran 0.81-0.97x of 2 on most, where they keep the reduction in the tile)
    ragged_pinned = info.blocked and not info.depthwise and registers < 32 and AVX2_RAGGED_BLOCKS \
        and info.R * info.S > 1
    # a depthwise window reuses no weight vector across channels: one vector per tile, more tasks
    widths = lane_choices(info.K, lanes)[:1] if info.depthwise else lane_choices(info.K, lanes)
    if info.blocked and not info.depthwise:
        # whole blocks, as the space offers them: a narrower tile scored here and rounded up to a
        # block afterwards kept too few registers per vector (AVX2's 8 lanes in blocks of 16: 7
        # columns of 1 vector became 6 columns of 2 and a guarded edge column pair;
        # docs/decisions/054-blocked-conv-start-scores-whole-blocks.md) ...
        widths = block_widths(info)
        # ... and no tile of whole blocks that leaves fewer blocks to the last tile, which runs the wide
        # tile's code guarded: docs/decisions/048-conv-tiles-share-out-the-channel-blocks.md; but with 16
        # registers that last task runs as a smaller register tile, and a window's 3 blocks x 4 columns keep
        # 12 accumulators where 2 x 4 keep 8 (docs/decisions/074-avx2-conv-tiles-of-3-blocks.md)
        if not ragged_pinned:
            widths = [kb for kb in widths if info.K % kb == 0 and kb % lanes == 0] or widths
    elif registers < 32 and AVX2_LOAD_RATE and any(info.K % kb == 0 for kb in widths if kb > lanes):
        # one-vector tiles rate low with 16 registers (:func:`fma_rate`); of the wider, those that divide
        # the channels: 3 vectors over 256 channels left a ragged tile of 2 (0.76-0.96x of 2 x 2 x 2)
        widths = [kb for kb in widths if info.K % kb == 0]
    for kb in widths:
        m = vector_registers(kb, lanes)
        for pt in (1, 2, 3, 4):
            if pt > info.P:
                continue
            for qt in range(1, min(info.Q, 32) + 1):
                acc = pt * qt * m
                if acc * live_inputs(info) + m + spare_registers(info, registers, m) > registers:
                    continue
                # an edge in the rows or the columns alone is pinned to a smaller register tile (decision
                # 058); edges in both leave guarded tiles (measured with 16 registers only: decision 072)
                both = info.Q > qt and info.Q % qt and info.P > pt and info.P % pt
                cost = GUARDED_COST if both or info.depthwise or registers >= 32 else PINNED_EDGE_COST
                use_k = edge_share(info.K, kb, PINNED_EDGE_COST if ragged_pinned else None)
                use_q, use_p = edge_share(info.Q, qt, cost), edge_share(info.P, pt, cost)
                # ties: more weight vectors per broadcast (14 x 2 vectors loads 16 per 28 FMAs, 28 x 1 loads 29)
                score = fma_rate(acc, m, registers) * use_k * use_q * use_p * (kb / (m * lanes)) * (1 + 0.01 * min(m, 2))
                if score > best_score + 1e-9:
                    best, best_score = (kb, qt, pt), score
    return best


DW_ACCUMULATORS = 8   # a blocked depthwise conv's register tile, in vectors
DW_UNROLLED_LEAST = 6  # vectors a tile keeps when narrowed so its whole window unrolls (below: not narrowed)
# columns a tile keeps at least, however many pieces its block takes: each tile copies its padded window, and a
# block of 40 channels (16 + 16 + 8) in tiles of 2 columns copied 5 x 6 window columns for 2 outputs; 0: the tile
# is bounded by DW_ACCUMULATORS alone (docs/decisions/093-depthwise-tiles-keep-four-columns.md)
DW_LEAST_COLUMNS = 4


def depthwise_tile(info: ConvInfo, lanes: int) -> int:
    """Output columns of a blocked depthwise conv's register tile (one row, the channel block): the
    widest of at most ``DW_ACCUMULATORS`` vectors that wastes least on the row's edge.  Each FMA
    loads its own input vector (no broadcast to share), so a wide tile saves nothing but spills:
    MobileNet-V2's 192@56 ran 0.30 ms at 4 columns of 2 vectors, 0.31 at 7, 0.41 at 14.

    The widths are kept to those whose whole window unrolls (``REGISTER_TILE_UNROLL`` statements,
    one per column and tap) where that leaves ``DW_UNROLLED_LEAST`` vectors: a 3x3 window over 8
    columns (72 taps) keeps its rows rolled and the task's padded tile on the stack, and ran at half
    the speed of 7 columns (63 taps, all in registers); a 5x5 window unrolls only at 2 columns, too
    few chains to hide the FMA latency (docs/decisions/049-depthwise-window-unrolls-whole.md).  A block of 3 or
    more vector pieces still takes ``DW_LEAST_COLUMNS`` columns (decision 093)."""
    m = vector_registers(info.kb, lanes)
    widths = range(1, max(1, DW_ACCUMULATORS // m, DW_LEAST_COLUMNS) + 1)
    unrolled = [qt for qt in widths if qt * info.R * info.S <= REGISTER_TILE_UNROLL]
    if unrolled and unrolled[-1] * m >= DW_UNROLLED_LEAST and unrolled[-1] >= min(DW_LEAST_COLUMNS, widths[-1]):
        widths = unrolled
    return max(widths, key=lambda qt: (round(qt * edge_share(info.Q, qt), 9), -qt))


def local_rows(choices: list, row_values: int, other_tasks: int, p_tiles: int, cores: int) -> int:
    """Row tiles per local tile: the most that keep its accumulators within ``LOCAL_VALUES`` and
    leave at least ``cores`` parallel tasks (``other_tasks`` of them from the channel and column
    tiles).  Every channel block's weights are read once per local tile, so a local tile over the
    whole output plane of a small-spatial, many-channel layer (ResNet's 512 x 512 x 3 x 3 at 7x7:
    9 MiB of weights for 49 positions) reads them once instead of once per row.  Among those, the
    most whose tasks share out evenly over the cores (``TASK_BALANCE``): 3 tasks on 2 cores keep one
    core idle a third of the time (a 5x5 conv of 32 channels at 24x24 ran at 56% of the peak)."""
    ok = [c for c in choices if c * row_values <= LOCAL_VALUES and other_tasks * -(-p_tiles // c) >= cores]

    def balance(c: int) -> float:
        tasks = other_tasks * -(-p_tiles // c)
        return tasks / (cores * -(-tasks // cores))
    return max([c for c in ok if balance(c) >= TASK_BALANCE] or ok, default=1)


# A row-major 1x1 conv on its plane as one row starts as a matrix product over its positions (R3, the
# positions the vector axis) unless its positions fill their vectors worse than its output channels fill
# theirs by more than this (-1: always blocked, 1: always positions); why:
# docs/decisions/081-row-major-pointwise-convs-are-products-over-positions.md
POSITIONS_FILL_MARGIN = 0.0


def positions_first(c: ConvInfo, lanes: int) -> bool:
    """Whether conv ``c`` starts as a matrix product over its output positions (the generated space's R3, not
    the convolution rule): a row-major 1x1 stride-1 conv on its plane as one row (graph/lower/flat.py) whose
    positions fill their vectors about as well as its output channels would (:data:`POSITIONS_FILL_MARGIN`)."""
    if c.blocked or c.depthwise or c.weights is None or c.R * c.S != 1 or c.stride != 1 or c.P != 1:
        return False

    def fill(n):
        return n / (-(-n // lanes) * lanes)
    return fill(c.Q) >= fill(c.K) - POSITIONS_FILL_MARGIN
