"""Search spaces generated for any workload (Ansor / MetaSchedule style, no template).

A space is a program that builds a ``Schedule`` from *decisions*: every tunable
value is drawn with ``src.choose(name, choices)`` from an ordered list, so the
same code serves Optuna (an integer index per decision), a fixed decision dict
(replay, resume) and random search.  Rules, applied to the stage graph:

R1  inline: an elementwise intermediate may be inlined into its consumers.
R2  attach: an intermediate whose consumers all live in one elementwise output
    (row reductions of softmax / layer_norm, elementwise producers) may be
    computed per row inside that output's parallel row loop (``schedules/rows.py``).
R3  multi-level tiling of each remaining reduction (the "anchor"): spatial
    axes in four levels, reduce axes in two (SSRSRS).  With an elementwise
    epilogue (bias + ReLU) or ``cache_write``, the two outer spatial levels
    belong to the output stage and the anchor is computed per tile, its inner
    tile a register block: an unrolled, vectorized ``S R S`` nest.  Inputs whose
    innermost access follows the vector axis may be packed into panels, and the
    input read by the tile's rows (A of A^T B) into panels of tile rows.  The
    outermost tile loops are fused and parallelized, led by the axis a decision
    picks (which operand block a thread's consecutive tasks share in cache).
R3' an anchor that streams an operand along its innermost reduce axis (matrix-vector products,
    row norms) may instead be ``rfactor``-ed: the partial results along that axis are the vector
    axis of a new anchor, tiled as in R3; the output sums them.
R4  every other root stage: vectorize the last axis, fuse and parallelize the rest; a stage
    whose vector axis strides through an input gets tiles of one cache line of the axis that
    input reads contiguously (``schedules/transpose_tiles.py``).
R0  (before R1) a convolution anchor is tiled on blocked layouts by its own rule instead of R3
    (``schedules/conv_space.py``); its padding stage is left for that rule.  A Winograd convolution's
    products, windows and padding are scheduled per block of tile rows (``schedules/winograd_space.py``).
"""
from __future__ import annotations

import math

from schedules.errors import DecisionError
from schedules.state import AttachKind

from dataclasses import dataclass

from schedules.lowering.checks import MAX_VECTOR_LANES
from tensorir.te import AxisKind
from tensorir.tir.analysis.affine import mentions

from .conv_space import find_convs, tile_conv
from .conv_start import positions_first, vector_registers
from .winograd_space import find_winograd, tile_winograd
from .rows import schedule_host, shared_in_row
from . import elementwise
from .elementwise import schedule_elementwise
from .prefetch import PANEL_DISTANCE, prefetch_decision
from .decisions import DecisionSource, FixedDecisions, MutatedDecisions, OptunaDecisions, RandomDecisions  # noqa: F401
from .schedule import Schedule
from .matmul_start import hint_k_blocks, k_blocks, odd_row_tile, register_tile, row_axis as _row_axis
from .tiling import fuse_parallel as _fuse_parallel, split_all as _split_all
from .read_walk import packable, row_block, whole_block

# Columns of the vector axis one parallel task of a product spans, about (decision 011) ...
TASK_COLUMNS = 256
# ... or, where the row operand (rows x reduction values) fits half an L2 and each task can re-read it
# from there, about FEW_ROWS_TASK_COLUMNS: more tasks, so threads that run at different speeds still
# finish together (decision 053).
FEW_ROWS_OPERAND = 1 << 17
FEW_ROWS_TASK_COLUMNS = 64
# False: the start packs no input whose panel is its own layout (why: docs/decisions/065-no-pack-of-a-whole-panel.md)
PACK_WHOLE_PANELS = False
# a reduction computed per row over several reduce axes (an instance norm over H and W) takes its vector partials
# along the innermost, where its reads are contiguous; False: only single-axis reductions (a scalar chain of H * W
# adds per row; docs/decisions/104-row-reductions-over-several-axes.md)
ROW_RFACTOR_INNERMOST = True
MAX_UNROLLED_BODY = 64   # vector FMAs (tile rows x vectors per row x inner reduce iterations) unrolled


# ----------------------------------------------------------------- the space

@dataclass(frozen=True)
class SpaceOptions:
    """Hardware facts the space is shaped by (defaults: read from the host)."""
    vector_bits: int = 256
    cores: int = 2

    @classmethod
    def host(cls) -> "SpaceOptions":
        from tensorir.target import Target
        t = Target.host()
        return cls(vector_bits=t.vector_bits, cores=t.cores)


