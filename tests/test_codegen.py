"""Codegen tests: hand-written loop IR, compiled and compared with numpy."""
from __future__ import annotations

import importlib
import ctypes
import mmap
import shutil

import numpy as np
import pytest

from tensorir.runtime import jit, llvm as runtime
from tensorir.target import Target
from tensorir.runtime import Kernel, build, cache_info, clear_cache, compile_func, load_library
from tensorir.codegen import CodegenError, codegen
from tensorir.codegen.parallel import MIN_REGION_WORK, work
from tensorir.codegen import pool
import tensorir.codegen.parallel as parallel_codegen
from tensorir.te.expr import Binary, BinOp, Cast, Select, Unary, UnOp, Var
from tensorir.tir.ir import Allocate, IfThenElse, PrimFunc, Scope, seq

from tests.loopir import (PARALLEL, SERIAL, UNROLLED, VECTORIZED, _e, buf, c, ld, loop, prepared, rand, rng,  # noqa: F401
                          run, st)


def guarded(n, dtype="float32", at="start"):
    """An n-element array touching a PROT_NONE page: reading past ``at`` faults."""
    page = mmap.PAGESIZE
    nbytes = n * np.dtype(dtype).itemsize
    assert nbytes <= page
    mm = mmap.mmap(-1, 3 * page)
    raw = np.frombuffer(mm, dtype=np.uint8)
    base = raw.ctypes.data
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base, page, 0) == 0
    assert libc.mprotect(base + 2 * page, page, 0) == 0
    start = page if at == "start" else 2 * page - nbytes
    return raw[start:start + nbytes].view(dtype)   # its base chain keeps the mapping alive


# ---------------------------------------------------------------- elementwise

def add_func(n, kind, dtype="float32"):
    A, B, C = buf("A", (n,), dtype), buf("B", (n,), dtype), buf("C", (n,), dtype)
    i = Var("i")
    return PrimFunc(f"add_{kind.value}_{n}", (A, B, C),
                    loop(i, n, st(C, (i,), ld(A, i) + ld(B, i)), kind))


@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED, PARALLEL, UNROLLED])
@pytest.mark.parametrize("n", [1, 7, 8, 16, 37])
def test_elementwise_add(kind, n):
    a, b, out = rand(n), rand(n), np.zeros(n, np.float32)
    run(add_func(n, kind), a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_vectorized_loop_emits_vector_code():
    ir_text = str(codegen(add_func(16, VECTORIZED)))
    assert "<16 x float>" in ir_text
    assert "fadd contract <16 x float>" in ir_text


@pytest.mark.parametrize("dtype", ["float64", "int32"])
@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED])
def test_other_dtypes(dtype, kind):
    n = 13
    A, B, C = buf("A", (n,), dtype), buf("B", (n,), dtype), buf("C", (n,), dtype)
    i = Var("i")
    value = ld(A, i) * ld(B, i) - ld(A, i) + Binary(BinOp.MAX, ld(A, i), ld(B, i))
    f = PrimFunc("mix", (A, B, C), loop(i, n, st(C, (i,), value), kind))
    a, b, out = rand(n, dtype), rand(n, dtype), np.zeros(n, dtype)
    run(f, a, b, out)
    np.testing.assert_allclose(out, a * b - a + np.maximum(a, b), rtol=1e-12)


@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED])
def test_casts_and_loop_var_values(kind):
    n = 16
    A = buf("A", (n,), "int32")
    F, D, I = buf("F", (n,), "float32"), buf("D", (n,), "float64"), buf("I", (n,), "int32")
    i = Var("i")
    body = seq(
        st(F, (i,), Cast("float32", ld(A, i)) + Cast("float32", i)),
        st(D, (i,), Cast("float64", Cast("float32", ld(A, i)) * c(0.5))),
        st(I, (i,), Cast("int32", Cast("float32", ld(A, i)) * c(0.3))
           + Cast("int32", Binary(BinOp.LT, ld(A, i), _e(0)))),
    )
    f = PrimFunc("casts", (A, F, D, I), loop(i, n, body, kind))
    a = rand(n, "int32")
    fo, do, io = np.zeros(n, np.float32), np.zeros(n), np.zeros(n, np.int32)
    run(f, a, fo, do, io)
    np.testing.assert_array_equal(fo, a.astype(np.float32) + np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(do, (a.astype(np.float32) * np.float32(0.5)).astype(np.float64))
    expect = (a.astype(np.float32) * np.float32(0.3)).astype(np.int32) + (a < 0)
    np.testing.assert_array_equal(io, expect)


# ---------------------------------------------------------------- unary ops

UNARY_CASES = [
    (UnOp.EXP, np.exp, lambda x: x),
    (UnOp.LOG, np.log, lambda x: np.abs(x) + 0.1),
    (UnOp.SQRT, np.sqrt, lambda x: np.abs(x)),
    (UnOp.TANH, np.tanh, lambda x: x),
    (UnOp.SIGMOID, lambda x: 1 / (1 + np.exp(-x)), lambda x: x),
    (UnOp.ABS, np.abs, lambda x: x),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED])
