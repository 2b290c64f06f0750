"""Limits a schedule's annotations must respect, checked when a stage is lowered."""
from __future__ import annotations

import math

from schedules.errors import LoweringError
from schedules.state import Stage
from tensorir.tir.ir import ForKind

# The widest loop a schedule may vectorize: 64 lanes are 4 AVX-512 (8 AVX2) registers of float32 per
# value.  Lowering rejects wider loops and the generated space (schedules.space) never offers them.
# (Code generation has its own, higher limit for hand-written IR: tensorir.tir.ir.MAX_SIMD_LANES.)
MAX_VECTOR_LANES = 64
MAX_UNROLL = 1024       # iterations one unrolled loop (or a nest of them) may copy its body


def check_annotations(s: Stage, extents, attached) -> None:
    """Raise LoweringError if ``s``'s unrolled or vectorized loops are illegal at these ``extents``.

    ``attached`` maps ``(stage, loop)`` to the stages computed at that loop.
    """
    unrolled = [n for n in s.leaf if s.annotation(n) is ForKind.UNROLLED and extents[n] > 1]
    copies = math.prod(extents[n] for n in unrolled)
    if len(unrolled) > 1 and copies > MAX_UNROLL:
        loops = " x ".join(f"{s.name}.{n}({extents[n]})" for n in unrolled)
        raise LoweringError("unroll", f"nested unrolled loops {loops} copy the body {copies} times; expected "
                            f"at most {MAX_UNROLL} (unroll fewer or smaller loops)", stage=s.name,
                            loop=unrolled[-1])
    for pos, name in enumerate(s.leaf):
        kind = s.annotation(name)
        ext = extents[name]
        if kind is ForKind.VECTORIZED:
            if pos != len(s.leaf) - 1:
                raise LoweringError("vectorize", f"loop {s.name}.{name} must be the innermost loop of stage "
                                    f"{s.name}, but {s.name}.{s.leaf[-1]} is inside it", stage=s.name,
                                    loop=name)
            if attached.get((s.name, name)):
                raise LoweringError("vectorize", f"loop {s.name}.{name} has stage "
                                    f"{attached[(s.name, name)][0].name} computed at it; a vectorized "
                                    "loop must contain only its own statement", stage=s.name, loop=name)
            if ext > MAX_VECTOR_LANES:
                raise LoweringError("vectorize", f"loop {s.name}.{name} has extent {ext}; expected at most "
                                    f"{MAX_VECTOR_LANES} lanes (split it first)", stage=s.name, loop=name)
        if kind is ForKind.UNROLLED and ext > MAX_UNROLL:
            raise LoweringError("unroll", f"loop {s.name}.{name} has extent {ext}; expected at most "
                                f"{MAX_UNROLL} (split it first)", stage=s.name, loop=name)
