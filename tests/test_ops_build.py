"""Every built-in operator, built with its default schedule and with optimized schedules, matches numpy.

The optimized schedules come from the generated search space: the heuristic
starting point and a few random points (tiling, register tiles, packing,
inlining, compute_at, vectorization, parallel loops).
"""
from __future__ import annotations

import numpy as np
import pytest

from schedules import Schedule
from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions
from tensorir.runtime import build
from tensorir.ops.registry import get_workload
from tests.test_ops import CASES


def _run(w, params, sch):
    tensors = sch.tensors
    ins = w.inputs(1, **params)
    outs = [np.full(t.shape, np.nan if t.dtype != "int32" else -1, t.dtype) for t in tensors if not t.is_placeholder]
    build(sch.lower())(*ins, *outs)
    for got, want in zip(outs, w.reference(ins, **params)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_default_schedule(name, params):
    w = get_workload(name)
    p = w.bind(**params)
    _run(w, p, Schedule(w.make(**p)))


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_optimized_schedules(name, params):
    w = get_workload(name)
    p = w.bind(**params)
    space = GeneratedSpace(w.make(**p))
    heuristic = space.apply(FixedDecisions(space.default_decisions()))
    assert heuristic.trace, "the optimized schedule must actually transform the loop nest"
    _run(w, p, heuristic)
    for seed in range(3):
        _run(w, p, space.apply(RandomDecisions(seed)))


@pytest.mark.parametrize("name", ["matmul", "dense", "conv2d", "softmax"])
def test_optimized_schedule_at_realistic_size(name):
    """A mid-size shape (not tiny) with the heuristic schedule, vs numpy."""
    sizes = {"matmul": dict(M=130, N=97, K=71), "dense": dict(batch=33, in_features=100, out_features=70),
             "conv2d": dict(N=1, C=8, H=17, W=19, K=12, R=3, S=3, stride=1, pad=1),
             "softmax": dict(rows=33, cols=301)}
    w = get_workload(name)
    p = w.bind(**sizes[name])
    space = GeneratedSpace(w.make(**p))
    _run(w, p, space.apply(FixedDecisions(space.default_decisions())))
