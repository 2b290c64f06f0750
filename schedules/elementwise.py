"""Rule R4 of the generated space (``schedules/space.py``): a stage computed by a vector loop.

Every root stage that no other rule schedules (broadcasting elementwise kernels, layout changes,
materialized pads), and the stages other rules leave to it (packs, pads, row hosts), get their last
loop vectorized, their outer loops fused and the outermost parallelized.
"""
from __future__ import annotations

from tensorir.te import walk
from tensorir.te.expr import Unary, UnOp

from .schedule import Schedule
from .transpose_tiles import transpose_tile

# An elementwise stage fuses its outer loops only until the parallel loop has this many iterations
# (with FUSE_PARTLY; False: all of them): the loops inside step their addresses, where every iteration of a
# fused loop divides its index back into each axis (why: docs/decisions/066-elementwise-stages-fuse-partly.md)
FUSE_PARTLY = True
PARALLEL_ITERATIONS = 64
# A stage that evaluates exp, sigmoid, tanh or log starts with up to this many native vectors per iteration
# (the most that divide its last loop; 1: one vector as other stages): each is a chain of ~20 dependent
# operations, and independent chains side by side keep the FMA units busy
# (why: docs/decisions/068-transcendental-stages-take-wide-vectors.md)
TRANSCENDENTAL_VECTORS = 4
_TRANSCENDENTAL = (UnOp.EXP, UnOp.SIGMOID, UnOp.TANH, UnOp.LOG)


def transcendental(stage) -> bool:
    """Whether ``stage``'s body evaluates a SIMD math function (``tensorir/codegen/simd_math.py``)."""
    return any(isinstance(n, Unary) and n.op in _TRANSCENDENTAL for n in walk(stage.body))


def schedule_elementwise(space, s: Schedule, src, name: str, keep_outer: bool, parallel: bool = True,
                         chunks_first: bool = False, transposing: bool = False, partial: bool = False) -> Schedule:
    """Vectorize the last loop; fuse the others unless ``keep_outer``; parallelize the outermost
    if ``parallel`` (off for a stage computed inside a parallel loop) and the decision says so.
    ``chunks_first``: the loop over the last loop's vector chunks goes right after the first
    loop (a transposing pack then gathers one vector's rows at a time, see ``_tile_anchor``).
    ``transposing``: a stage whose vector axis strides through an input may be tiled
    (``schedules/transpose_tiles.py``).  ``partial``: fuse the outer loops only until the parallel
    loop has ``PARALLEL_ITERATIONS`` (``FUSE_PARTLY``)."""
    st = s._state.stage(name)
    loops = s.loops(name)
    last = loops[-1]
    n = s.extent(last)
    if len(loops) == 1 and keep_outer:
        return s.parallel(last) if parallel and src.choose(f"{name}.parallel", [True, False]) else s
    if transcendental(st):
        lanes = space.lanes(st.dtype)       # the most vectors, up to the setting, that divide the loop
        wide = [m * lanes for m in range(TRANSCENDENTAL_VECTORS, 1, -1) if n % (m * lanes) == 0]
        if wide:
            src.hint(f"{name}.vector", wide[0])
    v = src.choose(f"{name}.vector", space.vector_choices(n, st.dtype))
    if v > 1:
        s = s.split(last, factor=v)
        s = s.vectorize(s.loops(name)[-1])
        split = s.loops(name)
        if chunks_first and len(split) > 3 and s.extent(split[-2]) > 1:
            s = s.reorder(split[-2], *split[1:-2])
    inner = 1 if v > 1 else 0
    if transposing:
        s, inner = transpose_tile(s, src, name, inner)
    outer = s.loops(name)[:len(s.loops(name)) - inner]
    if not outer:
        return s
    if not keep_outer and len(outer) > 1:
        while len(outer) > 1 and not (partial and s.extent(outer[0]) >= PARALLEL_ITERATIONS):
            s = s.fuse(outer[0], outer[1])
            outer = s.loops(name)[:len(outer) - 1]
    if parallel and src.choose(f"{name}.parallel", [True, False]):
        s = s.parallel(outer[0])
    return s
