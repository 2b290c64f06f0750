"""The convolution rule of the generated space: blocked layouts and a register tile of output
channels x output width (TVM's NCHW[x]c schedule, oneDNN's nChw16c), from an NCHW tensor expression.

A convolution anchor is a sum of ``D[n, c, p*st + r*dil, q*st + s*dil] * W[k, c, r, s]`` (``D`` the
data or its zero-padding stage, ``W`` the weights) or, depthwise, of ``D[n, c, p.., q..] * W[c, 0, r, s]``.
:func:`find_convs` (``schedules/conv_match.py``) recognizes them from their index expressions (no operator
names), and the built-in blocked forms of a model's activations (``conv2d_nchwc``, grouped, depthwise, pooling),
and :func:`tile_conv` schedules one, every tunable value a decision:

- the data is packed to NCHW[cb]c, ``D_pack[n, c//cb, h, w, c%cb]``; a padding stage is packed and
  then inlined into its pack, so padding and relayout are one pass (no separate padded copy);
- the weights to OIHW[cb]i[kb]o, ``W_pack[k//kb, c//cb, r, s, c%cb, k%kb]`` (depthwise: ``[c//kb, 0, r, s,
  c%kb]``), so the ``kb`` output channels of one tap are one vector load;
- the output is computed per tile into a local buffer (``cache_write``, or the anchor itself under an
  elementwise epilogue: bias, ReLU, a residual add run on the tile while it is in cache): a register
  tile of ``kb`` output channels (the vector lanes) x ``qt`` output columns x ``pt`` rows, each FMA a
  weight vector times a broadcast input element, so strided windows read no element they do not use;
- the reduction over input-channel blocks and the filter window is split around the tile loops in
  an order the space decides (``order``): the channel blocks outside the local tile keep one block's
  weights in L1 while the tile sweeps the row; all inside keeps the accumulators in registers for
  the whole reduction;
- a 1x1 convolution is the same nest without a window: a matrix product on the blocked layout; one
  with a stride packs only the rows and columns it reads (``pack(..., strides=...)``) and runs
  stride 1 on that copy (docs/decisions/034-subsampled-strided-1x1-pack.md);
- pooling may instead run on the NCHW rows without channel blocks (``schedules/pool_rows.py``), and a
  row-major conv with weights on vectors of output columns, rows of output channels
  (``schedules/conv_columns.py``, decision 088);
- a blocked depthwise conv tiles one channel block by a row of at most 8 vectors (:func:`depthwise_tile`),
  each tile a task, its padding copied per task (docs/decisions/037-blocked-depthwise.md and
  049-depthwise-window-unrolls-whole.md).

The heuristic start (the tiles chosen from the shape and the CPU) is in ``schedules/conv_start.py``.
"""
from __future__ import annotations

from schedules.lowering.checks import MAX_VECTOR_LANES
from schedules.lowering.prefetch import LINE_BYTES, MAX_PREFETCHES
from tensorir.te import AxisKind, free_vars
from tensorir.te.expr import itemsize
from tensorir.tir.analysis.affine import coefficient

from .conv_columns import column_widths, columns_first, columns_offered, columns_tile, row_choices
from .conv_match import ConvInfo, find_convs  # noqa: F401  (find_convs: the space finds the anchors here)
from .conv_start import (LOCAL_VALUES, block_choices, block_widths, depthwise_tile, heuristic_tile, lane_choices,
                         local_rows, spare_registers, vector_registers)
from .pool_rows import tile_pool_rows
from .prefetch import PANEL_DISTANCE, prefetch_decision
from .skip import padded_reads, padding_share
from .tiling import fuse_parallel, split_all

MAX_UNROLLED_FMAS = 256   # vector FMAs of the register tile times the unrolled channel block

