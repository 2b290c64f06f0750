"""The columns form of a row-major convolution: vectors of output columns, rows of output channels.

A convolution on NCHW data whose output is NCHW too (a graph output, or a model kept row-major) may tile
its output as ``kb`` output channels (unrolled rows) x ``pt`` output rows x ``qt`` output columns (the
vector axis), the data a padded copy of its rows: each FMA multiplies a vector of input columns by one
broadcast weight, each input vector feeds ``kb`` FMAs, and the tile is stored as rows, no transpose.
The channels form (:mod:`schedules.conv_space`, vectors of output channels) wastes lanes where the
output channels are few (3 image channels, 12 of a DenseNet's growth) and transposes every output
tile back to rows. Why the start takes it where it does:
docs/decisions/088-row-major-convs-with-few-output-channels-vectorize-columns.md
"""
from __future__ import annotations

from .conv_match import ConvInfo
from .conv_start import edge_share, vector_registers

# A row-major conv starts in the columns form where its output columns fill their vectors at least as well
# as its output channels would fill theirs, less this margin (-1: never, 1: always; decision 088)
COLUMNS_FILL_MARGIN = 0.0
# ... with 16 registers (AVX2) only where the output channels fit one vector: a one-vector channels tile is
# load-bound there (decision 060); wider, its 12 accumulators match the columns form's (decision 088)
AVX2_ONE_VECTOR_ONLY = True
MAX_ROWS = 24          # output channels per register tile (unrolled rows of broadcasts)
MAX_VECTORS = 4        # vectors of output columns per register-tile row


def fill(n: int, lanes: int) -> float:
    """Share of the lanes ``n`` values use in whole vectors."""
    return n / (-(-n // lanes) * lanes)


def columns_offered(c: ConvInfo) -> bool:
    """Whether conv ``c`` may take the columns form: a row-major group-1 conv with weights."""
    return not c.blocked and not c.depthwise and c.weights is not None and not c.grouped and not c.lane_group


def columns_first(c: ConvInfo, lanes: int, registers: int) -> bool:
    """Whether the start takes the columns form: a window (a 1x1 on its plane is a product, decision 081)
    whose output columns fill their vectors about as well as its output channels would
    (:data:`COLUMNS_FILL_MARGIN`); strided too (each tap's vector a strided load: a 3x3 s2 stem
    3 -> 32 at 224 ran 1.29x as fast as in the channels form); with 16 registers, only output channels
    that fit one vector (:data:`AVX2_ONE_VECTOR_ONLY`)."""
    if not columns_offered(c) or c.R * c.S == 1 or (registers < 32 and AVX2_ONE_VECTOR_ONLY and c.K > lanes):
        return False
    return fill(c.Q, lanes) >= fill(c.K, lanes) - COLUMNS_FILL_MARGIN


def row_choices(K: int) -> list:
    """Output channels per register tile: the divisors of ``K`` up to ``MAX_ROWS``, and 4, 8, 16 below ``K``."""
    return sorted({d for d in range(1, min(K, MAX_ROWS) + 1) if K % d == 0} | {b for b in (4, 8, 16) if b < K})


def column_widths(Q: int, lanes: int) -> list:
    """Output columns per register tile: 1-4 whole vectors (not past the columns by a whole vector), and
    the row itself where it is narrower than that (one tile, its last vector in pieces)."""
    opts = {v * lanes for v in range(1, MAX_VECTORS + 1) if (v - 1) * lanes < Q}
    if Q < MAX_VECTORS * lanes:
        opts.add(Q)
    return sorted(opts)


def columns_tile(c: ConvInfo, lanes: int, registers: int) -> tuple:
    """``(kb, qt, pt)``: the register tile with the most useful vector FMAs per reduction step that fits
    beside one input vector per row and column vector and a broadcast weight; edges scored as the
    channels form's are (:func:`schedules.conv_start.edge_share`); ties to the fewest rows, then the
    most channels (an input vector load feeds ``kb`` FMAs)."""
    best, best_key = (1, lanes, 1), None
    for kb in row_choices(c.K):
        for qt in column_widths(c.Q, lanes):
            m = vector_registers(min(qt, c.Q), lanes)
            for pt in (1, 2, 3, 4):
                if pt > c.P or kb * pt * m + pt * m + 1 > registers:
                    continue
                useful = kb * pt * qt / lanes * edge_share(c.K, kb) * edge_share(c.P, pt) * edge_share(c.Q, qt)
                key = (round(useful, 6), -pt, kb)
                if best_key is None or key > best_key:
                    best, best_key = (kb, qt, pt), key
    return best
