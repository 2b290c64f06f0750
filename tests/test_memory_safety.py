"""Memory safety: never a crash, never a wrong answer.

- Heap allocations of generated code are checked: a kernel whose buffer cannot
  be allocated raises ``MemoryError`` (:class:`AllocationError`) naming the
  buffer and its bytes, from the call or, when the size is known to be too
  large, from the build; a failing kernel frees what it allocated, also in
  parallel regions.  Code that could crash runs in a subprocess (a crash fails
  the test instead of killing pytest), and nothing here allocates more than
  ~100 MB: allocations are refused at build time, or made to fail with
  ``RLIMIT_AS``.
- Checked builds (``build(..., checked=True)``) raise :class:`OutOfBoundsError`
  on loads and stores out of bounds (scalar, vector, masked, gather/scatter,
  parallel), and none on valid schedules (every primitive's golden schedule,
  random schedules, tuner space candidates).
- The tuner's runner turns a failing status into an error of that candidate.
- The CLI refuses workloads whose tensors cannot fit in one line, exit 2.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from schedules import Schedule, ScheduleError
from tensorir import te
from tensorir.codegen.types import CodegenError
from tensorir.runtime import AllocationError, MemoryLimits, OutOfBoundsError, build, compile_func, load_library, safety
from tensorir.te.expr import Binary, BinOp, Const, Var
from tensorir.tir.ir import Allocate, IfThenElse, PrimFunc, Scope, seq
from tests.loopir import PARALLEL, VECTORIZED, buf, c, ld, loop, rand, st

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Run in a fresh interpreter: limit_address_space(extra) caps this process's
# address space at what it maps now plus `extra` bytes, so large allocations
# fail (return NULL) without touching memory.
PRELUDE = """
import resource
import numpy as np

def limit_address_space(extra):
    with open("/proc/self/status") as f:
        used = int(f.read().split("VmSize:")[1].split()[0]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (used + extra, resource.RLIM_INFINITY))

def unlimit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
"""


def run_python(code: str, timeout: float = 240) -> str:
    """Run ``code`` in a fresh interpreter; its stdout.  A crash or a nonzero exit fails the test."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(ROOT), check=False)
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    assert proc.returncode == 0, f"subprocess ended with {how}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def I(v):   # an int32 constant
    return Const(v, "int32")


def add(a, b):
    return Binary(BinOp.ADD, a, b)


def mul(a, b):
    return Binary(BinOp.MUL, a, b)


def lt(a, b):
    return Binary(BinOp.LT, a, b)


i, j = Var("i", "int32"), Var("j", "int32")

# ============================================================ allocations

HUGE = """
from tensorir import te
from schedules import Schedule
from tensorir.runtime import AllocationError, MemoryLimits, build

def huge(parallel=False):
    A = te.placeholder((64,), "float32", "A")
    T = te.compute((64, 250_000_000), lambda i, j: A[i] * 2.0, "T")    # 64,000,000,000 bytes
    k = te.reduce_axis(250_000_000, "k")
    C = te.compute((64,), lambda i: te.sum(T[i, k], axis=k), "C")
    s = Schedule([A, C])
    return s.parallel("T.i").parallel("C.i") if parallel else s
"""


def huge_intermediate():
    ns = {}
    exec(HUGE, ns)      # noqa: S102 - the same source the subprocesses run
    return ns["huge"]()


def test_huge_intermediate_is_refused_at_build_under_a_cap():
    with pytest.raises(AllocationError) as err:
        huge_intermediate().build(memory=MemoryLimits(max_bytes=1 << 30))
    msg = str(err.value)
    assert isinstance(err.value, MemoryError) and "\n" not in msg
    assert "kernel 'C'" in msg and "buffer 'T'" in msg and "64,000,000,000 bytes" in msg, msg
    assert "MemoryLimits.max_bytes" in msg
    assert (err.value.buffer, err.value.nbytes) == ("T", 64_000_000_000)


