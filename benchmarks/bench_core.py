"""Core-compiler benchmark: hand-written schedules against numpy, in one process.

    python benchmarks/bench_core.py [--rounds 5] [--only matmul,conv2d,compile,peak]

For each kernel and thread count, the tuned kernel and numpy run alternately
(``tuner.compare.side_by_side``: rounds x repeats of >= 100 ms, 0.2 s pause
before switching sides so no idle OpenMP/OpenBLAS thread still spins); medians
are reported with their ratio.  Also: compile time of one scheduled matmul
(lower + codegen + LLVM + JIT, cache cleared), the CPU's FMA peak measured with
an LLVM microkernel, and each kernel's fraction of that peak.
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits

from schedules import Schedule
from tensorir import ops
from tensorir.runtime import build, clear_cache
from tensorir.ops.registry import get_workload
from tensorir.target import Target
from tuner.compare import side_by_side


# ------------------------------------------------------------ hand schedules

def matmul_schedule(M: int, N: int, K: int, lanes: int) -> Schedule:
    """Packed B panels and a register tile of ``rows`` x (2 vectors) accumulated over all of K.

    ``rows`` fills the vector registers: 8 rows (16 accumulators) with 32
    registers (AVX-512), 6 rows (12 accumulators) with 16 (AVX2).  Rows come
    in blocks of 64 (parallel); the K loop is not unrolled (the tile already
    gives 2*rows independent FMAs per step, and a short body compiles fast).
    """
    tj = 2 * lanes
    rows = 8 if lanes >= 16 else 6
    s = Schedule(ops.matmul(M, N, K))
    s = s.pack("B", {1: tj}, order=["1.o", "0", "1.i"]).cache_write("C")
    s = s.tile(["C.i", "C.j"], [rows, tj])
    s = s.split("C.i.0", factor=max(1, 64 // rows)).reorder("C.i.0.0", "C.j.0", "C.i.0.1")
    s = s.compute_at("C_local", "C.i.0.1")
    s = s.reorder("C_local.k", "C_local.i", "C_local.j")
    s = s.unroll("C_local.i").vectorize("C_local.j").vectorize("C.j.1")
    return s.parallel("C.i.0.0").parallel("B_pack.d1.o")


def conv2d_schedule(N, C, H, W, K, R, S, pad, lanes: int) -> Schedule:
    """Direct NCHW convolution with a materialized padded input.

    Register tile: ``kt`` output channels x 2 output rows x 16 output columns,
    with ``kt`` chosen so the accumulators fill the vector registers (16 on
    AVX-512, 4 on AVX2); the channel loop stays innermost-but-one so each
    input vector load feeds ``kt`` FMAs.
    """
    registers = 32 if lanes >= 16 else 16
    wt, pt = 16, 2
    kt = max(1, registers // (pt * max(1, wt // lanes)))
    s = Schedule(ops.conv2d(N, C, H, W, K, R, S, stride=1, pad=pad))
    out = s.stages[-1]
    if len(s.stages) > 1:  # materialize the padded input: the inner loop then needs no bounds test
        pad_stage = s.stages[0]
        pn, pc, ph, pw = s.loops(pad_stage)
        s = s.fuse(pc, ph)
        s = s.parallel(s.loops(pad_stage)[1])
        if s.extent(pw) <= 64:
            s = s.vectorize(pw)
    s = s.cache_write(out)
    loc = f"{out}_local"
    n, k, p, q = s.axes(out)
    s = s.split(k, factor=kt).split(p, factor=pt).split(q, factor=wt)
    s = s.reorder(n, f"{k}.0", f"{p}.0", f"{q}.0", f"{k}.1", f"{p}.1", f"{q}.1")
    s = s.compute_at(loc, f"{q}.0").fuse(f"{k}.0", f"{p}.0")
    s = s.parallel(s.loops(out)[0] if s.extent(s.loops(out)[0]) > 1 else s.loops(out)[1])
    s = s.vectorize(f"{q}.1")
    ln, lk, lp, lq, lc, lr, ls = s.loops(loc)
    s = s.reorder(lc, lr, ls, ln, lk, lp, lq)
    return s.unroll(lk).unroll(lp).vectorize(lq)


# ---------------------------------------------------------------- measuring

def compare(kernel, args, numpy_fn, flops, threads, rounds):
    kernel.threads = threads
    with threadpool_limits(threads):
        t = side_by_side({"ours": lambda: kernel(*args), "numpy": numpy_fn}, rounds=rounds)
    ours, ref = t["ours"]["median"], t["numpy"]["median"]
    return flops / ours / 1e9, flops / ref / 1e9, ref / ours


def fma_peak(seconds: float = 0.3) -> dict:
    """GFLOP/s of 12 independent vector FMA chains, on 1 thread and on every core."""
    import llvmlite.binding as llvm

    from tensorir.runtime import llvm as runtime
    bits = Target.host().vector_bits
    lanes = bits // 32
    vt = f"<{lanes} x float>"
    chains = 12
    body = "\n".join(f"  %a{i}.n = call {vt} @llvm.fma.v{lanes}f32({vt} %a{i}, {vt} %x, {vt} %y)"
                     for i in range(chains))
    phis = "\n".join(f"  %a{i} = phi {vt} [ %x, %entry ], [ %a{i}.n, %loop ]" for i in range(chains))
    sums, prev = [], "%a0.n"
    for i in range(1, chains):
        sums.append(f"  %s{i} = fadd {vt} {prev}, %a{i}.n")
        prev = f"%s{i}"
    ir = f"""
