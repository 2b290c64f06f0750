"""The heuristic start of a product's register tile and reduction blocks (the generated space's
first trial for matmul-like anchors, :meth:`schedules.space.GeneratedSpace._tile_anchor`).

Constants are module attributes so benchmarks can time the start without a rule
(``benchmarks/bench_small_rows.py``).
"""
from __future__ import annotations

import math

from tensorir.tir.analysis.affine import mentions

K_BLOCK = 128            # reduction block of a few-row product (why: docs/decisions/027-small-row-products-block-the-reduction.md)
K_BLOCK_MAX_ROWS = 128   # ... for products with at most this many rows
K_BLOCK_ROWS = 32        # ... in local blocks of this many rows
K_BLOCK_MIN_DEPTH = 1024  # ... and a reduction at least this long
# ... with register tiles of (rows, vectors), the first whose rows divide the product's, 32 registers
# (why: docs/decisions/038-few-row-products-8x3-tile.md)
FEW_ROW_TILES = ((6, 4), (8, 3), (4, 4), (3, 4), (2, 4))
# ... and with 16 registers (AVX2): 4 x 3 fills them (why: docs/decisions/064-avx2-few-row-products-4x3-tile.md)
FEW_ROW_TILES_16 = ((6, 2), (4, 3), (4, 2), (8, 2), (3, 2), (2, 2))
# (vectors, rows) of other products' register tile with 16 registers (why: docs/decisions/010-matmul-register-tile.md)
TILE_16 = (2, 6)
# products with fewer vectors of columns than this start with 3 x 8 or 2 x 12 tiles where 4-vector ones would
# leave a ragged column tile (why: docs/decisions/040-matmul-tile-fits-the-columns.md)
NARROW_VECTORS = 16


ROW_TILES = (3, 4, 6, 8, 12, 16)   # the register-tile rows the space offers besides 1 and 2
# False: the start before decision 043 (benchmarks/bench_small_rows.py --ab-dividing)
DIVIDING_TILES = True


def odd_row_tile(rows: int) -> list:
    """``[d]``: the largest divisor of ``rows`` from 5 to 16 where no offered tile of 3 rows or more
    divides them (49 rows of a 7 x 7 feature map or a 7 x 7 attention window: 7), else ``[]``. Without
    it every tile leaves a guarded edge tile, which runs several times slower per FMA; with few rows that
    edge is a large share of the work (why: docs/decisions/043-few-rows-get-a-dividing-tile.md)."""
    if not DIVIDING_TILES or any(rows % t == 0 for t in ROW_TILES):
        return []
    return [d for d in range(16, 4, -1) if rows % d == 0][:1]


def _row_tiles(registers: int) -> tuple:
    """``(rows, vectors)`` tiles tried in order: ``FEW_ROW_TILES`` with 32 registers, else ``FEW_ROW_TILES_16``."""
    return FEW_ROW_TILES if registers >= 32 else FEW_ROW_TILES_16