def test_huge_intermediate_is_refused_at_build_by_the_memory_available():
    out = run_python(HUGE + """
limit_address_space(1 << 30)         # whatever the machine has, this process may map 1 GiB more
try:
    huge().build()
except AllocationError as err:
    print("refused:", err)
""")
    assert "refused: kernel 'C': buffer 'T' (intermediate, 64x250000000 float32) needs 64,000,000,000 bytes" in out
    assert "RLIMIT_AS" in out


@pytest.mark.parametrize("parallel", [False, True])
def test_huge_intermediate_call_raises_memory_error(parallel):
    """Not refused at build (limits off): aligned_alloc returns NULL and the call raises, no segfault."""
    out = run_python(HUGE + f"""
kernel = huge({parallel}).build(memory=MemoryLimits(available=False))
limit_address_space(1 << 30)
a, c = np.ones(64, np.float32), np.zeros(64, np.float32)
for _ in range(3):
    try:
        kernel(a, c)
    except MemoryError as err:
        print(type(err).__name__ + ": " + str(err))
""")
    lines = out.strip().splitlines()
    assert len(lines) == 3 and lines[0] == lines[2], out
    assert lines[0].startswith("AllocationError: kernel 'C': buffer 'T' (intermediate, 64x250000000 float32) "
                               "needs 64,000,000,000 bytes (59.6 GiB); allocating it failed"), out


# A kernel allocating a (64 MiB) and then b (600 MiB), touching one page of each
# (their data flow through memory, so LLVM cannot remove the allocations): under
# a 512 MiB address-space headroom b fails.  If a failing call leaked a, twenty
# calls would leak 1.3 GiB and a's own allocation would start failing.
# y[i] = x[7 - i] + 1.5.
LEAK = """
from tensorir.te.expr import Binary, BinOp, Const, Var
from tensorir.tir.ir import Allocate, PrimFunc, Scope, seq
from tensorir.runtime import AllocationError, MemoryLimits, build
from tests.loopir import PARALLEL, SERIAL, buf, c, ld, loop, st

def leaky(scope, kind):
    i, k, k2, n = (Var(v, "int32") for v in ("i", "k", "k2", "n"))
    x, y = buf("x", (8,)), buf("y", (8,))
    a, b = buf("a", (16 << 20,), scope=scope), buf("b", (150 << 20,), scope=scope)
    mul = lambda e, f: Binary(BinOp.MUL, e, Const(f, "int32"))
    rev = Binary(BinOp.SUB, Const(7, "int32"), k2)
    fill = seq(loop(k, 8, st(a, (mul(k, 4096),), ld(x, k))),
               loop(k2, 8, st(b, (mul(k2, 65536),), ld(a, mul(rev, 4096)))))
    add_half = loop(n, 8, st(y, (n,), ld(y, n) + c(0.5)), kind)
    if scope is Scope.LOCAL:        # per-iteration buffers: inside the parallel loop's worker
        work = Allocate(a, Allocate(b, seq(fill, st(y, (i,), ld(b, mul(i, 65536)) + c(1.0)))))
        body = seq(loop(i, 8, work, kind), add_half)
    else:
        body = Allocate(a, Allocate(b, seq(fill, loop(i, 8, st(y, (i,), ld(b, mul(i, 65536)) + c(1.0)), kind),
                                           add_half)))
    return PrimFunc("leaky", (x, y), body)

def kernel(scope, kind):
    k = build(leaky(scope, kind), memory=MemoryLimits(available=False))
    calls = k.llvm_ir.count("@aligned_alloc(") - 1      # (and its declaration)
    assert calls >= 2, "LLVM removed the allocations"
    return k

x = np.arange(8, dtype=np.float32)
expected = x[::-1] + 1.5
"""


@pytest.mark.parametrize("scope,kind", [("GLOBAL", "SERIAL"), ("GLOBAL", "PARALLEL"), ("LOCAL", "SERIAL"),
                                        ("LOCAL", "PARALLEL")])