@pytest.mark.parametrize("op,ref,domain", UNARY_CASES, ids=[u[0].value for u in UNARY_CASES])
def test_unary(op, ref, domain, kind, dtype):
    n = 8
    A, B = buf("A", (n,), dtype), buf("B", (n,), dtype)
    i = Var("i")
    f = PrimFunc(f"u_{op.value}", (A, B), loop(i, n, st(B, (i,), Unary(op, ld(A, i))), kind))
    a = domain(rand(n, dtype)).astype(dtype)
    out = np.zeros(n, dtype)
    run(f, a, out)
    np.testing.assert_allclose(out, ref(a), rtol=2e-6 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED])
def test_int_abs_and_not(kind):
    n = 16
    A, B = buf("A", (n,), "int32"), buf("B", (n,), "int32")
    i = Var("i")
    negative = Binary(BinOp.LT, ld(A, i), _e(0))
    value = Unary(UnOp.ABS, ld(A, i)) * _e(10) + Cast("int32", Unary(UnOp.NOT, negative))
    f = PrimFunc("iabs", (A, B), loop(i, n, st(B, (i,), value), kind))
    a, out = rand(n, "int32"), np.zeros(n, np.int32)
    run(f, a, out)
    np.testing.assert_array_equal(out, np.abs(a) * 10 + (a >= 0))


# ---------------------------------------------------------------- floor division

