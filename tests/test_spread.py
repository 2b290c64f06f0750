"""A team thread woken on its master's core moves off it and is left as free as it was
(the pool's tt.spread in tensorir/codegen/pool.py; tensorir/codegen/spread.py on libgomp;
docs/decisions/075-workers-move-off-the-masters-core.md)."""
from __future__ import annotations

import os
import threading
import time

import numpy as np

import tensorir.codegen.spread as spread
from tensorir.codegen import pool
from tensorir.runtime import clear_cache
from tensorir.te.expr import Var
from tensorir.tir.ir import PrimFunc

from tests.loopir import PARALLEL, buf, c, ld, loop, rand, run, st


def _kernel_func(name: str = "spread_add"):
    M, N = 64, 1024            # 2^16 stores: above the region threshold, so a thread team runs it
    A, B = buf("A", (M, N)), buf("B", (M, N))
    i, j = Var("i"), Var("j")
    return PrimFunc(name, (A, B), loop(i, M, loop(j, N, st(B, (i, j), ld(A, i, j) * c(3.0) + c(1.0))), PARALLEL))


def _other_threads() -> list:
    me = threading.get_native_id()
    return [int(t) for t in os.listdir("/proc/self/task") if int(t) != me]


def _masks() -> dict:
    return {t: os.sched_getaffinity(t) for t in _other_threads()}


def test_workers_run_under_the_master_on_one_core_and_keep_their_masks():
    a = rand((64, 1024))
    out = np.zeros_like(a)
    k = run(_kernel_func(), a, out, threads=3)        # the team exists before the master is pinned
    assert f"call void @{pool.PARALLEL}" in k.llvm_ir
    text = pool.pool_ir(shared=False)
    assert "call i32 @sched_setaffinity" in text and "call i32 @sched_yield" in text
    before, mine = _masks(), os.sched_getaffinity(0)
    core = min(mine)
    os.sched_setaffinity(0, {core})        # this thread only: every worker it wakes may land here
    try:
        for n in range(40):
            time.sleep(0.002)                # longer than the spin count: the workers sleep and are woken
            out[...] = 0
            k(a, out)
            np.testing.assert_allclose(out, a * 3 + 1, rtol=1e-6, atol=1e-6)
    finally:
        os.sched_setaffinity(0, mine)
    after = _masks()
    assert {t: m for t, m in after.items() if t in before} == {t: m for t, m in before.items() if t in after}


def test_a_worker_bound_to_its_masters_core_stays_bound():
    a = rand((64, 1024))
    out = np.zeros_like(a)
    k = run(_kernel_func("spread_bound"), a, out, threads=2)
    mine = os.sched_getaffinity(0)
    core = min(mine)
    before = _masks()
    os.sched_setaffinity(0, {core})
    try:
        for t in before:
            os.sched_setaffinity(t, {core})  # as a user's OMP_PROC_BIND=master would bind them
        for n in range(10):
            time.sleep(0.002)
            out[...] = 0
            k(a, out)
            np.testing.assert_allclose(out, a * 3 + 1, rtol=1e-6, atol=1e-6)
        assert all(m == {core} for t, m in _masks().items() if t in before)   # no thread left its binding
    finally:
        os.sched_setaffinity(0, mine)
        for t, m in before.items():
            try:
                os.sched_setaffinity(t, m)
            except ProcessLookupError:       # a thread that has ended since
                pass


def test_the_setting_off_leaves_no_affinity_calls(monkeypatch):
    monkeypatch.setattr(spread, "SPREAD_WORKERS", False)
    clear_cache()
    try:
        a = rand((64, 1024))
        out = np.zeros_like(a)
        k = run(_kernel_func("spread_off"), a, out, threads=2)
        np.testing.assert_allclose(out, a * 3 + 1, rtol=1e-6, atol=1e-6)
        assert "sched_" not in k.llvm_ir
        assert "call void @tt.spread()" in pool.pool_ir(shared=False) and "call void @tt.spread()" not in pool.pool_ir(shared=False, spread=False)
    finally:
        clear_cache()