declare {vt} @llvm.fma.v{lanes}f32({vt}, {vt}, {vt})
define void @fma_peak(i64 %n, ptr %out) {{
entry:
  %x = insertelement {vt} zeroinitializer, float 0.5, i32 0
  %y = insertelement {vt} zeroinitializer, float 1.0, i32 0
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.n, %loop ]
{phis}
{body}
  %i.n = add i64 %i, 1
  %c = icmp ult i64 %i.n, %n
  br i1 %c, label %loop, label %done
done:
{chr(10).join(sums)}
  store {vt} {prev}, ptr %out, align 4
  ret void
}}"""
    with runtime.LLVM_LOCK:
        mod = llvm.parse_assembly(ir)
        runtime.prepare_module(mod)
        runtime.optimize(mod)
        tracker, addr = runtime.jit_link(runtime.emit_object(mod), "fma_peak")
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(addr)
    out = np.zeros((2, lanes), np.float32)
    per_iter = chains * lanes * 2
    n = 1 << 20
    t0 = time.perf_counter()
    fn(n, out.ctypes.data)
    n = max(n, int(n * seconds / (time.perf_counter() - t0)))

    def run(threads):
        best = []
        for _ in range(3):
            ts = [threading.Thread(target=fn, args=(n, out[i % 2].ctypes.data)) for i in range(threads)]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            best.append(per_iter * n * threads / (time.perf_counter() - t0) / 1e9)
        return max(best)
    cores = Target.host().cores
    result = {"lanes": lanes, "1": run(1), str(cores): run(cores)}
    del tracker  # frees the JIT code
    return result


def compile_time(schedule: Schedule, n: int = 9) -> dict:
    """Median wall and CPU (this thread) milliseconds of lowering and of a full cold build.

    CPU time excludes what a shared machine's other tenants steal from the
    wall clock; both are reported.
    """
    lows, totals, cpus = [], [], []
    for _ in range(n):
        clear_cache()
        t0, c0 = time.perf_counter(), time.thread_time()
        func = schedule.lower()
        t1 = time.perf_counter()
        build(func)
        t2, c2 = time.perf_counter(), time.thread_time()
        lows.append(t1 - t0)
        totals.append(t2 - t0)
        cpus.append(c2 - c0)
    return {"lower_ms": 1e3 * statistics.median(lows), "total_ms": 1e3 * statistics.median(totals),
            "cpu_ms": 1e3 * statistics.median(cpus)}


# --------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="peak,matmul,conv2d,compile")
    args = ap.parse_args(argv)
    parts = set(args.only.split(","))
    tgt = Target.host()
    lanes, cores = tgt.lanes32, tgt.cores
    print(f"host: {tgt.cpu}, {tgt.vector_bits}-bit vectors, {cores} cores")
    rows = []
    peak = None
    if "peak" in parts:
        peak = fma_peak()
        print(f"FMA peak (12 chains of {lanes}-lane FMA): {peak['1']:.1f} GFLOP/s on 1 thread, "
              f"{peak[str(cores)]:.1f} on {cores}")
    if "matmul" in parts:
        M = N = K = 1024
        s = matmul_schedule(M, N, K, lanes)
        k = s.build()
        a, b = [np.random.default_rng(i).uniform(-1, 1, (1024, 1024)).astype(np.float32) for i in (1, 2)]
        c = np.empty((M, N), np.float32)
        k(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
        for th in (1, cores):
            ours, ref, ratio = compare(k, (a, b, c), lambda: a @ b, 2 * M * N * K, th, args.rounds)
            rows.append(("matmul 1024^3", th, ours, ref, ratio))
            print(f"matmul 1024^3  threads={th}: ours {ours:6.1f} GFLOP/s  numpy {ref:6.1f}  ratio {ratio:.2f}x")
    if "conv2d" in parts:
        p = dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, pad=1)
        w = get_workload("conv2d")
        params = w.bind(**p, stride=1)
        s = conv2d_schedule(**p, lanes=lanes)
        k = s.build()
        x, wt = w.inputs(0, **params)
        y = np.empty((1, 64, 56, 56), np.float32)
        k(x, wt, y)
        (want,) = w.reference([x, wt], **params)
        np.testing.assert_allclose(y, want, rtol=1e-3, atol=1e-3)
        flops = w.flops(**params)
        for th in (1, cores):
            ours, ref, ratio = compare(k, (x, wt, y), lambda: w.reference_fn([x, wt], **params), flops, th,
                                       args.rounds)
            rows.append(("conv2d 1x64x56x56 k64 3x3", th, ours, ref, ratio))
            print(f"conv2d resnet  threads={th}: ours {ours:6.1f} GFLOP/s  im2col {ref:6.1f}  ratio {ratio:.2f}x")
    if "compile" in parts:
        ct = compile_time(matmul_schedule(1024, 1024, 1024, lanes))
        print(f"compile time (matmul 1024 schedule): lower {ct['lower_ms']:.1f} ms, "
              f"lower+codegen+JIT {ct['total_ms']:.1f} ms wall, {ct['cpu_ms']:.1f} ms CPU (medians of 9)")
    if rows:
        print("\n| kernel | threads | ours GFLOP/s | numpy GFLOP/s | ours/numpy |"
              + (" % of FMA peak |" if peak else ""))
        print("|---|---|---|---|---|" + ("---|" if peak else ""))
        for name, th, ours, ref, ratio in rows:
            frac = f" {100 * ours / peak['1' if th == 1 else str(cores)]:.0f}% |" if peak else ""
            print(f"| {name} | {th} | {ours:.1f} | {ref:.1f} | {ratio:.2f}x |{frac}")
        speed = {}
        for name, th, ours, _, _ in rows:
            speed.setdefault(name, {})[th] = ours
        for name, d in speed.items():
            if 1 in d and cores in d:
                print(f"{name}: {cores}-thread speedup {d[cores] / d[1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
