"""The thread pool parallel regions run on (tensorir/codegen/pool.py): results under every
way a region can meet its workers: late, busy with another caller's region, failing, after fork,
and the team size a thread count of 0 asks for.
docs/decisions/079-an-own-thread-pool-that-never-waits-for-a-late-worker.md"""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
import threading
import time

import numpy as np
import pytest

from tensorir.codegen import pool
from tensorir.runtime import OutOfBoundsError, build, load_library
from tensorir.te.expr import Binary, BinOp, Const, Var
from tensorir.tir.ir import Allocate, PrimFunc, Scope, seq

from tests.loopir import PARALLEL, buf, c, ld, loop, rand, run, st
from tests.test_memory_safety import run_python

N = 1 << 15          # above the region threshold (2^14 stores): a team runs each loop


def _three_loops(name: str) -> PrimFunc:
    """Three parallel loops in one region, each reading what the previous one wrote in reverse:
    a thread that started a loop before the previous one was done reads stale values."""
    A, B, C = buf("A", (N,)), buf("B", (N,)), buf("C", (N,))
    T = buf("T", (N,), scope=Scope.GLOBAL)
    i, j, m = Var("i"), Var("j"), Var("m")
    return PrimFunc(name, (A, B, C), Allocate(T, seq(
        loop(i, N, st(T, (i,), ld(A, i) * c(3.0)), PARALLEL),
        loop(j, N, st(B, (j,), ld(T, N - 1 - j) - c(1.0)), PARALLEL),
        loop(m, N, st(C, (m,), ld(B, N - 1 - m) + ld(T, m)), PARALLEL))))


def _check(a, b, cc):
    np.testing.assert_array_equal(b, a[::-1] * 3 - 1)
    np.testing.assert_array_equal(cc, b[::-1] + a * 3)


def test_regions_after_idle_pauses_wait_for_each_loop_not_for_each_thread():
    # After a pause longer than the spin the worker sleeps: it is woken by each call and often
    # claims late, joining at the loop the caller has reached (or not at all).
    a = rand((N,))
    b, cc = np.zeros(N, np.float32), np.zeros(N, np.float32)
    k = run(_three_loops("pool_pause"), a, b, cc, threads=2)
    assert k.llvm_ir.count(f"call void @{pool.WAIT}") >= 1 and "GOMP" not in k.llvm_ir
    for n in range(30):
        time.sleep(0.001 * (n % 3))
        b[...] = 0
        cc[...] = 0
        k(a, b, cc)
        _check(a, b, cc)


def test_idle_workers_give_up_the_core_soon_after_a_region():
    # A worker spins a little after each region (the next one often follows at once), then sleeps:
    # an idle model must not keep the other core busy.
    a = rand((N,))
    b, cc = np.zeros(N, np.float32), np.zeros(N, np.float32)
    k = run(_three_loops("pool_idle"), a, b, cc, threads=2)
    for _ in range(20):
        k(a, b, cc)
    _check(a, b, cc)
    cpu0 = time.process_time()
    time.sleep(0.5)
    assert time.process_time() - cpu0 < 0.15


def test_two_callers_at_once_each_get_their_own_results():
    # The second caller finds the pool busy and runs its region alone.
    kernels = [build(_three_loops(f"pool_caller{t}")) for t in range(2)]
    errors = []

    def caller(t):
        rng = np.random.default_rng(t)
        k = kernels[t]
        k.threads = 2
        try:
            for _ in range(200):
                a = rng.standard_normal(N).astype(np.float32)
                b, cc = np.zeros(N, np.float32), np.zeros(N, np.float32)
                k(a, b, cc)
                _check(a, b, cc)
        except AssertionError as err:      # pragma: no cover - the failure this test looks for
            errors.append(err)

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not errors, errors[0]


def test_a_failing_thread_does_not_leave_the_others_waiting_for_its_loop():
    # Out of bounds in the first loop: a thread that fails never reports its chunk done, so a
    # thread waiting for that loop must see the region's status instead.
    X, Y = buf("X", (N,)), buf("Y", (N,))
    i, j = Var("i"), Var("j")
    bad = Binary(BinOp.ADD, i, Const(N - 5, "int32"))
    f = PrimFunc("pool_fail", (X, Y), seq(loop(i, N, st(Y, (Binary(BinOp.MOD, bad, Const(N + 3, "int32")),), ld(X, i)),
                                               PARALLEL),
                                          loop(j, N, st(X, (j,), ld(Y, j) + c(1.0)), PARALLEL)))
    k = build(f, checked=True)
    for threads in (2, 3):
        k.threads = threads
        for _ in range(5):
            t0 = time.perf_counter()
            with pytest.raises(OutOfBoundsError, match="store to Y"):
                k(rand((N,)), np.zeros(N, np.float32))
            assert time.perf_counter() - t0 < 5.0
    ok = build(_three_loops("pool_after_fail"))
    ok.threads = 2
    a, b, cc = rand((N,)), np.zeros(N, np.float32), np.zeros(N, np.float32)
    ok(a, b, cc)
    _check(a, b, cc)


def test_a_forked_child_starts_its_own_workers():
    a = rand((N,))
    b, cc = np.zeros(N, np.float32), np.zeros(N, np.float32)
    k = run(_three_loops("pool_fork"), a, b, cc, threads=2)       # the parent's workers exist
    _check(a, b, cc)
    pid = os.fork()
    if pid == 0:                                                   # pragma: no cover - the child
        code = 1
        try:
            alone = len(os.listdir("/proc/self/task"))               # fork copies only the caller
            b[...] = 0
            cc[...] = 0
            k(a, b, cc)
            code = 0 if np.array_equal(b, a[::-1] * 3 - 1) and np.array_equal(cc, b[::-1] + a * 3) else 2
            if code == 0 and len(os.listdir("/proc/self/task")) != alone + 1:
                code = 3                                             # no worker of its own
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in a parallel region")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("omp, workers", [("1", 0), ("3", 2)])
def test_thread_count_zero_takes_omp_num_threads(omp, workers):
    # A library built with threads 0 passes 0: the pool's team is OMP_NUM_THREADS, else the cores.
    out = run_python(textwrap.dedent(f"""
        import os
        os.environ["OMP_NUM_THREADS"] = "{omp}"
        import ctypes, numpy as np
        from tests.test_pool import N, _three_loops, _check
        from tensorir.runtime import build
        k = build(_three_loops("pool_default"))
        before = len(os.listdir("/proc/self/task"))
        a, b, cc = np.arange(N, dtype=np.float32), np.zeros(N, np.float32), np.zeros(N, np.float32)
        status = k._cfunc(*(x.ctypes.data for x in (a, b, cc)), 0)
        _check(a, b, cc)
        print(status, len(os.listdir("/proc/self/task")) - before)
    """))
    assert out.split() == ["0", str(workers)]


@pytest.mark.skipif(not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")), reason="no C compiler")
def test_an_exported_parallel_kernel_carries_its_pool(tmp_path):
    f = _three_loops("pool_export")
    k = build(f)
    path = tmp_path / "libpool_export.so"
    k.export_library(path)
    needed = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    assert "libgomp" not in needed
    symbols = subprocess.run(["nm", str(path)], capture_output=True, text=True, check=True).stdout
    assert pool.PARALLEL in symbols                         # inside the library, not imported
    loaded = load_library(path, f)
    a = rand((N,))
    for threads in (1, 2, 3):
        loaded.threads = threads
        b, cc = np.zeros(N, np.float32), np.zeros(N, np.float32)
        loaded(a, b, cc)
        _check(a, b, cc)