def _divisors(n: int, limit: int) -> list:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


class GeneratedSpace:
    """The generated space of a workload: ``apply(src) -> Schedule``."""

    def __init__(self, tensors, options: SpaceOptions | None = None):
        self.tensors = list(tensors)
        self.options = options or SpaceOptions.host()
        self.base = Schedule(self.tensors)

    # --------------------------------------------------------------- helpers
    @property
    def registers(self) -> int:
        """Vector registers of the target (32 with AVX-512, 16 with AVX/AVX2)."""
        return 32 if self.options.vector_bits >= 512 else 16

    def lanes(self, dtype: str) -> int:
        return max(1, self.options.vector_bits // (64 if dtype == "float64" else 32))

    def vector_choices(self, n: int, dtype: str) -> list:
        """Whole multiples of the native vector (odd widths like 28 lanes legalize badly), or
        narrower powers of two; a tail that the width does not divide is guarded (masked)."""
        v = self.lanes(dtype)
        opts = {m * v for m in (1, 2, 3, 4) if m * v <= min(n, MAX_VECTOR_LANES)}
        opts |= {p for p in (1, 2, 4, 8, 16, 32) if p < v and p <= n}
        if n < v:
            opts.add(n)
        return sorted(opts)

    @staticmethod
    def small_choices(n: int, options=(1, 2, 3, 4, 6, 8, 12, 16)) -> list:
        """Register-tile rows; they need not divide ``n`` (6 x 4 vectors fills 32 registers best even
        for 1024 rows): the edge tile is guarded, at the price of a versioned copy (slower compile)."""
        return sorted({c for c in options if c <= n} | {1})

    @staticmethod
    def level_choices(n: int, limit: int = 32) -> list:
        """Tile counts: the divisors of ``n`` up to ``limit`` (7 -> [1, 7]); for a prime, powers of two."""
        divisors = _divisors(n, limit)
        if len(divisors) >= 2 or n == 1:
            return divisors
        return sorted({c for c in (1, 2, 4, 8, 16, 32, 64) if c <= min(n, limit)} | {1})

    # ------------------------------------------------------------------ apply
    def apply(self, src: DecisionSource) -> Schedule:
        """Build the schedule for the decisions ``src`` gives (may raise ScheduleError)."""
        s = self.base
        g = s._state
        # R0: convolutions on blocked layouts (schedules/conv_space.py), or R3's tiling of the nest as it
        # is.  [False, True]: records written before this choice replay as before; the heuristic blocks.
        convs = {}
        for n, c in find_convs(g).items():
            src.hint(f"{n}.blocked", not positions_first(c, self.lanes(g.stage(n).dtype)))
            if src.choose(f"{n}.blocked", [False, True]):
                convs[n] = c
        pads = {c.pad_stage for c in convs.values()}
        # R0': Winograd convolutions (schedules/winograd_space.py): their windows and padding stay stages
        winos = find_winograd(g)
        pads |= {x for w in winos.values() for x in (w.windows, w.pad_stage) if x}
        # R1: inline elementwise intermediates
        for st in list(g.stages):
            if not st.is_output and not st.is_reduction and st.name not in pads:
                if shared_in_row(g, st):
                    src.hint(f"{st.name}.inline", False)
                if src.choose(f"{st.name}.inline", [True, False]):
                    s = s.compute_inline(st.name)
        # classify what is left
        g = s._state
        live = [st for st in g.stages if st.attach.kind is not AttachKind.INLINE]
        epilogue_of = {}   # anchor -> elementwise output that reads it at identical indices
        hosted = {}        # stage -> elementwise output host (R2)
        for st in reversed(live):
            if st.is_output or st.name in winos:
                continue
            cons = g.consumers(st)
            if st.is_reduction and len(cons) == 1 and _is_epilogue(st, cons[0]) \
                    and cons[0].name not in epilogue_of.values():   # (one anchor tiles an epilogue)
                epilogue_of[st.name] = cons[0].name
                continue
            hosts = {hosted.get(c.name, c.name) for c in cons}
            if len(hosts) == 1:
                h = g.stage(next(iter(hosts)))
                if h.is_output and not h.is_reduction and h.name not in epilogue_of.values():
                    hosted[st.name] = h.name
        anchors = [st for st in live if st.is_reduction and st.name not in hosted]
        done = set()
        # R3: multi-level tiling of anchors
        for a in anchors:
            if a.name in winos:
                s, made = tile_winograd(self, s, src, winos[a.name])
                if made:
                    done |= made
                    continue
            if a.name in convs and (epilogue_of.get(a.name) or a.is_output):
                s, made = tile_conv(self, s, src, convs[a.name], epilogue_of.get(a.name))
                done |= made
                continue
            f = self._rfactor(src, a, epilogue_of.get(a.name))
            if f:
                s = s.rfactor(a.name, f)
                rf = s.trace[-1].outputs[0]
                s = self._tile_anchor(s, src, rf, None)
                s = _fuse_parallel(s, s.loops(a.name)[:-1], src, a.name)   # the sum of the partials
                done |= {a.name, rf}
                continue
            s = self._tile_anchor(s, src, a.name, epilogue_of.get(a.name))
            done |= {a.name, epilogue_of.get(a.name), f"{a.name}_local"}
        # R2 hosts, then R4 for every other root stage
        host_names = sorted(set(hosted.values()), key=lambda n: [x.name for x in s._state.stages].index(n))
        for h in host_names:
            order = [x.name for x in s._state.stages]
            s = schedule_host(self, s, src, h, [n for n in order if hosted.get(n) == h])
            done.add(h)
        for st in s._state.stages:
            if st.name in done or st.attach.kind is not AttachKind.ROOT or st.relations or st.ann:
                continue  # handled by a rule already (e.g. a pack stage of an anchor)
            if st.is_reduction:
                continue  # a hosted reduction left at root: default loops
            s = self._elementwise(s, src, st.name, keep_outer=False, transposing=True, partial=elementwise.FUSE_PARTLY)
        return s

    # ---------------------------------------------------------------- rules
    # R4 and the vector loops of other rules' stages (packs, pads, row hosts): schedules/elementwise.py
    _elementwise = schedule_elementwise

    def _tile_anchor(self, s: Schedule, src, name: str, epilogue: str | None) -> Schedule:
        st = s._state.stage(name)
        spatial = [f"{name}.{n}" for n in st.spatial_root]
        reduce = [f"{name}.{n}" for n in st.root if st.loops[n].kind is AxisKind.REDUCE]
        ext = {lp: s.extent(lp) for lp in spatial + reduce}
        vec_axis = spatial[-1]
        row_axis = _row_axis(st, spatial, ext)
        # register tile: the vector axis first, then the others within the register budget
        lanes = self.lanes(st.dtype)
        # heuristic start: why: docs/decisions/010-matmul-register-tile.md, 027, 038, 040
        vectors, rows = register_tile(self.registers, ext[vec_axis], lanes, ext[row_axis] if row_axis else 0)
        src.hint(f"{vec_axis}.t3", vectors * lanes)
        if row_axis:
            src.hint(f"{row_axis}.t3", rows)
            hint_k_blocks(src, self.registers, row_axis, vec_axis, reduce, ext, lanes)
        widths = self.vector_choices(ext[vec_axis], st.dtype)
        block = whole_block(st, vec_axis, ext[vec_axis], lanes)
        if block:
            widths = sorted(set(widths) | {block})
            src.hint(f"{vec_axis}.t3", block)
        t3 = {vec_axis: src.choose(f"{vec_axis}.t3", widths)}
        vectors = max(1, vector_registers(t3[vec_axis], lanes))     # (12 columns of 16 lanes: 8 + 4)
        budget = (self.registers - vectors - 1) // vectors   # accumulators + one row of B + a broadcast
        for lp in reversed(spatial[:-1]):
            rows = self.small_choices(ext[lp]) + odd_row_tile(ext[lp])
            t3[lp] = src.choose(f"{lp}.t3", [c for c in rows if c <= budget] or [1])
            budget = max(1, budget // t3[lp])
        t2 = {lp: src.choose(f"{lp}.t2", self.level_choices(max(1, ext[lp] // t3[lp]))) for lp in spatial}
        # t1 tiles make one parallel task's block (up to 64: a task of 64 register tiles of rows
        # keeps a B panel block in L2 while streaming A rows through it)
        # heuristic start: a task spans ~256 columns of the vector axis (a 1024-deep B block of 1 MiB).
        # Where the tasks can be the parallel loop alone (inputs to pack in them) and such tasks
        # would share the cores unevenly (257 columns in tasks of 256 and 1 leave a core idle:
        # matmul 333x257x511 at 2 threads: 0.62x numpy, 16 columns: 0.93x), the nearest width that
        # shares them evenly.
        # why: docs/decisions/011-matmul-task-shape.md
        # why few-row products take narrower tasks: docs/decisions/053-few-row-products-take-narrow-tasks.md
        n, width = ext[vec_axis], t2[vec_axis] * t3[vec_axis]
        row_operand = math.prod(ext[lp] for lp in spatial[:-1] + reduce)
        target = FEW_ROWS_TASK_COLUMNS if len(spatial) > 1 and row_operand <= FEW_ROWS_OPERAND else TASK_COLUMNS
        widths = [c * width for c in self.level_choices(max(1, n // width), 64)]
        pick = min(widths, key=lambda w: (abs(w - target), w))
        if packable(st, vec_axis.split(".", 1)[1]) and -(-n // pick) >= self.options.cores \
                and self._balance(n, pick) < 0.85:
            even = [w for w in widths if self._balance(n, w) >= 0.85] or \
                [max(widths, key=lambda w: self._balance(n, w))]
            pick = min(even, key=lambda w: (abs(w - target), w))
        src.hint(f"{vec_axis}.t1", pick // width)
        t1 = {lp: src.choose(f"{lp}.t1", self.level_choices(max(1, ext[lp] // (t3[lp] * t2[lp])), 64))
              for lp in spatial}
        r1 = {lp: src.choose(f"{lp}.r1", [1, 2, 4, 8, 16] + k_blocks(ext[lp]) if ext[lp] >= 16
                             else _divisors(ext[lp], 16))
              for lp in reduce}
        body = max(1, -(-t3[vec_axis] // lanes))    # vector instructions per tile row
        for lp in spatial[:-1]:
            body *= t3[lp]
        for lp in reduce:
            body *= r1[lp]
        # packing inputs whose innermost index follows the vector axis
        packs = []
        panels = {}          # pack stage -> the source tensor's name
        transposed = set()   # packs whose panel axis is not the source's contiguous one
        for tensor, dim in packable(st, vec_axis.split(".", 1)[1]):
            tname = s._state.name_of(tensor)
            # a panel as wide as the source's contiguous axis is the source's own layout: the pack
            # would only copy it (a global pool over blocked channels copied 600 KB before reading it)
            whole = dim == tensor.ndim - 1 and tensor.shape[dim] == t3[vec_axis]
            src.hint(f"{name}.pack_{tname}", PACK_WHOLE_PANELS or not whole)
            if t3[vec_axis] > 1 and src.choose(f"{name}.pack_{tname}", [True, False]):
                order = [f"{dim}.o"] + [str(d) for d in range(tensor.ndim) if d != dim] + [f"{dim}.i"]
                s = s.pack(tname, {dim: t3[vec_axis]}, order=order, consumers=[name])
                packs.append(s.trace[-1].outputs[0])
                panels[packs[-1]] = tname
                if dim != tensor.ndim - 1:
                    # Such a pack gathers each vector from as many rows as the panel is wide, 4 KiB
                    # apart for dense's 1024-wide W: 64 rows at once thrash one L1 set, so the panel
                    # is packed one vector's rows at a time.
                    # why: docs/decisions/013-transposing-pack-by-vector-rows.md
                    transposed.add(packs[-1])
        # the operand indexed by the register tile's row axis (A[k, i] of A^T B, A[i, k] of A B) may be
        # packed into panels of the tile's rows, ``A_p[i.o, k, i.i]``: each k step then reads the tile's
        # rows from one cache line, where A[k, i] reads a new line 4 KiB away (same L1 set) per k.
        # Packed at root by a parallel loop of its own.
        # [False, True]: records written before this choice replay as before.
        # why: docs/decisions/014-row-operand-pack.md
        row_packs = []
        if row_axis and t3[row_axis] > 1:
            row = row_axis
            vec_var = st.root_vars[vec_axis.split(".", 1)[1]]
            for tensor, dim in packable(st, row.split(".", 1)[1]):
                tname = s._state.name_of(tensor)
                if any(mentions(i, vec_var) for r in st.reads() if r.tensor is tensor for i in r.indices):
                    continue
                # the heuristic packs when the rows are the source's contiguous axis (A[k, i])
                src.hint(f"{name}.pack_{tname}", dim == tensor.ndim - 1)
                if src.choose(f"{name}.pack_{tname}", [False, True]):
                    order = [f"{dim}.o"] + [str(d) for d in range(tensor.ndim) if d != dim] + [f"{dim}.i"]
                    s = s.pack(tname, {dim: t3[row]}, order=order, consumers=[name])
                    row_packs.append(s.trace[-1].outputs[0])
        for p in row_packs:
            s = self._elementwise(s, src, p, keep_outer=False)
        # where the panels are packed: at root, in a parallel loop of their own, or inside each
        # parallel task (the tasks are then the vector axis's blocks only, the other axes' outer
        # tiles run in the task): each thread packs the block it multiplies, which is then hot
        # in its cache, and the barrier between the two loops goes (matmul 1024 at 2 threads:
        # about 8% faster).  [False, True]: records written before this choice replay as before.
        # why: docs/decisions/012-pack-inside-parallel-tasks.md
        tasks = -(-ext[vec_axis] // (t1[vec_axis] * t2[vec_axis] * t3[vec_axis]))
        in_task = False
        if packs and tasks >= self.options.cores:
            task = t1[vec_axis] * t2[vec_axis] * t3[vec_axis]
            src.hint(f"{name}.pack_in_task", self._balance(ext[vec_axis], task) >= 0.85)
            in_task = src.choose(f"{name}.pack_in_task", [False, True])
        if not in_task:
            for p in packs:
                s = self._elementwise(s, src, p, keep_outer=False, chunks_first=p in transposed)
        outer = epilogue
        if outer is None and st.is_output:
            if src.choose(f"{name}.cache_write", [True, False]):
                s = s.cache_write(name)
                outer, name = name, f"{name}_local"
        # unrolling the inner reduce loops copies the register tile: offered within a code-size budget
        unroll_k = body <= MAX_UNROLLED_BODY and src.choose(f"{name}.unroll_k", [True, False])
        if outer is not None:
            # the outer stage's axes correspond to the anchor's spatial axes one to one
            o_axes = s.axes(outer)
            tiles = [t2[lp] * t3[lp] for lp in spatial]
            s, l0, l1, l2 = self._three_levels(s, o_axes, tiles, [t1[lp] for lp in spatial])
            if len(l1) > 1 and src.choose(f"{outer}.panel_outer", [False, True]):
                s = s.reorder(l1[-1], *l1[:-1])
                l1 = [l1[-1], *l1[:-1]]
            s = s.compute_at(name, l1[-1])
            s = self._pack_in_task(s, src, l0, packs, outer, transposed) if in_task else \
                _fuse_parallel(s, l0, src, outer)
            if s.extent(l2[-1]) <= MAX_VECTOR_LANES and s.extent(l2[-1]) > 1:
                s = s.vectorize(l2[-1])
            a_sp = [f"{name}.{lp.split('.', 1)[1]}" for lp in spatial]
            a_rd = [f"{name}.{lp.split('.', 1)[1]}" for lp in reduce]
            s, sp0, sp1 = _split_all(s, a_sp, [t3[lp] for lp in spatial])
            s, rd0, rd1 = _split_all(s, a_rd, [r1[lp] for lp in reduce])
            s = s.reorder(*rd0, *sp0, *rd1, *sp1)
        else:
            s, sp0, sp1 = _split_all(s, spatial, [t1[lp] * t2[lp] * t3[lp] for lp in spatial])
            s, sp1, sp2 = _split_all(s, sp1, [t2[lp] * t3[lp] for lp in spatial])
            s, sp2, sp3 = _split_all(s, sp2, [t3[lp] for lp in spatial])
            s, rd0, rd1 = _split_all(s, reduce, [r1[lp] for lp in reduce])
            s = s.reorder(*sp0, *sp1, *rd0, *sp2, *rd1, *sp3)
            s = self._pack_in_task(s, src, sp0, packs, name, transposed) if in_task else \
                _fuse_parallel(s, sp0, src, name)
        s = _register_tile(s, name, unroll_k)
        # the packed panel prefetched ahead in the innermost reduction loop, which streams it
        # (cold in a model: the other kernels' weights evicted it); the heuristic prefetches 4 KiB ahead
        # why: docs/decisions/028-prefetch-packed-weights.md
        for p in packs if rd1 else ():
            s = prefetch_decision(src, f"{st.name}.prefetch_{panels[p]}", s, p, rd1[-1], PANEL_DISTANCE)
        return s

    def _balance(self, n: int, width: int) -> float:
        """Share of the busiest core's time that is useful when ``n`` columns are cut into tasks of
        ``width`` columns, dealt to the cores in equal runs (OpenMP's static schedule)."""
        tasks = -(-n // width)
        return n / self.options.cores / (-(-tasks // self.options.cores) * width)

    def _rfactor(self, src, st, epilogue) -> int:
        """Lanes of partial results to factor anchor ``st``'s reduction into (0: none), offered when it
        streams an operand with no reuse along the reduce axis (matrix-vector products, row norms).

        Such an operand is indexed by every spatial axis (no other output element reads it) and
        contiguous along the innermost reduce axis, while no read is contiguous along the vector
        axis: tiling spatial axes then buys nothing and vectorizing the output axis gathers.  The
        partial sums of ``rfactor`` are a vector along the contiguous axis, as -O3 makes them for
        such loops.  Why: docs/decisions/017-streamed-reductions-rfactor.md
        """
        reduce = [n for n in st.root if st.loops[n].kind is AxisKind.REDUCE]
        spatial = [st.root_vars[n] for n in st.spatial_root]
        if epilogue is not None or not reduce or not spatial:
            return 0
        k = st.root_vars[reduce[-1]]
        reads = st.reads()
        streamed = [r for r in reads if r.indices and r.indices[-1] == k
                    and all(any(mentions(i, v) for i in r.indices) for v in spatial)]
        if not streamed or any(r.indices and mentions(r.indices[-1], spatial[-1]) for r in reads):
            return 0
        lanes = self.lanes(st.dtype)
        choices = [0] + [m * lanes for m in (1, 2, 4) if m * lanes <= st.loops[reduce[-1]].extent]
        if len(choices) == 1:
            return 0
        src.hint(f"{st.name}.rfactor", lanes)
        return src.choose(f"{st.name}.rfactor", choices)

    def _row_rfactor(self, src, st) -> int:
        """Lanes of partial results for a reduction computed inside its consumer's row loop (0: none),
        offered when its one reduce axis runs along the contiguous axis of what it reads (softmax's
        row max and row sum, a row's mean or variance).  Left as it is, such a reduction is a scalar
        loop (float reductions are not reassociated, and a scalar ``exp`` per element is slow);
        factored, its partials are vectors along the row.
        Why: docs/decisions/016-row-reductions-rfactor.md"""
        if not st.is_reduction:
            return 0
        reduce = [n for n in st.root if st.loops[n].kind is AxisKind.REDUCE]
        # (several reduce axes, an instance norm's rows and columns: partials along the innermost, where contiguous)
        if not reduce or len(reduce) > 1 and not ROW_RFACTOR_INNERMOST:
            return 0
        k, extent = st.root_vars[reduce[-1]], st.loops[reduce[-1]].extent
        reads = [r for r in st.reads() if any(mentions(i, k) for i in r.indices)]
        block = row_block(reads, k, {st.root_vars[n]: (0, st.loops[n].extent - 1) for n in st.root})
        if not reads or block is None:
            return 0
        lanes = self.lanes(st.dtype)
        # (a blocked layout's rows: partials that divide the block keep each one's lanes in one block)
        choices = [0] + [m * lanes for m in (1, 2, 4) if m * lanes <= extent and (not block or block % (m * lanes) == 0)]
        if len(choices) == 1:
            return 0
        src.hint(f"{st.name}.rfactor", lanes)
        return src.choose(f"{st.name}.rfactor", choices)

    def _pack_in_task(self, s: Schedule, src, loops: list, packs: list, name: str, transposed: set) -> Schedule:
        """The vector axis's outer tile loop (last of ``loops``) first and parallel, the packs computed in it."""
        task = loops[-1]
        if len(loops) > 1:
            s = s.reorder(task, *loops[:-1])
        if src.choose(f"{name}.parallel", [True, False]):
            s = s.parallel(task)
        for p in packs:
            s = self._elementwise(s.compute_at(p, task), src, p, keep_outer=True, parallel=False,
                                  chunks_first=p in transposed)
        return s

    @staticmethod
    def _three_levels(s: Schedule, axes: list, tiles: list, t1: list):
        s, l0, l2 = _split_all(s, axes, tiles)
        s, l0, l1 = _split_all(s, l0, t1)
        s = s.reorder(*l0, *l1, *l2)
        return s, l0, l1, l2

    # ------------------------------------------------------------ defaults
    def default_decisions(self, fixed: dict | None = None) -> dict:
        """A heuristic starting point (enqueued before the search explores); with ``fixed``
        (name -> value), those decisions forced and the rest the heuristic's."""
        src = _Heuristic(self, fixed)
        self.apply(src)
        return dict(src.decisions)


class _Heuristic(DecisionSource):
    """Good-on-average choices: the rules' hints (register tile of 6 rows x 4 vectors with 32
    registers, 6 x 2 with 16; ~256 columns per task), else: no second tile level, 8 tiles per task,
    inner reduction of 2 unrolled, pack, cache_write, parallel, the vector axis's tiles outermost."""

    def __init__(self, space: GeneratedSpace, fixed: dict | None = None):
        super().__init__()
        self.space = space
        self.hints: dict = {}
        self.fixed = dict(fixed or {})

    def hint(self, name, value):
        self.hints[name] = value

    def _pick(self, name, choices):
        if name in self.fixed:
            if self.fixed[name] not in choices:
                raise DecisionError("space", f"decision {name!r} = {self.fixed[name]!r} is not one of its "
                                    f"choices {choices}")
            return self.fixed[name]
        key = name.rsplit(".", 1)[-1]
        if isinstance(self.hints.get(name), bool) and self.hints[name] in choices:
            return self.hints[name]
        if choices == [True, False]:
            return True  # inline, pack, cache_write, parallel, unroll, compute_at: on
        if key == "outer":   # a rule's hint, else the vector axis's tiles outermost (a thread keeps its B panel block)
            return self.hints[name] if self.hints.get(name) in choices else choices[-1]
        if not isinstance(choices[0], int):
            # a named choice: the rule's hint where it offers one (a pool's padding read in place), else the first
            return self.hints[name] if self.hints.get(name) in choices else choices[0]
        lanes = self.space.lanes("float32")
        want = self.hints.get(name, {"t3": 1, "t2": 1, "t1": 8, "r1": 2, "vector": lanes}.get(key.split("_")[0]))
        if want is None:
            return choices[0]
        return min(choices, key=lambda c: (abs(c - want), c))


# -------------------------------------------------------------------- helpers

def _register_tile(s: Schedule, name: str, unroll_k: bool) -> Schedule:
    """Vectorize the innermost loop, unroll the other register-tile loops (and the inner k)."""
    st = s._state.stage(name)
    loops = s.loops(name)
    inner_sp = []
    for lp in reversed(loops):
        if st.loops[lp.split(".", 1)[1]].kind is AxisKind.REDUCE:
            break
        inner_sp.append(lp)
    inner_sp.reverse()
    if inner_sp:
        s = s.vectorize(inner_sp[-1])
        for lp in inner_sp[:-1]:
            s = s.unroll(lp)
    if unroll_k:
        k_inner = [lp for lp in loops[:len(loops) - len(inner_sp)]
                   if st.loops[lp.split(".", 1)[1]].kind is AxisKind.REDUCE]
        n_red = sum(1 for r in st.root if st.loops[r].kind is AxisKind.REDUCE)
        for lp in k_inner[-n_red:]:
            s = s.unroll(lp)
    return s


def _is_epilogue(anchor, consumer) -> bool:
    """``consumer`` is elementwise, has the anchor's shape and reads it at its own indices."""
    if consumer.is_reduction or consumer.shape != anchor.shape:
        return False
    own = tuple(consumer.root_vars[r] for r in consumer.spatial_root)
    reads = [r for r in consumer.reads() if r.tensor is anchor.tensor]
    # an axis of extent 1 may be read at the constant 0 (broadcasting code writes it so)
    unit = [d == 1 for d in anchor.shape]
    return bool(reads) and all(len(r.indices) == len(own) and all(
        i == v or (u and _is_zero(i)) for i, v, u in zip(r.indices, own, unit)) for r in reads)


def _is_zero(e) -> bool:
    from tensorir.te import Const
    return isinstance(e, Const) and e.value == 0


__all__ = ["GeneratedSpace", "SpaceOptions", "DecisionSource", "FixedDecisions", "RandomDecisions",
           "OptunaDecisions"]
