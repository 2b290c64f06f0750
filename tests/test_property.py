"""Property test: random valid schedules compute the same numbers as numpy.

Hypothesis draws a sequence of primitives (splits and splits of splits with any
factor, reorders, fusion, annotations, cache_write + compute_at, packing,
inlining) on matmul,
conv2d and softmax with odd shapes; the built kernel must match the numpy
reference.  A drawn schedule that is illegal must raise ScheduleError, never
crash or compute garbage.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedules import Schedule
from tensorir import ops
from schedules.errors import ScheduleError
from tests.conftest import run_schedule

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _random_loop_nest(data, s: Schedule, stage: str) -> Schedule:
    """Random splits, a random order and random annotations on one stage's loops."""
    for _ in range(2):      # a second pass splits split loops (nested, often non-dividing)
        for loop in list(s.loops(stage)):
            if data.draw(st.booleans(), label=f"split {loop}"):
                f = data.draw(st.integers(1, s.extent(loop) + 2), label=f"factor {loop}")
                s = s.split(loop, factor=f)
    loops = s.loops(stage)
    order = data.draw(st.permutations(loops), label="order")
    s = s.reorder(*order)
    loops = s.loops(stage)
    if len(loops) >= 2 and data.draw(st.booleans(), label="fuse outer"):
        try:
            s = s.fuse(loops[0], loops[1])
        except ScheduleError:  # spatial with reduce: legal to refuse
            pass
    loops = s.loops(stage)
    spatial_outer = [lp for lp in loops[:2] if not _is_reduce(s, lp)]
    annotated = set()
    if spatial_outer and data.draw(st.booleans(), label="parallel"):
        s = s.parallel(spatial_outer[0])
        annotated.add(spatial_outer[0])
    inner = s.loops(stage)[-1]
    if (not _is_reduce(s, inner) and inner not in annotated and s.extent(inner) <= 64
            and data.draw(st.booleans(), label="vec")):
        s = s.vectorize(inner)
        annotated.add(inner)
    for lp in s.loops(stage)[1:-1]:
        if lp in annotated:
            continue
        if s.extent(lp) <= 8 and data.draw(st.booleans(), label=f"unroll {lp}"):
            s = s.unroll(lp)
    return s


def _is_reduce(s: Schedule, loop: str) -> bool:
    st_ = s.stage_graph().stage(loop.split(".", 1)[0])
    return st_.loops[loop.split(".", 1)[1]].kind.value == "reduce"


def _check(s: Schedule, reference):
    try:
        ins, outs = run_schedule(s)
    except ScheduleError:
        return  # an illegal combination was refused with a clear error
    for got, want in zip(outs, reference(ins)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@SETTINGS
@given(data=st.data(), M=st.integers(1, 40), N=st.integers(1, 40), K=st.integers(1, 30))
def test_random_matmul_schedules(data, M, N, K):
    s = Schedule(ops.matmul(M, N, K))
    if data.draw(st.booleans(), label="pack B"):
        s = s.pack("B", {1: data.draw(st.integers(1, 17))}, order=["1.o", "0", "1.i"])
    try:
        if data.draw(st.booleans(), label="cache_write"):
            s = s.cache_write("C")
            s = _random_loop_nest(data, s, "C")
            s = s.compute_at("C_local", data.draw(st.sampled_from(s.loops("C")), label="attach"))
            s = _random_loop_nest(data, s, "C_local")
        else:
            s = _random_loop_nest(data, s, "C")
    except ScheduleError:    # e.g. compute_at a vectorized loop: refused by the primitive itself
        return
    _check(s, lambda ins: [ins[0] @ ins[1]])


@SETTINGS
@given(data=st.data(), C=st.integers(1, 4), H=st.integers(3, 12), W=st.integers(3, 12), K=st.integers(1, 5),
       pad=st.integers(0, 1), stride=st.integers(1, 2))
def test_random_conv2d_schedules(data, C, H, W, K, pad, stride):
    wl = ops.conv2d(1, C, H, W, K, 3, 3, stride=stride, pad=pad)
    s = Schedule(wl)
    out = s.stages[-1]
    s = _random_loop_nest(data, s, out)
    if len(s.stages) > 1:
        choice = data.draw(st.sampled_from(["root", "inline", "at"]), label="pad placement")
        if choice == "inline":
            s = s.compute_inline(s.stages[0])
        elif choice == "at":
            try:
                s = s.compute_at(s.stages[0], data.draw(st.sampled_from(s.loops(out)), label="attach"))
            except ScheduleError:    # e.g. at a vectorized loop: refused by compute_at itself
                return
    from tensorir.ops.registry import get_workload
    w = get_workload("conv2d")
    params = dict(N=1, C=C, H=H, W=W, K=K, R=3, S=3, stride=stride, pad=pad, dilation=1, dtype="float32")
    _check(s, lambda ins: w.reference(ins, **params))


@SETTINGS
@given(data=st.data(), rows=st.integers(1, 9), cols=st.integers(1, 70))
def test_random_softmax_schedules(data, rows, cols):
    s = Schedule(ops.softmax(rows, cols))
    out = s.stages[-1]
    s = _random_loop_nest(data, s, out)
    outer = s.loops(out)[0]
    # move producers (consumers first) into the output's outer loop, or inline the elementwise one
    for stage in reversed(s.stages[:-1]):
        how = data.draw(st.sampled_from(["root", "at", "inline"]), label=f"place {stage}")
        try:
            if how == "at":
                s = s.compute_at(stage, outer)
            elif how == "inline":
                s = s.compute_inline(stage)
        except ScheduleError:
            pass  # e.g. inlining a reduction, or a consumer left outside the loop
    x_ref = lambda ins: [np.exp(ins[0] - ins[0].max(1, keepdims=True)) /  # noqa: E731
                         np.exp(ins[0] - ins[0].max(1, keepdims=True)).sum(1, keepdims=True)]
    _check(s, x_ref)