ORDERS = ("c|rs", "crs|", "|crs", "rsc|")     # reduce loops above | below the local tile's tile loops
DW_ORDERS = ("|rs", "rs|", "r|s")
PAD_ROWS_WEIGHTS = 1 << 18  # weight values up to which a blocked conv pads its data per row task (1 MiB fp32)
QT_CHOICES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 14, 16, 28)   # register-tile columns offered (and the heuristic's)
TILE_TASK_WEIGHTS = 1     # a 1x1's task weights, in LOCAL_VALUES, up to which it keeps the whole reduction in the
#                           register tile, each register tile a task (decision 029); with 32 registers (AVX-512)
TILE_TASK_WEIGHTS_32 = 16  # 512 KiB of a task's weights streamed from L2 per register tile (decision 077)
SMALL_BLOCK_WEIGHTS = 2   # a 1x1's task weights, in LOCAL_VALUES, up to which blocks of under 16 channels keep
#                           the whole reduction in the register tile (1: as wider blocks; decision 061)
CONV_PREFETCH = PANEL_DISTANCE   # bytes ahead the start prefetches a packed weight block (0: none)
AVX2_1X1_NO_PREFETCH = True      # ... but not a 1x1's whose tasks keep the reduction in the tile, with 16 registers
PREFETCH_PER_LINE = True         # ... at the tap loop where a channel's weights are under a line (decision 071)
DEPTHWISE_ROWS = True    # a row-major depthwise conv starts on its NCHW rows where a row fills a vector (083)
RELAYOUT_PADS_AT_ROOT = True   # a blocked depthwise conv relaying row-major data starts with one padded copy
PHASE_COLUMNS = True      # the columns form's stride-2 windows read their data split into column phases (100)
PHASE_MIN_COLUMNS = 5     # ... windows of at least this many columns
SMALL_WINDOW_WEIGHTS = 4096  # a window's task weights up to which its local tile is its register tile (0: none; decision 098)
LOCAL_IS_TILE_WHOLE_REDUCTION = True  # a window's local tile of one register tile: whole reduction inside (082)
PREFETCH_FIRST_TILE = True       # ... by the first register tile of a local tile only (decision 073)
SKIP_MIN_SHARE = 0.05     # share of a window's terms on padding from which the start skips those taps (decision 103)


def _chunks_outside_taps(s, w_pack: str):
    """Make the loop over a weight pack's vector chunks of output channels the task's outermost:
    one chunk's lines of KCRS stay in L1 while its input channels and taps are copied (their
    stride, C*R*S floats, is often a multiple of 2 KiB, so the lines of 64 output channels fall
    in 2 of L1's sets and evict each other)."""
    loops = s.loops(w_pack)
    chunk = f"{w_pack}.d0.i.0"
    rest = [f"{w_pack}.{d}" for d in ("d1.o", "d1.i", "d2", "d3")]
    if chunk in loops and all(lp in loops for lp in rest) and s.extent(chunk) > 1:
        s = s.reorder(chunk, *rest)
    return s


def _prefetch_loop(below: list, lane_bytes: int, tap_lines: int) -> str:
    """The reduction loop whose iterations prefetch the weight stream: the innermost (a block's input
    channels), unless one of its iterations reads less than a cache line of each output-channel block
    (AVX2's blocks of 8 floats: 32 bytes) and a tap loop is around it; there one prefetch per line, not
    two (the unrolled channels' prefetches take load slots the broadcasts need;
    docs/decisions/071-conv-prefetch-once-per-line.md), where one tap's ``tap_lines`` are few enough to
    prefetch (a 1x1 96 -> 24 in blocks of 8 on AVX-512: 3 blocks x 32 channels = 48 lines, past the limit)."""
    if lane_bytes < LINE_BYTES and len(below) >= 2 and PREFETCH_PER_LINE and tap_lines <= MAX_PREFETCHES:
        return below[-2]
    return below[-1]


def _vectorize_copy(s, loop: str, lanes: int):
    """Vectorize the copy-out's last loop; one longer than a vector register group (a stem's row of
    112 columns) is split by the largest divisor up to ``lanes`` first, not left scalar."""
    n = s.extent(loop)
    if n <= 1:
        return s
    if n > MAX_VECTOR_LANES:
        f = max((d for d in range(2, lanes + 1) if n % d == 0), default=1)
        if f == 1:
            return s
        s = s.split(loop, factor=f)
        loop = s.trace[-1].outputs[1]
    return s.vectorize(loop)