def few_row_tile(rows: int, registers: int, columns: int, lanes: int) -> tuple | None:
    """``(rows, vectors)`` of the first register tile that divides ``rows`` and leaves no ragged column
    tile: ``FEW_ROW_TILES`` (24 accumulators where 6 or 8 rows divide), then :func:`odd_row_tile`'s
    with as many vectors as fit beside it, up to 4 (7 rows: 3 vectors), before 2-row tiles; None if
    none does, or without ``DIVIDING_TILES``. With 16 registers, ``FEW_ROW_TILES_16``.
    why: docs/decisions/038-few-row-products-8x3-tile.md, docs/decisions/043-few-rows-get-a-dividing-tile.md"""
    if not DIVIDING_TILES:
        return None
    shapes = _row_tiles(registers)
    odd = [(d, min(4, (registers - 1) // (d + 1))) for d in odd_row_tile(rows)]
    shapes = tuple(t for t in shapes if t[0] > 2) + tuple(t for t in odd if t[1] >= 2) + \
        tuple(t for t in shapes if t[0] <= 2)
    return next(((t, v) for t, v in shapes if rows % t == 0 and (columns % (v * lanes) == 0 or
                                                                 columns >= NARROW_VECTORS * lanes)), None)


def register_tile(registers: int, columns: int, lanes: int, rows: int = 0) -> tuple:
    """``(vectors, rows)`` of the start's register tile over ``columns`` output columns.

    At most ``K_BLOCK_MAX_ROWS`` rows: :func:`few_row_tile` where one fits. Else 4 vectors x 6 rows
    (24 of 32 registers) or 2 x 6 (12 of 16); with 32 registers, where fewer than
    ``NARROW_VECTORS`` whole vectors of columns leave 4-vector tiles a ragged edge tile (guarded: it runs
    several times slower per FMA), 2 x 12 where 2 vectors divide the columns and 3 do not, else 3 x 8
    (24 accumulators either way).
    why: docs/decisions/010-matmul-register-tile.md, docs/decisions/040-matmul-tile-fits-the-columns.md,
    docs/decisions/043-few-rows-get-a-dividing-tile.md"""
    few = few_row_tile(rows, registers, columns, lanes) if 0 < rows <= K_BLOCK_MAX_ROWS else None
    if few:
        return few[1], few[0]
    if registers < 32:
        return TILE_16
    nv = -(-columns // lanes)
    if nv % 4 and nv < NARROW_VECTORS and columns % lanes == 0:
        return (2, 12) if nv % 2 == 0 and nv % 3 else (3, 8)
    return 4, 6


def hint_k_blocks(src, registers: int, row: str, vec_axis: str, reduce: list, ext: dict, lanes: int) -> None:
    """Few rows, a long reduction (a model's 32-128-row products): every row tile of a
    column panel in one local block, the reduction cut into blocks of ``K_BLOCK``, so each
    block of the panel (``K_BLOCK`` x the tile's columns) is read from L1 by all the row tiles
    rather than from L2/L3 by each in turn. The row tile divides the rows (no ragged edge):
    6 rows x 4 vectors, else 8 x 3 (24 accumulators either way, with 32 registers), else 4 x 4,
    else :func:`few_row_tile`'s others.
    why: docs/decisions/027-small-row-products-block-the-reduction.md,
    docs/decisions/038-few-row-products-8x3-tile.md, docs/decisions/043-few-rows-get-a-dividing-tile.md"""
    rows = ext[row]
    depth = math.prod(ext[lp] for lp in reduce)
    blocks = k_blocks(depth)
    if len(reduce) != 1 or rows > K_BLOCK_MAX_ROWS or depth < K_BLOCK_MIN_DEPTH or not blocks:
        return
    shapes = _row_tiles(registers)
    tile, vectors = few_row_tile(rows, registers, ext[vec_axis], lanes) or \
        next(((t, v) for t, v in shapes if rows % t == 0), shapes[0])
    block = max(1, min(rows, K_BLOCK_ROWS) // tile)       # row tiles sharing a panel block
    src.hint(f"{vec_axis}.t3", vectors * lanes)
    src.hint(f"{row}.t3", tile)
    src.hint(f"{row}.t2", block)
    src.hint(f"{row}.t1", -(-rows // (tile * block)))
    src.hint(f"{reduce[0]}.r1", min(blocks, key=lambda b: abs(b - K_BLOCK)))   # (not unrolled: too long)


def k_blocks(n: int) -> list:
    """Reduction blocks offered past 16: divisors of ``n`` from 32 to 256, at most the three nearest
    ``K_BLOCK`` (a block that does not divide the reduction guards its inner loop, which keeps the
    register tile out of registers)."""
    near = sorted((d for d in range(32, min(n, 256) + 1) if n % d == 0), key=lambda d: (abs(d - K_BLOCK), d))
    return sorted(near[:3])


def row_axis(st, spatial: list, ext: dict):
    """The register tile's row axis: the spatial axis before the vector axis, or where that one is a
    single iteration, the nearest before it along which some operand read with the vector axis is reused
    (a 1x1 conv on its plane as one row, (n, k, 1, p*q): the output channels), else None."""
    if len(spatial) < 2:
        return None
    if ext[spatial[-2]] > 1:
        return spatial[-2]          # (every product's case: no need to read the stage's accesses)
    wider = [lp for lp in spatial[:-2] if ext[lp] > 1]
    if not wider:
        return spatial[-2]
    vec = st.root_vars[spatial[-1].split(".", 1)[1]]
    var = st.root_vars[wider[-1].split(".", 1)[1]]
    reused = any(not any(mentions(i, var) for i in r.indices)
                 for r in st.reads() if any(mentions(i, vec) for i in r.indices))
    return wider[-1] if reused else spatial[-2]