def test_failed_call_frees_what_it_allocated_and_the_kernel_still_works(scope, kind):
    out = run_python(LEAK + f"""
k = kernel(Scope.{scope}, {kind})
y = np.zeros(8, np.float32)
k(x, y)                             # the first call starts libgomp's threads without a limit
assert (y == expected).all(), y
limit_address_space(512 << 20)
names = set()
for _ in range(20):
    try:
        k(x, y)
    except AllocationError as err:
        names.add(err.buffer)
print("failed on", sorted(names))
unlimit_address_space()
y[:] = 0
k(x, y)
print("then", (y == expected).all())
""")
    assert "failed on ['b']" in out, out
    assert "then True" in out, out


def test_buffers_allocated_at_the_same_time_are_refused_together():
    x = buf("x", (4,))
    a, b = buf("a", (150 << 20,), scope=Scope.GLOBAL), buf("b", (150 << 20,), scope=Scope.GLOBAL)
    use = seq(st(a, (0,), c(1.0)), st(b, (0,), c(1.0)), st(x, (0,), ld(a, 0) + ld(b, 0)))
    nested = PrimFunc("nested", (x,), Allocate(a, Allocate(b, use)))
    cap = MemoryLimits(max_bytes=1 << 30, available=False)     # each 600 MiB fits, both do not
    with pytest.raises(AllocationError, match=r"kernel 'nested': buffers 'a', 'b' are allocated at the same "
                                              r"time and need 1,258,291,200 bytes \(1.2 GiB\) together"):
        compile_func(nested, memory=cap)
    one_after_other = PrimFunc("sequential", (x,), seq(Allocate(a, st(a, (0,), c(1.0))),
                                                       Allocate(b, st(b, (0,), c(1.0)))))
    compile_func(one_after_other, memory=cap)        # builds (not called: it would map 1.2 GiB)


def test_cached_kernel_is_checked_against_the_limit_again():
    x = buf("x", (4,))
    a = buf("a", (1 << 20,), scope=Scope.GLOBAL)
    f = PrimFunc("cached_alloc", (x,), Allocate(a, seq(st(a, (0,), c(3.0)), st(x, (0,), ld(a, 0)))))
    k = build(f)
    assert build(f) is k
    with pytest.raises(AllocationError, match="'a'"):
        build(f, memory=MemoryLimits(max_bytes=1 << 20))
    out = np.zeros(4, np.float32)
    k(out)
    assert out[0] == 3.0


def test_memory_limits_validation():
    with pytest.raises(ValueError, match="max_bytes"):
        MemoryLimits(max_bytes=-1)
    assert MemoryLimits(max_bytes=5, available=False).limit() == (5, "the cap MemoryLimits.max_bytes")
    assert MemoryLimits(available=False).limit()[0] is None


def test_loops_too_long_for_32_bit_indices_are_refused():
    A = te.placeholder((3, 1_000_000_000), "float32", "A")
    B = te.compute((3, 1_000_000_000), lambda i, j: A[i, j] * 2.0, "B")
    with pytest.raises(ScheduleError, match=r"^fuse: .* would make a loop of 3,000,000,000 iterations"):
        Schedule([A, B]).fuse("B.i", "B.j")     # a schedule cannot make such a loop; loop IR can
    y = buf("y", (1,))
    f = PrimFunc("B", (y,), loop(Var("B.i_j_fused", "int32"), 3_000_000_000, st(y, (0,), c(1.0))))
    with pytest.raises(CodegenError, match=r"loop 'B.i_j_fused' has extent 3,000,000,000; index arithmetic "
                                           r"is 32-bit"):
        compile_func(f)
    x = buf("x", (1 << 31,))
    with pytest.raises(CodegenError, match=r"buffer 'x' has shape 2147483648"):
        compile_func(PrimFunc("long", (x,), st(x, (0,), c(1.0))))