def _column_stride(s, info: ConvInfo) -> int:
    """The step between the input columns of consecutive output columns of a conv's data read (1: none)."""
    st = s._state.stage(info.anchor)
    q = st.root_vars[st.spatial_root[3]]
    for r in st.reads():
        if s._state.names.get(id(r.tensor), r.tensor.name) == info.data and len(r.indices) >= 4:
            step = coefficient(r.indices[3], q)
            return step if isinstance(step, int) and step > 1 else 1
    return 1


def _relayout(s, info: ConvInfo) -> bool:
    """Whether a blocked conv's padding stage relays row-major data into blocks: its read of the data does not
    index the data's last axis by the block's lane variable (a blocked input's is)."""
    st = s._state.stage(info.pad_stage)
    lane = st.root_vars[st.spatial_root[-1]]
    return any(r.indices[-1] != lane for r in st.reads())


def _skip_taps(s, src, name: str, local: str, taps: list):
    """Tap loops (serial, of the local stage) that skip the taps whose reads are all padding: a decision where
    the local stage reads a zero padding (its pack); the start skips where at least ``SKIP_MIN_SHARE`` of
    the terms read padding (a dilated window over a small plane: ASPP's rate 18 over 33x33, 60%; a 3x3 at
    7x7, 18%; docs/decisions/103-taps-on-padding-are-skipped.md)."""
    g = s._state
    st = g.stage(local)
    # (the data's padding: a weight pack padded to whole blocks of channels is one too, but no tap reads only its
    # padding, and a model build packs constant weights at build time, where the trace no longer has that stage)
    taps_vars = {st.root_vars[lp.split(".", 1)[1]] for lp in taps if lp.split(".", 1)[1] in st.root_vars}
    pads = [t for t in dict.fromkeys(g.names.get(id(x)) for x in st.read_tensors())
            if any(free_vars(c) & taps_vars for read in padded_reads(g, st, t) or () for c in read)]
    names = {lp: lp.split(".", 1)[1] for lp in taps}
    loops = [lp for lp in taps if names[lp] in st.leaf and s.extent(lp) > 1 and names[lp] not in st.ann]
    if not pads or not loops:
        return s
    share = max(padding_share(g, st, t) for t in pads)
    if share <= 0:
        return s
    src.hint(f"{name}.skip_taps", share >= SKIP_MIN_SHARE)
    if src.choose(f"{name}.skip_taps", [False, True]):
        for lp in loops:
            for t in pads:
                s = s.skip_padding(t, lp)
    return s


# ----------------------------------------------------------------------- rule

