"""Lowering as a named list of passes (after Halide's ``lower_impl``).

>>> func = lower(schedule)                                  # the PrimFunc codegen compiles
>>> func = lower(schedule, print_after=["promote"])         # prints the IR after that pass
>>> for name, func in lower_steps(schedule): ...            # the IR after each pass

The first pass turns the schedule into a loop nest; every later one is a pure
function PrimFunc -> PrimFunc (returning its argument itself when it changes
nothing) from :mod:`tensorir.tir.transform`.  Code generation compiles the last
result as it is, so what ``lower`` prints is what runs.

===============  ==========================================================================
``loop_nest``    bound inference, loop nests in stage order, guards and edge-tile versions
                 (:mod:`schedules.lowering.emit`); guard conditions are simplified here
``simplify``     indices and values of loads and stores simplified with the loop ranges
``unswitch``     a copy that pads gets a version without the bounds test for the nests wholly in
                 bounds (:mod:`tensorir.tir.transform.unswitch`)
``promote``      accumulators of serial loops and repeated tiles kept in LOCAL register
                 copies; register-tile loops unrolled (:mod:`tensorir.tir.transform.promote`)
``vector_chunks``  SIMD loops of a width that is not a power of two cut into pieces of the
                 target's vector width (:mod:`tensorir.tir.transform.vector_chunks`)
===============  ==========================================================================

The nest after :data:`SCHEDULED` is the schedule's own loop nest: the cost
model's features and ``tensortune report`` read it; the passes after it prepare
it for code generation.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

from schedules.lowering.emit import loop_nest
from tensorir.target import Target
from tensorir.tir.ir import PrimFunc
from tensorir.tir.transform.promote import promote_func
from tensorir.tir.transform.simplify import simplify_func
from tensorir.tir.transform.unswitch import unswitch_func
from tensorir.tir.transform.vector_chunks import chunk_vectors, native_lanes


@dataclass(frozen=True)
class LowerContext:
    """What a pass may read besides the IR: the target and the kernel's name."""
    target: Target
    name: str | None = None


PASSES = (
    ("loop_nest", lambda sched, ctx: loop_nest(sched, ctx.name)),
    ("simplify", lambda func, ctx: simplify_func(func)),
    ("unswitch", lambda func, ctx: unswitch_func(func)),
    ("promote", lambda func, ctx: promote_func(func)),
    ("vector_chunks", lambda func, ctx: chunk_vectors(func, native_lanes(ctx.target))),
)
PASS_NAMES = tuple(name for name, _ in PASSES)
SCHEDULED = "simplify"


def lower_steps(obj, target: Target | None = None, name: str | None = None,
                until: str | None = None) -> list:
    """``[(pass name, PrimFunc after it)]`` for every pass of :data:`PASSES`, in order.

    Parameters
    ----------
    obj : Schedule, StageGraph or list of Tensor
        What to lower.
    target : Target, optional
        The CPU the kernel is for (its vector width sizes the vector pieces); default: the host.
    name : str, optional
        The kernel's name (default: the last output's).
    until : str, optional
        Stop after this pass.
    """
    ctx = LowerContext(target or Target.host(), name)
    last = _check_names([until])[0] if until is not None else PASS_NAMES[-1]
    steps, ir = [], obj
    for pass_name, fn in PASSES:
        ir = fn(ir, ctx)
        steps.append((pass_name, ir))
        if pass_name == last:
            break
    return steps


def lower(obj, target: Target | None = None, name: str | None = None, *, until: str | None = None,
          print_after=None, file=None) -> PrimFunc:
    """Lower ``obj`` through :data:`PASSES` (see :func:`lower_steps`) and return the last PrimFunc.

    ``print_after``: True, or a list of pass names: print the IR after those passes
    (to ``file``, default stdout), each under a ``# after <pass>`` line.
    """
    steps = lower_steps(obj, target, name, until)
    if print_after:
        wanted = PASS_NAMES if print_after is True else _check_names(print_after)
        out = file or sys.stdout
        for pass_name, func in steps:
            if pass_name in wanted:
                print(f"# after {pass_name}\n{func}", file=out)
    return steps[-1][1]


def apply_passes(func: PrimFunc, target: Target | None = None, names=None) -> PrimFunc:
    """Run the PrimFunc -> PrimFunc passes named ``names`` (default: all after ``loop_nest``),
    in pipeline order, on a hand-written function."""
    wanted = PASS_NAMES[1:] if names is None else _check_names(names)
    if PASS_NAMES[0] in wanted:
        raise ValueError(f"{PASS_NAMES[0]!r} lowers a schedule, not a PrimFunc")
    ctx = LowerContext(target or Target.host(), func.name)
    for pass_name, fn in PASSES[1:]:
        if pass_name in wanted:
            func = fn(func, ctx)
    return func


def _check_names(names) -> list:
    names = list(names)
    unknown = [n for n in names if n not in PASS_NAMES]
    if unknown:
        raise ValueError(f"unknown lowering pass(es) {unknown}; the passes are {list(PASS_NAMES)}")
    return names