def test_default_build_has_no_bound_checks_and_one_check_per_allocation():
    s = Schedule(huge_intermediate().tensors)     # (not called)
    k = s.build(memory=MemoryLimits(available=False))
    ir_text = k.llvm_ir
    assert not k.checked
    assert ir_text.count("tensortune_oob") == 1          # the record's definition, never written
    assert re.search(r"define .*i32 @C\(", ir_text)
    assert ir_text.count("icmp eq ptr") == 1             # the one allocation's NULL check


# ============================================================ checked builds

Y, X = buf("Y", (5, 7)), buf("X", (5, 7))


def expect_oob(func, message, *arrays):
    k = build(func, checked=True)
    assert k.checked
    arrays = arrays or (rand((5, 7)), np.zeros((5, 7), np.float32))
    with pytest.raises(OutOfBoundsError) as err:
        k(*arrays)
    assert isinstance(err.value, IndexError)
    assert str(err.value) == message
    return err.value


def test_checked_scalar_store_out_of_bounds_is_not_executed():
    f = PrimFunc("Y", (X, Y), loop(i, 5, loop(j, 8, st(Y, (i, j), ld(X, i, 0)))))
    big = np.full((6, 7), -1.0, np.float32)          # Y is big[:5]: Y[4, 7] would land in big[5, 0]
    f2 = PrimFunc("Y", (X, Y), loop(i, 5, st(Y, (4, add(i, I(3))), c(9.0))))
    err = expect_oob(f, "kernel 'Y': store to Y[0, 7] out of bounds (shape 5x7)")
    assert (err.buffer, err.access, err.indices, err.shape) == ("Y", "store", (0, 7), (5, 7))
    expect_oob(f2, "kernel 'Y': store to Y[4, 7] out of bounds (shape 5x7)", rand((5, 7)), big[:5])
    assert (big[5] == -1.0).all() and big[4, 3:].tolist() == [9.0] * 4


def test_checked_scalar_load_out_of_bounds():
    f = PrimFunc("Y2", (X, Y), loop(i, 5, loop(j, 7, st(Y, (i, j), ld(X, add(i, I(1)), j)))))
    expect_oob(f, "kernel 'Y2': load from X[5, 0] out of bounds (shape 5x7)")
    neg = PrimFunc("Y2n", (X, Y), loop(i, 5, loop(j, 7, st(Y, (i, j), ld(X, i, add(j, I(-1)))))))
    expect_oob(neg, "kernel 'Y2n': load from X[0, -1] out of bounds (shape 5x7)")


def test_checked_vector_load_and_store_out_of_bounds():
    load = PrimFunc("V1", (X, Y), loop(i, 5, loop(j, 7, st(Y, (i, j), ld(X, i, add(j, I(1)))), VECTORIZED)))
    expect_oob(load, "kernel 'V1': load from X[0, 7] out of bounds (shape 5x7)")
    store = PrimFunc("V2", (X, Y), loop(i, 5, loop(j, 8, st(Y, (i, j), c(1.0)), VECTORIZED)))
    expect_oob(store, "kernel 'V2': store to Y[0, 7] out of bounds (shape 5x7)")
    gather = PrimFunc("V3", (X, Y), loop(i, 5, loop(j, 7, st(Y, (i, j), ld(X, mul(i, I(2)), j)), VECTORIZED)))
    expect_oob(gather, "kernel 'V3': load from X[6, 0] out of bounds (shape 5x7)")
    scatter = PrimFunc("V4", (X, Y), loop(i, 5, loop(j, 7, st(Y, (j, i), ld(X, i, j)), VECTORIZED)))
    expect_oob(scatter, "kernel 'V4': store to Y[5, 0] out of bounds (shape 5x7)")