def tile_conv(space, s, src, info: ConvInfo, epilogue: str | None):
    """Schedule convolution ``info`` (see the module docstring); returns ``(schedule, stages done)``."""
    name = info.anchor
    if info.weights is None and not info.blocked:
        # pooling reduces nothing across channels: on the NCHW rows, no channel blocks, where a strided
        # window's rows fill at least half a vector (decision 033)
        src.hint(f"{name}.pool_rows", info.stride > 1 and 2 * info.Q >= space.lanes(s._state.stage(name).dtype))
        if src.choose(f"{name}.pool_rows", [False, True]):
            return tile_pool_rows(space, s, src, info, epilogue)
    elif info.depthwise and not info.blocked:
        # a row-major depthwise conv is a weighted pool: on the NCHW rows too (no channel-block relayout of
        # its data and output), its weights broadcast per tap, where an output row fills a vector
        # (docs/decisions/083-row-major-depthwise-convs-run-on-their-rows.md)
        src.hint(f"{name}.pool_rows", DEPTHWISE_ROWS and info.Q >= space.lanes(s._state.stage(name).dtype))
        if src.choose(f"{name}.pool_rows", [False, True]):
            return tile_pool_rows(space, s, src, info, epilogue)
    st = s._state.stage(name)
    lanes = space.lanes(st.dtype)
    kb0, qt0, pt0 = heuristic_tile(info, lanes, space.registers)
    cols = False
    if info.blocked:    # the layout's blocks are given: the tile takes whole blocks of output channels
        per = info.kb
        # (a depthwise conv: one block, its tasks as many as its blocks)
        src.hint(f"{name}.kb", per if info.depthwise and info.weights is not None else min(4, max(1, kb0 // per)) * per)
        kb = src.choose(f"{name}.kb", block_widths(info))
        cb = info.cb
    else:
        # vectors of output columns instead of output channels (schedules/conv_columns.py, decision 088)
        if columns_offered(info):
            src.hint(f"{name}.columns", columns_first(info, lanes, space.registers))
            cols = src.choose(f"{name}.columns", [False, True])
        if cols:
            kb0, qt0, pt0 = columns_tile(info, lanes, space.registers)
        src.hint(f"{name}.kb", kb0)
        kb = src.choose(f"{name}.kb", row_choices(info.K) if cols else lane_choices(info.K, lanes))
        if info.depthwise:
            cb = kb
        else:
            blocks = block_choices(info.C)
            # a block that divides the channels needs no guard in the reduction; near 16 (one cache line)
            src.hint(f"{name}.cb", min(blocks, key=lambda b: (info.C % b != 0, abs(b - 16), b)))
            cb = src.choose(f"{name}.cb", blocks)
    dw_blocked = info.blocked and info.depthwise and info.weights is not None
    if cols:
        # (rows of broadcasts: registers for ``kb`` x ``pt`` accumulator rows and an input vector per row)
        src.hint(f"{name}.qt", qt0)
        qt = src.choose(f"{name}.qt", column_widths(info.Q, lanes))
        m = vector_registers(min(qt, info.Q), lanes)
        budget = max(1, (space.registers - 1) // (m * (kb + 1)))
        src.hint(f"{name}.pt", pt0)
        pt = src.choose(f"{name}.pt", [c for c in space.small_choices(info.P, (1, 2, 3, 4)) if c <= budget] or [1])
    else:
        m = vector_registers(kb, lanes)
        budget = max(1, (space.registers - m - spare_registers(info, space.registers, m)) // m)
        if dw_blocked:
            qt0, pt0 = depthwise_tile(info, lanes), 1
        src.hint(f"{name}.pt", pt0)
        pt = src.choose(f"{name}.pt", [c for c in space.small_choices(info.P, (1, 2, 3, 4)) if c <= budget] or [1])
        src.hint(f"{name}.qt", qt0)
        # the heuristic's width is offered too: a row of 17 or 23 columns is one register tile, where a
        # listed width leaves a guarded edge tile (1x1 200->72 at 17x17: 16 + 1 columns ran at 0.5x of 17)
        qt = src.choose(f"{name}.qt", sorted({c for c in space.small_choices(info.Q, QT_CHOICES) + [qt0]
                                              if c * pt <= budget}) or [1])
    # the local tile: register tiles per output row (the row's reuse of one channel block's weights)
    q_tiles = -(-info.Q // qt)
    task_weights = kb * (1 if info.depthwise else info.lane_group or info.C) * info.R * info.S
    row_local = q_tiles > 1 and q_tiles * qt * pt * kb <= LOCAL_VALUES
    # a 1x1 whose task's weights fit L1 (with 32 registers, L2: decision 077) and whose row has several
    # register tiles keeps its whole reduction in the register tile (below, decision 029), each tile a task
    # (or, in blocks of under 16 channels, within twice that: the other order would pass the accumulators
    # through memory every 8 channels; docs/decisions/061-pointwise-conv-groups-run-their-plane-as-one-row.md)
    tile_tasks_1x1 = not info.depthwise and info.R * info.S == 1 and row_local \
        and task_weights <= LOCAL_VALUES * (SMALL_BLOCK_WEIGHTS if cb < 16 else
                                            TILE_TASK_WEIGHTS_32 if space.registers >= 32 else TILE_TASK_WEIGHTS)
    # a blocked depthwise conv's weights are a few vectors per block (nothing to reuse along a row):
    # the local tile is the register tile (a whole row's ran 1.5x as long, MobileNet-V2's 192@56); so
    # for such a 1x1: a row's local tile reuses no weights and costs a pass of the accumulators
    # through memory (docs/decisions/051-small-1x1-local-tile-is-the-register-tile.md)
    # (and a lane-grouped conv: its whole reduction is inside the register tile, below)
    # (the columns form: its local tile is its register tile, the task's weights reused across tiles from L1)
    # a window over few channels (a stem, a 1-channel input): its task's weights are a few vectors per tap, so a
    # row's local tile reuses little and costs a pass of the accumulators through memory before the epilogue
    # (docs/decisions/098-small-window-local-is-the-register-tile.md)
    small_window = not info.depthwise and info.R * info.S > 1 and task_weights <= SMALL_WINDOW_WEIGHTS
    src.hint(f"{name}.q2", 1 if dw_blocked or tile_tasks_1x1 or info.lane_group or cols or small_window else
             q_tiles if row_local else 1)
    q2 = src.choose(f"{name}.q2", space.level_choices(q_tiles))
    p_tiles = max(1, -(-info.P // pt))
    p_choices = space.level_choices(p_tiles)
    # the task's weights past L1 (a window over many channels): one local tile over more rows reads
    # them fewer times; else (1x1, stems) the reduction per channel block is too short to pay for
    # the accumulators' loads and stores of a local tile too large for the registers' row
    src.hint(f"{name}.p2", 1 if info.R * info.S == 1 or task_weights < LOCAL_VALUES or cols else
             local_rows(p_choices, q2 * qt * pt * kb, -(-info.K // kb) * -(-q_tiles // q2), p_tiles,
                        space.options.cores))
    p2 = src.choose(f"{name}.p2", p_choices)
    src.hint(f"{name}.k2", 1)
    k2 = src.choose(f"{name}.k2", space.level_choices(max(1, -(-info.K // kb)), 8))
    orders = list(DW_ORDERS if info.depthwise else ORDERS)
    # a window whose local tile is one register tile: its channel blocks outside that tile reuse no weights
    # and pass the accumulators through a copy per block and tap row (3x3 160@7: 0.41 ms against 0.24;
    # docs/decisions/082-a-window-whose-local-is-one-tile-keeps-its-reduction-inside.md)
    tile_is_local = LOCAL_IS_TILE_WHOLE_REDUCTION and not info.depthwise and info.R * info.S > 1 \
        and q2 == 1 and p2 == 1 and k2 == 1
    if tile_tasks_1x1 or info.lane_group or tile_is_local:
        # (the first choice is the heuristic start) a lane-grouped conv's reduction is its group's few
        # channels by the window (4 x 3 x 3 for ResNeXt's): inside the register tile, its accumulators stay
        # in registers throughout (0.44 ms against 0.57 for "c|rs", 128@56 in 32 groups; decision 076);
        # a 1x1 whose task's weights fit L1 keeps them there
        # across its tiles anyway: sweeping a local of several register tiles per channel block saves
        # no weight traffic, and the whole reduction inside the register tile saves reloading the
        # accumulators per block (docs/decisions/029)
        orders.insert(0, orders.pop(orders.index("|crs")))
    order = src.choose(f"{name}.order", orders)

    # layouts: data NCHW[cb]c (padding inlined into the pack), weights OIHW[cb]i[kb]o
    packs, w_pack = [], None
    if not info.blocked:
        # a window's FMAs broadcast single input elements, so the data's channel blocks need not be
        # innermost: a stem's few channels (one block) stay rows of columns, a plain padded copy
        # (vector loads and stores) instead of a transposing one
        rows_inner = cols     # (the columns form loads vectors along the rows)
        if not info.depthwise and cb >= info.C and not cols:
            src.hint(f"{name}.data_rows_inner", info.C < 16)
            rows_inner = src.choose(f"{name}.data_rows_inner", [False, True])
        # a strided 1x1 reads every stride-th row and column only: the pack copies just those (a
        # quarter of the data at stride 2), and the convolution runs stride 1 on the copy
        subsample = False
        if info.stride > 1 and info.weights is not None:
            src.hint(f"{name}.data_subsample", True)
            subsample = src.choose(f"{name}.data_subsample", [False, True])
        # the columns form over a strided window: its vectors of output columns read every stride-th input column;
        # the copy splits the columns into phases (w % stride outermost), so that each tap's vector is contiguous
        # (stride 2 only: the copy's reads of every other column are two loads and a shuffle, a wider stride's
        # are gathers, and a 5x5 s4 stem ran 0.9x as fast; windows of 5+ columns only: a 3x3's taps read each
        # copied column about twice, and 3x3 s2 stems ran 0.96x-1.03x; docs/decisions/100-strided-columns-in-phases.md)
        phased = False
        if cols and PHASE_COLUMNS and info.S >= PHASE_MIN_COLUMNS and _column_stride(s, info) == 2:
            src.hint(f"{name}.data_phases", True)
            phased = src.choose(f"{name}.data_phases", [False, True])
        if phased:
            s = s.pack(info.data, {1: cb, 3: 2}, order=["0", "1.o", "1.i", "2", "3.i", "3.o"], consumers=[name])
        else:
            s = s.pack(info.data, {1: cb}, order=["0", "1.o", "1.i", "2", "3"] if rows_inner else
                       ["0", "1.o", "2", "3", "1.i"], consumers=[name],
                       strides={2: info.stride, 3: info.stride} if subsample else None)
        packs.append(s.trace[-1].outputs[0])
        if info.pad_stage is not None:
            s = s.compute_inline(info.pad_stage)
        if info.weights is not None and info.depthwise:
            s = s.pack(info.weights, {0: kb}, order=["0.o", "1", "2", "3", "0.i"], consumers=[name])
            packs.append(s.trace[-1].outputs[0])
        elif info.weights is not None:
            s = s.pack(info.weights, {0: kb, 1: cb}, order=["0.o", "1.o", "2", "3", "1.i", "0.i"],
                       consumers=[name])
            w_pack = s.trace[-1].outputs[0]
            packs.append(w_pack)
            if info.R * info.S > 1:
                # copied in the source's order: a channel's taps (one cache line of KCRS) inside the
                # block's channels; the layout's order re-reads 16 channels' lines per tap for each
                # of kb output channels (64 x 16 x 9 floats: past L1 at 64 lanes)
                s = s.reorder(f"{w_pack}.d1.i", f"{w_pack}.d2", f"{w_pack}.d3")
    # the weights: packed at root, or each parallel task packs the block of output channels it
    # computes (where the weights outweigh the data, e.g. 512 channels at 7x7: 9 MiB of weights per
    # call, packed while hot in the task's cache instead of streamed through memory twice)
    k_tasks = -(-info.K // (k2 * kb))
    w_size = info.K * (1 if info.depthwise else info.C) * info.R * info.S
    in_task = []
    if len(packs) == 2 and k_tasks >= space.options.cores:
        src.hint(f"{name}.pack_in_task", w_size > info.C * (info.P * info.Q))
        if src.choose(f"{name}.pack_in_task", [False, True]):
            in_task.append(packs[1])
    # a depthwise window (or pooling) reads only its own channel block: each task may pack the block
    # of data it reads, which then stays in its cache instead of a round trip through memory
    if info.depthwise and packs and k_tasks >= space.options.cores:
        src.hint(f"{name}.data_in_task", True)
        if src.choose(f"{name}.data_in_task", [False, True]):
            in_task.append(packs[0])
    # a convolution's data may be packed per task of output rows instead (the rows a task reads, hot
    # in its cache; a window's overlap with the next task's rows is packed twice)
    row_tasks = -(-info.P // (p2 * pt))
    at_rows = False
    if packs and not info.depthwise and not in_task and row_tasks >= space.options.cores:
        # the stems' few channels: data as large as the work on it is better packed where it is read
        src.hint(f"{name}.data_at_rows", info.C < 16)
        at_rows = src.choose(f"{name}.data_at_rows", [False, True])
    # a blocked conv's padded copy of its data, likewise per task of output rows (no pass over the whole
    # input before the tasks start; each task's rows hot in its cache when its windows read them)
    pad_rows = False
    if info.blocked and info.weights is not None and not info.depthwise and info.pad_stage is not None \
            and row_tasks >= space.options.cores:
        # the heuristic: where all the conv's weights fit half an L2 (each row task reads every
        # channel block's); why: docs/decisions/039-blocked-conv-pads-per-row-task.md
        src.hint(f"{name}.pad_at_rows", info.K * info.C * info.R * info.S <= PAD_ROWS_WEIGHTS)
        pad_rows = src.choose(f"{name}.pad_at_rows", [False, True])
    for p in packs:
        if p not in in_task and not (at_rows and p == packs[0]):
            s = space._elementwise(s, src, p, keep_outer=False)

    if info.blocked and info.weights is None and info.pad_stage is not None:
        # a pool over blocked data reads each element about once: its padding is a guard on the
        # reads, not a padded copy of the whole input (ResNet-18's 3x3 s2 max pool: 3 MiB copied)
        s = s.compute_inline(info.pad_stage)
    pad_at = None
    if info.blocked and info.weights is not None and info.depthwise and info.pad_stage is not None:
        # a blocked depthwise conv's padding (or the relayout of a row-major input): a padded copy of
        # the rows each task reads, guarded reads on every tap, or one copy of the whole input; a
        # relayout gathers each element across the planes, and per task a 7x7 window's 4 columns gather
        # 7 x 10 of them: one copy of the whole input instead (ConvNeXt's 7x7 96@28: 0.240 -> 0.085 ms)
        src.hint(f"{name}.pad_at", "root" if RELAYOUT_PADS_AT_ROOT and _relayout(s, info) else "task")
        pad_at = src.choose(f"{name}.pad_at", ["task", "inline", "root"])
        if pad_at == "inline":
            s = s.compute_inline(info.pad_stage)
    outer = epilogue
    local = name
    if outer is None:
        s = s.cache_write(name)
        outer, local = name, f"{name}_local"
    # the output stage: tasks of (k, p, q) local tiles, the local computed per task, copied out by rows
    o_axes = s.axes(outer)
    if info.blocked:    # (n, k.o, p, q, k.i): whole blocks of k.o per tile
        tiles = [1, k2 * kb // info.kb, p2 * pt, q2 * qt, info.kb]
    else:
        tiles = [1, k2 * kb, p2 * pt, q2 * qt]
    s, l0, l1 = split_all(s, o_axes, tiles)
    s = s.reorder(*l0, *l1)
    s = s.compute_at(local, l0[-1])
    if at_rows or pad_rows:
        s = s.reorder(l0[2], l0[0], l0[1], *l0[3:])    # the row blocks are the parallel tasks
        if src.choose(f"{outer}.parallel", [True, False]):
            s = s.parallel(l0[2])
        rows = packs[0] if at_rows else info.pad_stage
        s = s.compute_at(rows, l0[2])
        s = space._elementwise(s, src, rows, keep_outer=True, parallel=False)
    elif in_task:
        s = s.reorder(l0[1], l0[0], *l0[2:])    # the output-channel blocks are the parallel tasks
        if src.choose(f"{outer}.parallel", [True, False]):
            s = s.parallel(l0[1])
        for p in in_task:
            s = s.compute_at(p, l0[1])
            s = space._elementwise(s, src, p, keep_outer=True, parallel=False)
            if p == w_pack and info.R * info.S > 1:
                s = _chunks_outside_taps(s, w_pack)
    else:
        if dw_blocked:
            # the channel blocks last, so that the start puts them first (it takes the last axis): a
            # thread's consecutive tasks read the same block's rows (2x as fast as rows first, 192@56)
            l0 = [l0[0], l0[2], l0[3], l0[1], l0[4]]
            s = s.reorder(*l0)
            if s.extent(l0[3]) == 1 and s.extent(l0[1]) > 1:
                # one channel block: rows first, so consecutive tasks walk along a row (the last axis
                # first would walk down the columns; docs/decisions/049-depthwise-window-unrolls-whole.md)
                src.hint(f"{outer}.outer", 1)
        elif tile_tasks_1x1:
            # its tasks are single register tiles: rows first, so consecutive tasks walk along a row
            # with one channel block's weights (the last axis first would walk down the columns)
            src.hint(f"{outer}.outer", 2)
        s = fuse_parallel(s, l0, src, outer)
        if pad_at == "task":
            s = s.compute_at(info.pad_stage, s.loops(outer)[0])
            s = space._elementwise(s, src, info.pad_stage, keep_outer=True, parallel=False)
    s = _vectorize_copy(s, l1[-1], lanes)

    # the local tile: reduce loops around the register tile in the decided order
    lst = s._state.stage(local)
    axes = [f"{local}.{a}" for a in lst.spatial_root]
    reduce = {lst.root_vars[a].name: f"{local}.{a}" for a in lst.root if lst.loops[a].kind is AxisKind.REDUCE}
    if info.blocked:
        n_l, k_l, p_l, q_l, v_l = axes
        s, (k0, p0, q0), (kr, p1, q1) = split_all(s, [k_l, p_l, q_l], [kb // info.kb, pt, qt])
        # the blocks of output channels inside the columns: each broadcast feeds every block at once
        # (blocks outside keep all columns' broadcasts live across them: spills)
        tile = [p1, q1, kr, v_l]
    else:
        n_l, k_l, p_l, q_l = axes
        s, (k0, p0, q0), (k1, p1, q1) = split_all(s, [k_l, p_l, q_l], [kb, pt, qt])
        tile = [k1, p1, q1] if cols else [p1, q1, k1]
    r, s_ = reduce[info.r_var], reduce[info.s_var]
    if info.depthwise:
        above, below = {"|rs": ([], [r, s_]), "rs|": ([r, s_], []), "r|s": ([r], [s_])}[order]
    else:
        if info.blocked:
            c0, c1 = reduce[info.c_var], reduce[info.ci_var]
        else:
            s = s.split(reduce[info.c_var], factor=cb)
            c0, c1 = s.trace[-1].outputs
        above, below = {"c|rs": ([c0], [r, s_, c1]), "crs|": ([c0, r, s_], [c1]),
                        "|crs": ([], [c0, r, s_, c1]), "rsc|": ([r, s_, c0], [c1])}[order]
    s = s.reorder(n_l, *above, k0, p0, q0, *below, *tile)
    s = s.vectorize(tile[-1])
    for lp in tile[:-1]:
        if s.extent(lp) > 1:
            s = s.unroll(lp)
    # the built-in blocked form takes its weights packed already (a model's constants, packed once)
    w_stream = w_pack if w_pack is not None else info.weights if info.blocked else None
    if w_stream is not None and below:
        # the weight block streams through the innermost reduction loop, cold in a model (the other
        # layers' weights evicted it): prefetched ahead as a product's panel is (decision 028; the
        # start's distance: docs/decisions/032-conv-weight-prefetch.md); not a depthwise block's (1-2 KiB)
        # nor, with 16 registers, a 1x1's whose tasks reuse their weights tile after tile (decision 062)
        quiet = dw_blocked or (tile_tasks_1x1 and space.registers < 32 and AVX2_1X1_NO_PREFETCH)
        # the register tiles of a local tile inside a channel block's loop reuse that block's weights:
        # the first streams them (and the next block's, the distance ahead), the rest would prefetch
        # lines in L1 again, taking load slots (docs/decisions/073-conv-prefetch-by-the-first-tile.md)
        # (at a tap loop: a branch in or right around the unrolled channel loop split its FMAs into blocks
        # that spilled, or kept a 1x1's accumulators out of registers: 0.3-0.5x)
        block = info.kb if info.blocked else kb
        tap_lines = kb // block * -(-cb * block * itemsize(st.dtype) // LINE_BYTES)
        loop, first = _prefetch_loop(below, block * itemsize(st.dtype), tap_lines), None
        tiles = [lp for lp in (p0, q0) if s.extent(lp) > 1]
        if PREFETCH_FIRST_TILE and above and tiles and len(below) >= 2 and s.extent(below[-2]) > 1 \
                and tap_lines <= MAX_PREFETCHES:
            loop, first = below[-2], tiles
        s = prefetch_decision(src, f"{name}.prefetch_{info.weights}", s, w_stream, loop,
                              0 if quiet else CONV_PREFETCH, first=first)
    fmas = pt * m * (kb if cols else qt)
    if below:
        last = below[-1]
        if fmas * s.extent(last) <= MAX_UNROLLED_FMAS and s.extent(last) > 1 \
                and src.choose(f"{name}.unroll_inner", [True, False]):
            s = s.unroll(last)
    s = _skip_taps(s, src, name, local, [r, s_])
    done = {name, outer, local, *packs}
    if info.pad_stage is not None and (not info.blocked or info.weights is None or pad_rows
                                       or pad_at in ("task", "inline")):
        done.add(info.pad_stage)
    return s, done
