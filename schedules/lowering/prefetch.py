"""Lowering of the ``prefetch`` primitive: the ``Prefetch`` statements at the top of a loop's body.

What one iteration of the loop reads of the tensor is bounded as bound inference bounds a region:
each read's indices split into a part fixed in the iteration (outer loops and the loop itself) and
the range the loops inside it sweep (:func:`schedules.lowering.bounds.split_fixed`); reads with the
same fixed part make one box.  A box is cut into runs contiguous in memory (the trailing dims it
covers whole merge with the one before), and every run into its cache lines: one prefetch per
line, at the run's start plus 64 bytes per line, shifted ``offset`` iterations ahead (the loop
variable advanced in the fixed part) or ``offset_bytes`` bytes.  So a vectorized row of 32 floats
that four unrolled rows of the register tile all read is two prefetches, not four loads' worth.

The runs' starts are not known to be line-aligned; an unaligned run of ``n`` lines touches
``n + 1``, and the last one is the first line the next iteration prefetches when the loop walks
a contiguous stream (a packed panel), which is where a prefetch pays.
"""
from __future__ import annotations

import itertools
import math

from schedules.errors import LoweringError
from schedules.lowering.bounds import split_fixed
from tensorir.te.expr import Binary, BinOp, const, itemsize
from tensorir.tir.ir import Prefetch
from tensorir.tir.rewrite import substitute

LINE_BYTES = 64          # x86-64's cache line
MAX_PREFETCHES = 32      # per iteration: more is a loop too far out (prefetch at an inner one)


def prefetch_stmts(spec, stage: str, loads: list, var, extent: int, inner: dict, simplify) -> list:
    """The ``Prefetch`` statements of ``spec`` (a :class:`~schedules.state.PrefetchSpec`) for one
    iteration of loop variable ``var`` (extent ``extent``) of stage ``stage``.

    ``loads``: the stage's reads of the tensor as loop-IR ``Load`` nodes; ``inner``: Var -> (lo, hi)
    of the loops inside the loop; ``simplify``: simplifies an index with the ranges in scope.
    """
    if spec.offset and extent <= 1:
        return []        # one iteration: nothing comes later
    buf = loads[0].buffer
    boxes: dict = {}
    for ld in loads:
        parts = [split_fixed(simplify(i), inner) for i in ld.indices]
        if any(p is None for p in parts):
            raise LoweringError("prefetch", f"the reads of {spec.tensor} by stage {stage} are not affine in the "
                                f"loops inside {stage}.{spec.loop}; cannot bound what one iteration reads",
                                stage=stage, loop=spec.loop)
        box = boxes.setdefault(tuple(p[0] for p in parts), [[p[1], p[2]] for p in parts])
        for b, p in zip(box, parts):
            b[0], b[1] = min(b[0], p[1]), max(b[1], p[2])
    shift = {var: Binary(BinOp.ADD, var, const(spec.offset))} if spec.offset else None
    out = []
    for fixed, box in boxes.items():
        lead, run = _runs(buf.shape, box)
        lines = -(-run * itemsize(buf.dtype) // LINE_BYTES)
        runs = math.prod(hi - lo + 1 for lo, hi in box[:lead])
        if len(out) + runs * lines > MAX_PREFETCHES:
            raise LoweringError("prefetch", f"one iteration of {stage}.{spec.loop} reads more than "
                                f"{MAX_PREFETCHES} cache lines of {spec.tensor} ({runs} runs of {lines}); "
                                "prefetch at an inner loop", stage=stage, loop=spec.loop)
        base = [f if shift is None else substitute(f, shift) for f in fixed]
        for rel in itertools.product(*(range(hi - lo + 1) for lo, hi in box[:lead])):
            rel = rel + (0,) * (len(box) - lead)
            idx = tuple(simplify(Binary(BinOp.ADD, b, const(lo + r))) for b, (lo, _), r in zip(base, box, rel))
            out += [Prefetch(buf, idx, (spec.offset_bytes or 0) + n * LINE_BYTES) for n in range(lines)]
    return out


def _runs(shape: tuple, box: list) -> tuple:
    """``(lead, elements)``: ``box`` (per dim ``[lo, hi]``) in a row-major buffer of ``shape`` is one
    contiguous run of ``elements`` for every index of its first ``lead`` dims (a trailing dim the box
    covers whole joins the run with the dim before it)."""
    d = len(shape) - 1
    run = box[d][1] - box[d][0] + 1
    while d > 0 and box[d] == [0, shape[d] - 1]:
        d -= 1
        run *= box[d][1] - box[d][0] + 1
    return d, run
