"""How a stage's reads walk its axes: the inputs a vector axis may pack into panels, the block along which a
row reduction's reads run contiguous, the odd block a pool's vector tile may take whole."""
from __future__ import annotations

from schedules.lowering.checks import MAX_VECTOR_LANES
from tensorir.te.expr import Binary, BinOp, Const, children
from tensorir.tir.analysis.affine import mentions
from tensorir.tir.transform.simplify import simplify


# a row reduction over a blocked layout's channels (``X[k // B, ..., k % B]``) is factored too, in partials
# that divide the block; False: only reductions whose reads index their last axis by ``k`` (decision 016)
BLOCKED_ROW_RFACTOR = True


# a pool or reduction over a blocked layout whose block is not whole vectors (40 = 16 + 16 + 8 channels, decision
# 086) takes the block as its vector tile; False: whole vectors only, so the start packs the input into panels of
# 32 lanes (docs/decisions/092-pools-tile-whole-odd-blocks.md)
WHOLE_BLOCK_TILES = True


def whole_block(st, vec_axis: str, n: int, lanes: int) -> int:
    """``n`` where the anchor's vector axis walks a whole block of ``n`` lanes that whole vectors do not
    make, every read being along it (nothing for a row tile to reuse), else 0."""
    if not WHOLE_BLOCK_TILES or n <= lanes or n % lanes == 0 or n > MAX_VECTOR_LANES:
        return 0
    v = st.root_vars[vec_axis.split(".", 1)[1]]
    reads = st.reads()
    if not reads or any(not r.indices or not any(mentions(i, v) for i in r.indices) for r in reads):
        return 0
    return n if any(getattr(r.tensor, "is_placeholder", False) and r.indices[-1] == v
                    and r.tensor.shape[-1] == n for r in reads) else 0


# the reads of a row reduction are simplified under the loops' ranges before they are matched, so a reshaped
# input's unravelled indices qualify (a GroupNorm exported as Reshape (1, G, -1) + InstanceNormalization reads
# ``X[0, (i * 8192 + k) // 1024, (i * 8192 + k) // 32 % 32, (i * 8192 + k) % 32]``); False: matched as written
# (docs/decisions/094-reshaped-row-reductions-rfactor.md)
RESHAPED_ROW_RFACTOR = True


def row_block(reads, k, ranges=None):
    """How the reads of a row reduction over ``k`` walk the contiguous axis: 0 where each read's last index
    is ``k`` and no other index mentions it; ``B`` where the last index is ``k % B`` and the others mention
    ``k`` only as ``k // C``, ``C`` a multiple of ``B`` (a blocked layout's channels, a reshape's unravelled
    rows); else None.  With ``ranges`` (variable -> (lo, hi)) the indices are simplified first."""
    block = 0
    simplified = ranges is not None and RESHAPED_ROW_RFACTOR
    for r in reads:
        *outer, last = [simplify(i, ranges) for i in r.indices] if simplified else r.indices
        if last == k and not any(mentions(i, k) for i in outer):
            continue
        if not (BLOCKED_ROW_RFACTOR and isinstance(last, Binary) and last.op is BinOp.MOD and last.a == k
                and isinstance(last.b, Const)):
            return None
        b = int(last.b.value)
        if block not in (0, b) or not all(above_block(i, k, b) for i in outer):
            return None
        block = b
    return block


def above_block(e, k, b: int) -> bool:
    """Whether ``e`` reads ``k`` only as ``k // c`` with ``c`` a multiple of ``b`` (a blocked layout's outer
    index ``k // b``, or a reshape's unravelled ones, ``k // 32 % 32`` and ``k // 1024`` over rows of 32)."""
    if isinstance(e, Binary) and e.op is BinOp.FLOORDIV and e.a == k and isinstance(e.b, Const):
        return int(e.b.value) % b == 0
    if e == k:
        return False
    return all(above_block(c, k, b) for c in children(e))


def packable(stage, vec_loop: str) -> list:
    """(placeholder tensor, dim) of reads indexed by the bare vector variable in exactly one dim."""
    v = stage.root_vars[vec_loop]
    out = {}
    for r in stage.reads():
        t: object = r.tensor
        if not getattr(t, "is_placeholder", False):
            continue
        dims = [d for d, i in enumerate(r.indices) if i == v]
        others = [i for d, i in enumerate(r.indices) if d not in dims]
        if len(dims) == 1 and not any(mentions(i, v) for i in others):
            out.setdefault(id(t), (t, dims[0]))
    return list(out.values())