def test_checked_masked_lanes_are_checked_only_when_enabled():
    x = rand((5, 7))
    ok = PrimFunc("M1", (X, Y), loop(i, 5, loop(j, 7, IfThenElse(lt(j, I(6)), st(Y, (i, add(j, I(1))),
                                                                                 ld(X, i, j))), VECTORIZED)))
    y = np.zeros((5, 7), np.float32)
    build(ok, checked=True)(x, y)
    np.testing.assert_array_equal(y[:, 1:], x[:, :6])
    bad = PrimFunc("M2", (X, Y), loop(i, 5, loop(j, 7, IfThenElse(lt(j, I(7)), st(Y, (i, add(j, I(1))),
                                                                                  ld(X, i, j))), VECTORIZED)))
    expect_oob(bad, "kernel 'M2': store to Y[0, 7] out of bounds (shape 5x7)")
    # a lane-independent (scalar) access under a lane mask: checked when some lane is enabled
    never = PrimFunc("M3", (X, Y), loop(i, 5, loop(j, 7, IfThenElse(lt(j, I(0)), st(Y, (i, 9), c(1.0))),
                                                    VECTORIZED)))
    build(never, checked=True)(x, y)
    some = PrimFunc("M4", (X, Y), loop(i, 5, loop(j, 7, IfThenElse(lt(j, I(3)), st(Y, (i, 9), c(1.0))),
                                                   VECTORIZED)))
    expect_oob(some, "kernel 'M4': store to Y[0, 9] out of bounds (shape 5x7)")
    # the untaken branch of a select is not evaluated
    sel = PrimFunc("M5", (X, Y), loop(i, 5, loop(j, 7, st(Y, (i, j), te.if_then_else(
        lt(j, I(6)), ld(X, i, add(j, I(1))), c(0.0))))))
    build(sel, checked=True)(x, y)
    np.testing.assert_array_equal(y[:, :6], x[:, 1:])


def test_checked_out_of_bounds_in_a_parallel_region_and_a_local_buffer():
    f = PrimFunc("P1", (X, Y), seq(loop(i, 5, loop(j, 7, st(Y, (i, j), ld(X, i, j))), PARALLEL),
                                   loop(i, 5, st(Y, (i, add(i, I(3))), c(1.0)), PARALLEL)))
    err = expect_oob(f, "kernel 'P1': store to Y[4, 7] out of bounds (shape 5x7)")
    assert err.indices == (4, 7)
    t = buf("t", (4,), scope=Scope.LOCAL)
    g = PrimFunc("P2", (X, Y), loop(i, 5, Allocate(t, seq(loop(j, 4, st(t, (j,), ld(X, i, j)), VECTORIZED),
                                                          loop(j, 7, st(Y, (i, j), ld(t, j))))), PARALLEL))
    expect_oob(g, "kernel 'P2': load from t[4] out of bounds (shape 4)")
    # the same kernel object still runs a valid call after an error (no thread left waiting)
    k = build(PrimFunc("P3", (X, Y), loop(i, 5, loop(j, 7, st(Y, (i, j), ld(X, i, j))), PARALLEL)), checked=True)
    x, y = rand((5, 7)), np.zeros((5, 7), np.float32)
    k(x, y)
    np.testing.assert_array_equal(x, y)


def test_checked_kernels_are_cached_apart_and_bind_checks_too():
    f = PrimFunc("C1", (X, Y), loop(i, 5, loop(j, 8, st(Y, (i, j), c(1.0)))))
    plain, checked = build(f), build(f, checked=True)
    assert plain is not checked and build(f, checked=True) is checked and build(f) is plain
    assert not plain.checked and checked.checked
    run = checked.bind(rand((5, 7)), np.zeros((5, 7), np.float32))
    with pytest.raises(OutOfBoundsError, match=r"store to Y\[0, 7\]"):
        run()


