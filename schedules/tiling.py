"""Tiling helpers shared by the rules of the generated space (``schedules.space``, ``schedules.conv_space``)."""
from __future__ import annotations

from .schedule import Schedule


def split_all(s: Schedule, loops: list, factors: list):
    """Split each loop by its factor: ``(schedule, outer loops, inner loops)``."""
    outer, inner = [], []
    for lp, f in zip(loops, factors):
        s = s.split(lp, factor=max(1, f))
        o, i = s.trace[-1].outputs
        outer.append(o)
        inner.append(i)
    return s, outer, inner


def fuse_parallel(s: Schedule, loops: list, src, name: str) -> Schedule:
    """Fuse the outermost tile loops (one per spatial axis) and parallelize them.

    Which axis goes first is a decision (``{name}.outer``, the position of that
    axis), offered among the loops of more than one iteration (moving a loop of
    one iteration would repeat a schedule already in the space): it decides which
    operand's block a thread keeps in cache across consecutive tasks (matmul:
    ``j`` first keeps one panel block of B in L2 while the tasks walk down the
    rows of A).
    """
    movable = [i for i, lp in enumerate(loops) if s.extent(lp) > 1]
    if len(movable) > 1:
        first = src.choose(f"{name}.outer", movable)
        if first != 0:
            order = [loops[first]] + [lp for i, lp in enumerate(loops) if i != first]
            s = s.reorder(*order)
            loops = order
    s, fused = fuse_loops(s, loops)
    if src.choose(f"{name}.parallel", [True, False]):
        s = s.parallel(fused)
    return s


def fuse_loops(s: Schedule, loops: list) -> tuple:
    """``(schedule, fused loop)``: ``loops`` (outermost first, adjacent) fused into one."""
    fused = loops[0]
    for lp in loops[1:]:
        s = s.fuse(fused, lp)
        fused = s.trace[-1].outputs[0]
    return s, fused