@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED])
def test_floor_div_mod_negative(kind):
    n = 32
    A, B = buf("A", (n,), "int32"), buf("B", (n,), "int32")
    Q, R, Q4, R4, Qn = (buf(x, (n,), "int32") for x in ("Q", "R", "Q4", "R4", "Qn"))
    i = Var("i")
    a_, b_ = ld(A, i), ld(B, i)
    body = seq(st(Q, (i,), Binary(BinOp.FLOORDIV, a_, b_)),
               st(R, (i,), Binary(BinOp.MOD, a_, b_)),
               st(Q4, (i,), Binary(BinOp.FLOORDIV, a_, _e(4))),
               st(R4, (i,), Binary(BinOp.MOD, a_, _e(4))),
               st(Qn, (i,), Binary(BinOp.FLOORDIV, a_, _e(-3)) + Binary(BinOp.MOD, a_, _e(-3))))
    f = PrimFunc("divmod", (A, B, Q, R, Q4, R4, Qn), loop(i, n, body, kind))
    a = rng.integers(-100, 100, n).astype(np.int32)
    a[:4] = [-1, -7, 7, 0]
    b = rng.integers(1, 9, n).astype(np.int32) * rng.choice([-1, 1], n).astype(np.int32)
    b[:4] = [2, 2, -2, -5]
    outs = [np.zeros(n, np.int32) for _ in range(5)]
    run(f, a, b, *outs)
    for got, want in zip(outs, [a // b, a % b, a // 4, a % 4, a // -3 + a % -3]):
        np.testing.assert_array_equal(got, want)


def test_floor_div_of_loop_vars():
    # Index math with // and % on the vector lane: its lanes a known pattern (decision 076), here
    # consecutive elements: one contiguous load, no gather
    n = 32
    A, B = buf("A", (n // 2, 2)), buf("B", (n,))
    i = Var("i")
    f = PrimFunc("unflatten", (A, B),
                 loop(i, n, st(B, (i,), ld(A, i // 2, i % 2)), VECTORIZED))
    text = str(codegen(f))
    assert "masked.gather" not in text and "load <32 x float>" in text
    a, out = rand((n // 2, 2)), np.zeros(n, np.float32)
    run(f, a, out)
    np.testing.assert_array_equal(out, a.ravel())


# ---------------------------------------------------------------- vector memory access

def test_transposed_gather_and_scatter():
    M, N = 8, 16
    A, B = buf("A", (M, N)), buf("B", (N, M))
    i, j = Var("i"), Var("j")
    # f: B[j, i] = A[i, j] (contiguous load, scatter); g reads B transposed (gather)
    f = PrimFunc("transpose", (A, B),
                 loop(i, M, loop(j, N, st(B, (j, i), ld(A, i, j)), VECTORIZED)))
    g = PrimFunc("transpose_back", (B, A),
                 loop(i, M, loop(j, N, st(A, (i, j), ld(B, j, i)), VECTORIZED)))
    assert "masked.scatter" in str(codegen(f))
    # decision 070: lanes a constant stride apart and no mask: a scalar load per lane, not a gather
    # of a vector of addresses (which LLVM scalarizes here by extracting each address)
    g_ir = str(codegen(g))
    assert "masked.gather" not in g_ir and g_ir.count("insertelement") >= N
    a, out = rand((M, N)), np.zeros((N, M), np.float32)
    run(f, a, out)
    np.testing.assert_array_equal(out, a.T)
    back = np.zeros((M, N), np.float32)
    run(g, out, back)
    np.testing.assert_array_equal(back, a)


def test_a_strided_load_under_a_lane_mask_stays_a_masked_gather():
    # masked-off lanes may lie outside the buffer: only a masked gather leaves them unread
    M, N, live = 8, 16, 11
    B, A = buf("B", (live, M)), buf("A", (M, N))
    i, j = Var("i"), Var("j")
    body = IfThenElse(Binary(BinOp.LT, j, _e(live)), st(A, (i, j), ld(B, j, i)))
    g = PrimFunc("transpose_some", (B, A), loop(i, M, loop(j, N, body, VECTORIZED)))
    assert "masked.gather" in str(codegen(g))
    b, out = rand((live, M)), np.zeros((M, N), np.float32)
    run(g, b, out)
    np.testing.assert_array_equal(out[:, :live], b.T)
    np.testing.assert_array_equal(out[:, live:], 0.0)


def test_broadcast_scalar_load_in_vector_loop():
    M, N = 4, 16
    A, x, B = buf("A", (M, N)), buf("x", (M,)), buf("B", (M, N))
    i, j = Var("i"), Var("j")
    f = PrimFunc("rowscale", (A, x, B),
                 loop(i, M, loop(j, N, st(B, (i, j), ld(A, i, j) * ld(x, i)), VECTORIZED)))
    a, xv, out = rand((M, N)), rand(M), np.zeros((M, N), np.float32)
    run(f, a, xv, out)
    np.testing.assert_array_equal(out, a * xv[:, None])


def tail_func(n, lanes, with_else):
    A, S, C = buf("A", (n,)), buf("S", (1,)), buf("C", (n,))
    o, v = Var("o"), Var("v")
    idx = o * lanes + v
    inside = Binary(BinOp.LT, idx, _e(n))
    then = st(C, (idx,), ld(A, idx) * c(2.0) + ld(S, 0))
    other = None
    if with_else:
        # lanes past the end clamp to the last element (reads stay in bounds)
        other = IfThenElse(Binary(BinOp.LT, idx, _e(n + 3)), st(C, (n - 1,), ld(A, n - 1)))
    body = IfThenElse(inside, then, other)
    outer = -(-n // lanes)
    return PrimFunc(f"tail{n}_{lanes}_{with_else}", (A, S, C),
                    loop(o, outer, loop(v, lanes, body, VECTORIZED)))


@pytest.mark.parametrize("n,lanes", [(37, 8), (37, 16), (5, 16), (64, 16)])
def test_masked_tail(n, lanes):
    f = tail_func(n, lanes, with_else=False)
    if n % lanes:
        assert "llvm.masked.load" in str(codegen(f))
        assert "llvm.masked.store" in str(codegen(f))
    a = guarded(n, at="end")
    a[:] = rand(n)
    s, out = np.array([0.5], np.float32), np.zeros(n, np.float32)
    run(f, a, s, out)
    np.testing.assert_array_equal(out, a * 2 + np.float32(0.5))


def test_masked_if_else_branches():
    n = 37
    f = tail_func(n, 16, with_else=True)
    a, s, out = rand(n), np.array([1.0], np.float32), np.zeros(n, np.float32)
    run(f, a, s, out)
    expect = a * 2 + np.float32(1.0)
    expect[-1] = a[-1]      # else-branch lanes (n .. n+2) store A[n-1] last
    np.testing.assert_array_equal(out, expect)


def test_lane_invariant_store_under_mask():
    n = 16
    A, out = buf("A", (n,)), buf("out", (2,))
    v = Var("v")
    body = seq(IfThenElse(Binary(BinOp.EQ, v, _e(5)), st(out, (0,), ld(A, v))),
               IfThenElse(Binary(BinOp.GT, v, _e(100)), st(out, (1,), c(7.0))))
    f = PrimFunc("pick", (A, out), loop(v, n, body, VECTORIZED))
    a, o = rand(n), np.array([0.0, -1.0], np.float32)
    run(f, a, o)
    assert o[0] == a[5] and o[1] == -1.0


def test_vectorized_with_inner_serial_loop_falls_back():
    n, m = 8, 5
    A, B = buf("A", (n, m)), buf("B", (n,))
    i, k = Var("i"), Var("k")
    body = seq(st(B, (i,), c(0.0)), loop(k, m, st(B, (i,), ld(B, i) + ld(A, i, k))))
    f = PrimFunc("rowsum", (A, B), loop(i, n, body, VECTORIZED))
    a, out = rand((n, m)), np.zeros(n, np.float32)
    run(f, a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)


# ---------------------------------------------------------------- select laziness

def pad_func(n, kind):
    A, P = buf("A", (n,)), buf("P", (n + 2,))
    i = Var("i")
    inside = Binary(BinOp.AND, Binary(BinOp.GE, i, _e(1)), Binary(BinOp.LT, i, _e(n + 1)))
    value = Select(inside, ld(A, i - 1), c(0.0))
    return PrimFunc(f"pad_{kind.value}", (A, P), loop(i, n + 2, st(P, (i,), value), kind))


@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED, UNROLLED])
@pytest.mark.parametrize("at", ["start", "end"])
def test_select_padding_never_reads_out_of_bounds(kind, at):
    n = 64
    a = guarded(n, at=at)      # A[-1] or A[n] sits on a PROT_NONE page
    a[:] = rand(n)
    out = np.full(n + 2, 9.0, np.float32)
    run(pad_func(n, kind), a, out)
    np.testing.assert_array_equal(out, np.pad(a, 1))


@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED])
def test_and_short_circuits_loads(kind):
    n = 16
    A, B = buf("A", (n,)), buf("B", (n + 4,))
    i = Var("i")
    cond = Binary(BinOp.AND, Binary(BinOp.LT, i, _e(n)), Binary(BinOp.GT, ld(A, i), c(0.0)))
    f = PrimFunc("guard", (A, B), loop(i, n + 4, st(B, (i,), Select(cond, c(1.0), c(-1.0))), kind))
    a = guarded(n, at="end")
    a[:] = rand(n)
    out = np.zeros(n + 4, np.float32)
    run(f, a, out)
    np.testing.assert_array_equal(out, np.r_[np.where(a > 0, 1.0, -1.0), [-1.0] * 4])


def test_select_pure_branches_and_min_max():
    n = 16
    A, B = buf("A", (n,)), buf("B", (n,))
    i = Var("i")
    a_ = ld(A, i)
    value = Select(Binary(BinOp.GT, a_, c(0.0)), Binary(BinOp.MIN, a_, c(0.5)),
                   Binary(BinOp.MAX, a_, c(-0.5)))
    f = PrimFunc("clip", (A, B), loop(i, n, st(B, (i,), value), VECTORIZED))
    a, out = rand(n), np.zeros(n, np.float32)
    run(f, a, out)
    np.testing.assert_array_equal(out, np.where(a > 0, np.minimum(a, 0.5), np.maximum(a, -0.5)))


# ---------------------------------------------------------------- matmul with a register tile

def matmul_func(M, N, K, outer=PARALLEL, ti=4, tj=16):
    A, B, C = buf("A", (M, K)), buf("B", (K, N)), buf("C", (M, N))
    Cl = buf("Cl", (ti, tj), scope=Scope.LOCAL)
    io, jo, k, ii, ji = Var("io"), Var("jo"), Var("k"), Var("ii"), Var("ji")
    i, j = io * ti + ii, jo * tj + ji

    def tile(stmt):
        return loop(ii, ti, loop(ji, tj, stmt, VECTORIZED), UNROLLED)
    body = Allocate(Cl, seq(
        tile(st(Cl, (ii, ji), c(0.0))),
        loop(k, K, tile(st(Cl, (ii, ji), ld(Cl, ii, ji) + ld(A, i, k) * ld(B, k, j)))),
        tile(st(C, (i, j), ld(Cl, ii, ji)))))
    return PrimFunc("matmul", (A, B, C), loop(io, M // ti, loop(jo, N // tj, body), outer))


@pytest.mark.parametrize("outer", [SERIAL, PARALLEL])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_register_tiled_matmul(outer, threads):
    M, N, K = 24, 48, 40
    f = matmul_func(M, N, K, outer)
    a, b, out = rand((M, K)), rand((K, N)), np.zeros((M, N), np.float32)
    k = run(f, a, b, out, threads=threads)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    # the 4x16 tile was promoted to registers (the trampoline's two affinity masks stay in memory:
    # system calls read them, spread.py)
    assert "alloca [" not in k.llvm_ir.replace("alloca [16 x i64]", "")
    assert (pool.PARALLEL in k.llvm_ir) == (outer is PARALLEL)


# ---------------------------------------------------------------- parallel + allocations

def test_parallel_with_local_allocation():
    M, N = 37, 512
    A, B = buf("A", (M, N)), buf("B", (M, N))
    tmp = buf("tmp", (N,), scope=Scope.LOCAL)
    i, j = Var("i"), Var("j")
    body = Allocate(tmp, seq(loop(j, N, st(tmp, (j,), ld(A, i, j) * c(2.0))),
                             loop(j, N, st(B, (i, j), ld(tmp, N - 1 - j) + c(1.0)))))
    f = PrimFunc("par_local", (A, B), loop(i, M, body, PARALLEL))
    a = rand((M, N))
    for threads in (1, 2, 4):
        out = np.zeros((M, N), np.float32)
        run(f, a, out, threads=threads)
        np.testing.assert_array_equal(out, a[:, ::-1] * 2 + 1)


def test_nested_parallel_runs_serially_inside():
    M, N = 6, 4000
    A, B = buf("A", (M, N)), buf("B", (M, N))
    i, j = Var("i"), Var("j")
    f = PrimFunc("nested", (A, B),
                 loop(i, M, loop(j, N, st(B, (i, j), ld(A, i, j) + c(1.0)), PARALLEL), PARALLEL))
    a, out = rand((M, N)), np.zeros((M, N), np.float32)
    k = run(f, a, out, threads=2)
    np.testing.assert_array_equal(out, a + 1)
    assert k.llvm_ir.count(f"call void @{pool.PARALLEL}") == 1


def test_consecutive_parallel_loops_share_one_region_with_a_barrier():
    # The second loop reads, reversed, what the first wrote: each thread needs
    # the other threads' blocks, so only the barrier between them makes it right.
    n = 1 << 16
    A, B, C = buf("A", (n,)), buf("B", (n,)), buf("C", (n,))
    T = buf("T", (n,), scope=Scope.GLOBAL)
    i, j, m = Var("i"), Var("j"), Var("m")
    body = Allocate(T, seq(loop(i, n, st(T, (i,), ld(A, i) * c(3.0)), PARALLEL),
                           loop(j, n, st(B, (j,), ld(T, n - 1 - j) - c(1.0)), PARALLEL),
                           loop(m, n, st(C, (m,), ld(B, n - 1 - m) + ld(T, m)), PARALLEL)))
    f = PrimFunc("two_par", (A, B, C), body)
    a = rand((n,))
    for threads in (1, 2, 3):
        b, cc = np.zeros(n, np.float32), np.zeros(n, np.float32)
        k = run(f, a, b, cc, threads=threads)
        np.testing.assert_array_equal(b, a[::-1] * 3 - 1)
        np.testing.assert_array_equal(cc, b[::-1] + a * 3)
    assert k.llvm_ir.count(f"call void @{pool.PARALLEL}") == 1
    assert f"call void @{pool.WAIT}" in k.llvm_ir   # (-O3 may duplicate the straight-line code)


@pytest.mark.parametrize("guided", [True, False])
def test_parallel_iterations_run_once_each(guided, monkeypatch):
    # Read-modify-write: an iteration claimed twice, or by no thread, changes the result. The
    # parallel loop sits in a serial one, so its region (and its chunk counter) starts 5 times
    # per call; 997 iterations do not divide among 2 or 3 threads.
    monkeypatch.setattr(parallel_codegen, "GUIDED", guided)
    R, n, w = 5, 997, 64
    A, B = buf("A", (R, n, w)), buf("B", (R, n, w))
    r, i, j = Var("r"), Var("i"), Var("j")
    f = PrimFunc(f"rmw_{guided}", (A, B),
                 loop(r, R, loop(i, n, loop(j, w, st(B, (r, i, j), ld(B, r, i, j) + ld(A, r, i, j) * c(2.0))),
                                 PARALLEL)))
    a = rand((R, n, w))
    for threads in (1, 2, 3):
        out = np.ones((R, n, w), np.float32)
        k = run(f, a, out, threads=threads)
        np.testing.assert_array_equal(out, np.float32(1) + a * np.float32(2))
    # guided regions run on the pool, static blocks on libgomp (every thread must run)
    assert k.llvm_ir.count(f"call void @{pool.PARALLEL if guided else 'GOMP_parallel'}") == 1
    assert ("cmpxchg" in k.llvm_ir) == guided


def test_parallel_captures_outer_loop_var():
    M, N = 4, 20001
    A, B = buf("A", (M, N)), buf("B", (M, N))
    i, j = Var("i"), Var("j")
    f = PrimFunc("inner_par", (A, B),
                 loop(i, M, loop(j, N, st(B, (i, j), ld(A, i, j) * Cast("float32", i)), PARALLEL)))
    a, out = rand((M, N)), np.zeros((M, N), np.float32)
    run(f, a, out, threads=2)
    np.testing.assert_array_equal(out, a * np.arange(M, dtype=np.float32)[:, None])


def test_small_parallel_loop_in_a_long_serial_loop_runs_serially():
    # One thread-team start per outer iteration would cost microseconds each
    # (hours for the fuzzer's 1.1e9-iteration nest): small regions run serially.
    M, N = 50000, 2
    A, B = buf("A", (M, N)), buf("B", (M, N))
    i, j = Var("i"), Var("j")
    f = PrimFunc("tiny_par", (A, B), loop(i, M, loop(j, N, st(B, (i, j), ld(A, i, j) + c(1.0)), PARALLEL)))
    a, out = rand((M, N)), np.zeros((M, N), np.float32)
    k = run(f, a, out, threads=2)
    np.testing.assert_array_equal(out, a + 1)
    assert pool.PARALLEL not in k.llvm_ir
    # the same loop with enough work per region keeps its thread team
    f = PrimFunc("big_par", (A, B), loop(i, M, loop(j, N, st(B, (i, j), ld(A, i, j) * c(2.0))), PARALLEL))
    k = run(f, a, out, threads=2)
    np.testing.assert_array_equal(out, a * 2)
    assert k.llvm_ir.count(f"call void @{pool.PARALLEL}") == 1


def test_region_work_counts_stores_of_every_loop_in_the_run():
    n = MIN_REGION_WORK // 2
    A, B = buf("A", (n,)), buf("B", (n,))
    i, j = Var("i"), Var("j")
    one = loop(i, n, st(B, (i,), ld(A, i)), PARALLEL)
    two = loop(j, n, st(A, (j,), ld(B, j)), PARALLEL)
    assert work(one) == n and work(seq(one, two)) == 2 * n
    assert pool.PARALLEL not in str(codegen(prepared(PrimFunc("one", (A, B), one))))
    assert pool.PARALLEL in str(codegen(prepared(PrimFunc("two", (A, B), seq(one, two)))))


@pytest.mark.parametrize("scope,n", [(Scope.GLOBAL, 100), (Scope.LOCAL, 20000)])
def test_heap_allocations(scope, n):
    # GLOBAL buffers and LOCAL ones above 64 KiB come from aligned_alloc.
    A, B = buf("A", (n,)), buf("B", (n,))
    T = buf("T", (n,), scope=scope)
    i = Var("i")
    body = Allocate(T, seq(loop(i, n, st(T, (i,), ld(A, i) * c(3.0)), PARALLEL),
                           loop(i, n, st(B, (i,), ld(T, n - 1 - i) - c(1.0)))))
    f = PrimFunc(f"heap_{scope.value}", (A, B), body)
    assert "aligned_alloc" in str(codegen(f))
    a, out = rand(n), np.zeros(n, np.float32)
    run(f, a, out, threads=2)
    np.testing.assert_array_equal(out, a[::-1] * 3 - 1)


# ---------------------------------------------------------------- argument checking

@pytest.fixture(scope="module")
def mm_kernel():
    return build(matmul_func(8, 16, 8, SERIAL))


def test_wrong_argument_count(mm_kernel):
    a, b = np.zeros((8, 8), np.float32), np.zeros((8, 16), np.float32)
    with pytest.raises(TypeError, match=r"kernel 'matmul' takes 3 arrays \(A, B, C\), got 2"):
        mm_kernel(a, b)


def test_wrong_argument_type_dtype_shape(mm_kernel):
    a, b, out = np.zeros((8, 8), np.float32), np.zeros((8, 16), np.float32), np.zeros((8, 16), np.float32)
    with pytest.raises(TypeError, match=r"argument 0 \('A'\) must be a numpy.ndarray, got list"):
        mm_kernel(a.tolist(), b, out)
    with pytest.raises(TypeError, match=r"argument 1 \('B'\) has dtype float64, expected float32"):
        mm_kernel(a, b.astype(np.float64), out)
    with pytest.raises(ValueError, match=r"kernel 'matmul': argument 2 \('C'\) has shape \(8, 15\), "
                                         r"expected \(8, 16\)"):
        mm_kernel(a, b, out[:, :15].copy())


def test_non_contiguous_readonly_and_overlap(mm_kernel):
    a, b, out = np.zeros((8, 8), np.float32), np.zeros((8, 16), np.float32), np.zeros((8, 16), np.float32)
    with pytest.raises(ValueError, match=r"argument 0 \('A'\) is not C-contiguous"):
        mm_kernel(np.zeros((8, 8), np.float32).T, b, out)
    ro = out.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"argument 2 \('C'\) is written by the kernel"):
        mm_kernel(a, b, ro)
    b.flags.writeable = False     # inputs may be read-only
    mm_kernel(a, b, out)
    with pytest.raises(ValueError, match=r"arguments 1 \('B'\) and 2 \('C'\) overlap"):
        mm_kernel(a, out, out)


def test_threads_setting(mm_kernel):
    assert mm_kernel.threads == Target.host().cores
    with pytest.raises(ValueError, match="positive"):
        mm_kernel.threads = 0


def test_codegen_errors():
    A = buf("A", (4,))
    i, j = Var("i"), Var("j")
    with pytest.raises(CodegenError, match="variable 'j'"):
        codegen(PrimFunc("unbound", (A,), loop(i, 4, st(A, (j,), c(1.0)))))
    with pytest.raises(CodegenError, match="float64 value into float32"):
        codegen(PrimFunc("badstore", (A,), loop(i, 4, st(A, (i,), c(1.0, "float64")))))
    T = buf("T", (4,), scope=Scope.LOCAL)
    with pytest.raises(CodegenError, match="'T' is used outside its allocation"):
        codegen(PrimFunc("noalloc", (A,), loop(i, 4, st(A, (i,), ld(T, i)))))


# ---------------------------------------------------------------- cache, target, export

def test_cache_returns_same_kernel():
    clear_cache()
    k1 = build(add_func(11, VECTORIZED))
    k2 = build(add_func(11, VECTORIZED))      # a structurally equal, distinct object
    assert k1 is k2
    info = cache_info()
    assert info["hits"] == 1 and info["misses"] == 1
    k3 = build(add_func(11, VECTORIZED), name="renamed")
    assert k3 is not k1 and k3.name == "renamed"
    assert compile_func(add_func(11, VECTORIZED)) is not k1


def test_host_target_and_libgomp():
    host = Target.host()
    assert host.cpu and "+" in host.features
    assert host.vector_bits in (128, 256, 512)
    assert host.cores >= 1 and host.threads == host.cores
    assert Target.host(1).threads == 1 and Target.host(1).cpu == host.cpu
    assert host.record() == {"kind": "llvm", "cpu": host.cpu, "features": host.features, "threads": host.cores}
    assert jit.load_libgomp()


@pytest.mark.parametrize("preset, want", [({}, (None, str(jit.SPIN_COUNT))), ({"OMP_WAIT_POLICY": "ACTIVE"}, ("ACTIVE", None)),
                                          ({"OMP_WAIT_POLICY": "PASSIVE"}, ("PASSIVE", None)),
                                          ({"GOMP_SPINCOUNT": "1000"}, (None, "1000"))])
def test_openmp_threads_spin_briefly_then_sleep_unless_the_user_says_otherwise(preset, want):
    # decision 052: our libgomp copy loads with a short spin count unless the user chose a policy or a count
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = ("import os, numpy as np; from tensorir.runtime import jit; jit.load_libgomp(); "
            "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))")
    out = subprocess.run([sys.executable, "-c", code], env={**env, **preset}, capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert tuple(out.stdout.split()[-2:]) == tuple(str(w) for w in want)


def test_kernel_introspection():
    k = build(add_func(16, VECTORIZED))
    assert "define i32 @" in k.llvm_ir
    assert k.func.name == k.name
    assert k.compile_seconds > 0
    asm = k.asm()
    assert k.name in asm and ("xmm" in asm or "ymm" in asm or "zmm" in asm)


def test_export_object(tmp_path):
    k = build(add_func(16, VECTORIZED))
    path = tmp_path / "add.o"
    k.export_object(path)
    assert path.read_bytes()[:4] == b"\x7fELF"


@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")),
                    reason="no C compiler to link a shared library")
@pytest.mark.parametrize("outer", [SERIAL, PARALLEL])
def test_export_library_round_trip(tmp_path, outer):
    f = matmul_func(8, 32, 12, outer)
    k = build(f)
    path = tmp_path / "libmatmul.so"
    k.export_library(path)
    loaded = load_library(path, f)
    assert isinstance(loaded, Kernel) and loaded.llvm_ir is None
    a, b = rand((8, 12)), rand((12, 32))
    out1, out2 = np.zeros((8, 32), np.float32), np.zeros((8, 32), np.float32)
    k(a, b, out1)
    loaded.threads = 2
    loaded(a, b, out2)
    np.testing.assert_array_equal(out1, out2)
    np.testing.assert_allclose(out2, a @ b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="shape"):
        loaded(a, b, np.zeros((8, 31), np.float32))


# ---------------------------------------------------------------- hoisting, options, lowering

def test_sibling_loops_reuse_names_and_index_math():
    n = 12
    A, B, C = buf("A", (2 * n,)), buf("B", (n,)), buf("C", (n,))
    i, j = Var("i"), Var("j")
    body = seq(loop(i, n, st(B, (i,), ld(A, i * 2))),
               loop(i, n, st(C, (i,), ld(A, i * 2 + 1))),
               loop(i, n // 4, loop(j, 4, IfThenElse(
                   Binary(BinOp.GE, i * 4 + j, _e(1)),
                   st(C, (i * 4 + j,), ld(C, i * 4 + j) + ld(A, i * 4 + j - 1))), VECTORIZED)))
    f = PrimFunc("siblings", (A, B, C), body)
    a, bo, co = rand(2 * n), np.zeros(n, np.float32), np.zeros(n, np.float32)
    run(f, a, bo, co)
    np.testing.assert_array_equal(bo, a[0::2])
    np.testing.assert_array_equal(co, a[1::2] + np.r_[0, a[:n - 1]].astype(np.float32))


def test_opt_config_variants_agree():
    f = matmul_func(8, 32, 16, SERIAL)
    a, b = rand((8, 16)), rand((16, 32))
    outs = []
    for cfg in (runtime.OptConfig(), runtime.OptConfig(loop_unrolling=True),
                runtime.OptConfig(speed_level=1, loop_vectorization=False, slp_vectorization=False)):
        out = np.zeros((8, 32), np.float32)
        compile_func(f, cfg)(a, b, out)
        outs.append(out)
    np.testing.assert_allclose(outs[0], a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-6)
    np.testing.assert_allclose(outs[2], outs[0], rtol=1e-6)


def test_build_takes_lowered_functions_and_schedules_build_workloads():
    from schedules import Schedule
    from tensorir import te
    A = te.placeholder((5, 7), "float32", "A")
    B = te.compute((5, 7), lambda i, j: te.sigmoid(A[i, j]) * 2.0, "B")
    with pytest.raises(TypeError, match="compiles a lowered PrimFunc, got list"):
        build([A, B])      # the compiler below schedules knows nothing of schedules
    k = Schedule([A, B]).build()
    a, out = rand((5, 7)), np.zeros((5, 7), np.float32)
    k(a, out)
    np.testing.assert_allclose(out, 2 / (1 + np.exp(-a)), rtol=1e-6)


def test_cache_eviction_releases_and_keeps_referenced_kernels(monkeypatch):
    import gc
    B = importlib.import_module("tensorir.runtime.compile")
    clear_cache()
    monkeypatch.setattr(B, "CACHE_SIZE", 2)
    kept = build(add_func(3, SERIAL))
    for n in (4, 5, 6):
        build(add_func(n, SERIAL))
    gc.collect()                      # evicted, unreferenced kernels free their JIT code
    assert cache_info()["size"] == 2
    a, b, out = rand(3), rand(3), np.zeros(3, np.float32)
    kept(a, b, out)                   # evicted but still referenced: still valid
    np.testing.assert_array_equal(out, a + b)
    assert build(add_func(3, SERIAL)) is not kept


def test_a_bound_call_keeps_its_kernel_code_after_the_cache_and_the_caller_drop_it():
    """``kernel.bind`` is what benchmarks keep; a call after the last other reference to the kernel
    was gone (cache cleared) jumped into freed JIT code and crashed the process."""
    import gc
    import weakref
    a, b, out = rand(37), rand(37), np.zeros(37, np.float32)
    clear_cache()
    kernel = build(add_func(37, SERIAL))
    call, alive = kernel.bind(a, b, out), weakref.ref(kernel)
    del kernel
    clear_cache()
    for n in range(40, 48):            # new code may reuse the freed pages
        build(add_func(n, SERIAL))
    gc.collect()
    assert alive() is not None, "the bound call no longer holds the kernel (its JIT code is freed)"
    call()
    np.testing.assert_array_equal(out, a + b)


def test_very_wide_vectorized_loop_falls_back_to_serial():
    f = add_func(300, VECTORIZED)
    assert "<300 x float>" not in str(codegen(f))
    a, b, out = rand(300), rand(300), np.zeros(300, np.float32)
    run(f, a, b, out)
    np.testing.assert_array_equal(out, a + b)


def _divmod_kernel(kind):
    n = 16
    A, B, Q, R = (buf(x, (n,), "int32") for x in "ABQR")
    i = Var("i")
    body = seq(st(Q, (i,), Binary(BinOp.FLOORDIV, ld(A, i), ld(B, i))),
               st(R, (i,), Binary(BinOp.MOD, ld(A, i), ld(B, i))))
    return build(PrimFunc(f"divmod_{kind.value}", (A, B, Q, R), loop(i, n, body, kind)))


@pytest.mark.parametrize("kind", [SERIAL, VECTORIZED])
def test_floor_divmod_property(kind):
    pytest.importorskip("hypothesis")
    from hypothesis import given, settings, strategies as hs
    from hypothesis.extra.numpy import arrays
    k = _divmod_kernel(kind)
    ints = hs.integers(-10 ** 6, 10 ** 6)
    divisors = hs.integers(-1000, 1000).filter(lambda d: d != 0)

    @settings(max_examples=60, deadline=None)
    @given(arrays(np.int32, 16, elements=ints), arrays(np.int32, 16, elements=divisors))
    def check(a, b):
        q, r = np.zeros(16, np.int32), np.zeros(16, np.int32)
        k(a, b, q, r)
        np.testing.assert_array_equal(q, a // b)
        np.testing.assert_array_equal(r, a % b)
    check()


def test_export_library_without_compiler(tmp_path, monkeypatch):
    B = importlib.import_module("tensorir.runtime.kernel")
    k = build(add_func(16, SERIAL))
    monkeypatch.setattr(B.shutil, "which", lambda name: None)
    with pytest.raises(B.ToolchainError, match="needs a C compiler"):
        k.export_library(tmp_path / "x.so")


def test_llvm_ir_is_the_same_in_every_process():
    """Code generation depends on the IR only, not on object identities or hash seeds."""
    import os
    import subprocess
    import sys
    code = ("import hashlib\n"
            "from schedules.decisions import FixedDecisions\n"
            "from schedules.space import GeneratedSpace\n"
            "from tensorir import ops\n"
            "from tensorir.codegen import codegen\n"
            "wls = (ops.matmul(67, 83, 29), ops.conv2d(1, 8, 14, 14, 16, 3, 3, pad=1), ops.dense(16, 64, 48))\n"
            "text = ''.join(str(codegen(GeneratedSpace(w).apply(FixedDecisions({})).lower())) for w in wls)\n"
            "print(hashlib.sha256(text.encode()).hexdigest())\n")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (0, 1, 2)}
    assert len(runs) == 1, runs


def test_selects_on_unrolled_indices_keep_only_the_taken_branch():
    """A transform's taps picked by an unrolled position: each copy of the body is the code of its own
    branch (no select, no compare), and the result is numpy's."""
    from schedules import Schedule
    from tensorir import te
    A = te.placeholder((6, 16), "float32", "A")

    def body(i, j):
        two, one = te.const(2.0, "float32"), te.const(1.0, "float32")
        coef = te.if_then_else(te.equal(i, 5), te.const(3.0, "float32"), one)      # no load: not lazy
        return coef * te.if_then_else(te.equal(i // 2, 0), A[i, j] * two,
                                      te.if_then_else(te.equal(te.min(i % 3, 1), 1), A[i, j] + one, A[i, j] - one))
    B = te.compute((6, 16), body, "B")
    s = Schedule([A, B]).unroll("B.i").vectorize("B.j")
    text = str(codegen(s.lower()))
    assert "select" not in text and "icmp" not in text and "fcmp" not in text
    a = rng.standard_normal((6, 16)).astype(np.float32)
    out = np.empty_like(a)
    build(s.lower())(a, out)
    want = np.where((np.arange(6) // 2 == 0)[:, None], a * 2,
                    np.where((np.minimum(np.arange(6) % 3, 1) == 1)[:, None], a + 1, a - 1))
    want[5] *= 3
    np.testing.assert_array_equal(out, want)


def test_expression_hashes_are_not_carried_across_processes():
    """Nodes cache their hash; a pickled node must hash as an equal node made in the loading process
    (string hashes differ per process), or a cache keyed by it would miss or mix entries."""
    import pickle
    import subprocess
    import sys
    from tensorir.te.expr import Select, const
    e = Select(Binary(BinOp.LT, Var("row"), const(3)), Binary(BinOp.ADD, Var("col"), const(1)), Var("row"))
    hash(e)                                  # cached in this process
    code = ("import pickle, sys\nfrom tensorir.te.expr import Select, Binary, BinOp, Var, const\n"
            "e = pickle.loads(sys.stdin.buffer.read())\n"
            "f = Select(Binary(BinOp.LT, Var('row'), const(3)), Binary(BinOp.ADD, Var('col'), const(1)), Var('row'))\n"
            "assert e == f and hash(e) == hash(f) and {f: 1}[e] == 1\n")
    for seed in ("1", "2"):
        run = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(e), capture_output=True,
                             env={**__import__("os").environ, "PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr.decode()