@pytest.mark.skipif(not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")), reason="no C compiler")
def test_checked_kernel_exported_as_a_library_reports_errors(tmp_path):
    f = PrimFunc("L1", (X, Y), loop(i, 5, loop(j, 7, st(Y, (i, j), ld(X, i, add(j, I(2)))), VECTORIZED)))
    build(f, checked=True).export_library(tmp_path / "l1.so")
    k = load_library(tmp_path / "l1.so", f)
    assert k.checked
    with pytest.raises(OutOfBoundsError, match=r"^kernel 'L1': load from X\[0, 7\] out of bounds \(shape 5x7\)$"):
        k(rand((5, 7)), np.zeros((5, 7), np.float32))


def _primitive_cases():
    from tests.test_primitives import CASES
    return CASES


@pytest.mark.parametrize("name", sorted(_primitive_cases()))
def test_checked_build_of_every_primitive_schedule_runs_and_agrees(name):
    """No false positives: the golden schedule of each primitive, checked, computes what it computes unchecked."""
    from tests.conftest import random_inputs
    s = _primitive_cases()[name]()
    func = s.lower()
    ins = random_inputs(s.tensors)
    results = []
    for checked in (False, True):
        outs = [np.full(t.shape, np.nan, t.dtype) for t in s.tensors if not t.is_placeholder]
        build(func, checked=checked)(*ins, *outs)
        results.append(outs)
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("test", ["test_random_matmul_schedules", "test_random_conv2d_schedules",
                                  "test_random_softmax_schedules"])
def test_checked_build_of_random_schedules(monkeypatch, test):
    """The property tests' random schedules, built checked: no access out of bounds, same numbers."""
    from tests import conftest, test_property

    def run_checked(sch, seed=0):
        ins = conftest.random_inputs(sch.tensors, seed)
        outs = [np.full(t.shape, np.nan if t.dtype != "int32" else -7, dtype=t.dtype)
                for t in sch.tensors if not t.is_placeholder]
        kernel = build(sch.lower(), checked=True)
        assert kernel.checked
        kernel(*ins, *outs)
        return ins, outs
    monkeypatch.setattr(test_property, "run_schedule", run_checked)
    getattr(test_property, test)()


@pytest.mark.parametrize("workload,items", [("matmul", ["M=37", "N=75", "K=29"]),
                                            ("dense", ["batch=7", "in_features=45", "out_features=70"]),
                                            ("conv2d", ["C=5", "H=13", "W=11", "K=9"]),
                                            ("softmax", ["rows=7", "cols=75"])])
def test_checked_build_of_tuner_candidates(workload, items):
    """Candidates of the generated search space (packs in tasks, rfactor, register tiles), checked."""
    from schedules.errors import ScheduleError
    from schedules.space import FixedDecisions, GeneratedSpace, RandomDecisions
    from tuner.spec import WorkloadSpec
    spec = WorkloadSpec.parse(workload, items)
    space = GeneratedSpace(spec.tensors())
    ins = spec.inputs(0)
    want = spec.reference(ins)
    # the tuner's heuristic first trial, then random ones (seed 0 of dense is a 10 s compile either way)
    for src in [FixedDecisions(space.default_decisions())] + [RandomDecisions(seed) for seed in (1, 2, 3)]:
        try:
            func = space.apply(src).lower()
        except ScheduleError:
            continue
        outs = spec.empty_outputs()
        build(func, checked=True)(*ins, *outs)
        for got, ref in zip(outs, want):
            np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


# ============================================================ the tuner's runner

def test_runner_reports_a_failed_allocation_as_a_memory_error_of_the_candidate():
    out = run_python(LEAK + """
from dataclasses import asdict
from tuner.measure import MeasureConfig
from tuner.worker import _Runner, _error_reply
from tensorir.runtime import compile_module

func = kernel(Scope.GLOBAL, SERIAL).func
_, obj, omp = compile_module(func, memory=MemoryLimits(available=False))
runner = _Runner({"config": asdict(MeasureConfig(repeat=2, min_repeat_ms=1.0)), "inputs": [x],
                  "reference": [expected], "output_names": ["y"],
                  "output_dtypes": ["float32"], "reduction_length": 1, "threads": 1})
job = {"func": func, "object": obj, "uses_openmp": omp, "budget_s": 20.0}
print("ok:", "costs" in runner.run(job))
limit_address_space(512 << 20)
try:
    runner.run(job)
except MemoryError as err:
    print("error:", _error_reply("memory", err)[1])
""")
    assert "ok: True" in out, out
    assert "error: {'error_kind': 'memory', 'error_msg': \"AllocationError: kernel 'leaky': buffer 'b'" in out, out


def test_runner_counts_no_call_that_failed():
    """A status returned by any timed call (not only the first) fails the candidate."""
    from tuner.worker import _Runner
    runner = _Runner.__new__(_Runner)
    runner.np = np
    runner.cfg = {"check": False, "flush_cache": False, "number": None, "min_repeat_ms": 1.0, "repeat": 3}
    runner.outputs, runner.flush = [np.zeros(2, np.float32)], None
    calls = []

    def cfunc(*args):
        calls.append(1)
        return 3 if len(calls) == 5 else 0

    class Sites:
        def error(self, status):
            return AllocationError(f"site {status} failed")
    with pytest.raises(AllocationError, match="site 3 failed"):
        runner._measure(cfunc, (), budget=10.0, t_start=__import__("time").perf_counter(), sites=Sites())


# ============================================================ the command line

BIG = """
from tensorir import te

def huge_input(n=80000, m=1000000):
    A = te.placeholder((n, m), "float32", "A")                  # 298 GiB
    return [A, te.compute((n, m), lambda i, j: A[i, j] * 2.0, "B")]

def huge_intermediate():
    A = te.placeholder((64,), "float32", "A")
    T = te.compute((64, 250_000_000), lambda i, j: A[i] * 2.0, "T")   # 64 GB
    k = te.reduce_axis(250_000_000, "k")
    return [A, te.compute((64,), lambda i: te.sum(T[i, k], axis=k), "C")]

def two_halves(n=1_500_000_000):
    A = te.placeholder((n,), "float32", "A")                    # 6 GB each, 12 GB together
    return [A, te.compute((n,), lambda i: A[i] + 1.0, "B")]
"""


@pytest.mark.parametrize("func,pattern", [
    ("huge_input", (r"workload big\.py:huge_input\(\): input tensor 'A' \(80000x1000000 float32\) needs "
                    r"320,000,000,000 bytes \(298\.0 GiB\), more than the 8\.0 GiB of memory available")),
    ("huge_intermediate", r"intermediate tensor 'T' \(64x250000000 float32\) needs 64,000,000,000 bytes"),
    ("two_halves", r"its tensors need 12,000,000,000 bytes \(11\.2 GiB\) together"),
])
def test_cli_refuses_tensors_that_cannot_fit_in_one_line(tmp_path, capsys, monkeypatch, func, pattern):
    from tuner.cli import main
    monkeypatch.setattr(safety, "available_memory", lambda: (8 << 30, "memory available (MemAvailable)"))
    (tmp_path / "big.py").write_text(BIG)
    code = main(["tune", f"{tmp_path / 'big.py'}:{func}", "--trials", "1", "--log", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tensortune: error: "), err
    assert re.search(pattern, lines[0]), lines[0]


def test_cli_report_on_a_directory_says_so(tmp_path, capsys):
    from tuner.cli import main
    code = main(["report", "--log", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == (f"tensortune: error: tuning log {tmp_path} is a directory; --log takes "
                                         f"a log file (e.g. {tmp_path}/tuning.jsonl)")


def test_cli_runner_that_cannot_start_is_one_line(tmp_path, capsys, monkeypatch):
    """E.g. inputs that fit here but not under the runner's MeasureConfig.memory_limit_mb."""
    from tuner import search
    from tuner.cli import main
    from tuner.worker import WorkerDied

    def run(self):
        raise WorkerDied("runner process failed to start: MemoryError: Unable to allocate 9.3 GiB\nfor an array")
    monkeypatch.setattr(search.Tuner, "run", run)
    code = main(["tune", "matmul", "M=8", "N=8", "K=8", "--trials", "1", "--quiet",
                 "--log", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("tensortune: error: cannot measure matmul(M=8, N=8, K=8): runner process failed to "
                          "start: MemoryError: Unable to allocate 9.3 GiB | for an array"), err
