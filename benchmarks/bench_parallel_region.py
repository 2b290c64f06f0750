"""Small parallel regions: thread team vs serial, the figures behind ``MIN_REGION_WORK``.

    python benchmarks/bench_parallel_region.py [--threads 2] [--repeats 7]

Two measurements, each side by side in one process (alternating rounds, a pause
at every switch, medians of ``--repeats``):

1. one parallel loop of ``n`` stores (``Y[i] = X[i] * 2 + 1`` and ``Y[i] = exp(X[i])``),
   built on the thread team (``MIN_REGION_WORK = 0``) and built serially; the last
   column says which the compiler builds now;
2. the fuzzer's pattern: a parallel loop of 2 iterations inside a serial loop of ``rows``
   iterations, with and without the rule.

See docs/decisions/021-small-parallel-regions-run-serially.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from llvmlite import binding

from schedules import Schedule
from tensorir import te
from tensorir.codegen import parallel
from tensorir.runtime import compile_func

ALWAYS_SERIAL = 1 << 62


def _kernel(sch: Schedule, min_work: int, threads: int):
    saved, parallel.MIN_REGION_WORK = parallel.MIN_REGION_WORK, min_work
    try:
        k = compile_func(sch.lower())
    finally:
        parallel.MIN_REGION_WORK = saved
    k.threads = threads
    return k


def _time(k, args, seconds: float = 0.05) -> float:
    k(*args)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        k(*args)
        n += 1
    return (time.perf_counter() - t0) / n


def side_by_side(kernels: dict, args, repeats: int) -> dict:
    times = {name: [] for name in kernels}
    for _ in range(repeats):
        for name, k in kernels.items():
            time.sleep(0.05)        # let the other side's threads stop spinning
            times[name].append(_time(k, args))
    return {name: statistics.median(t) for name, t in times.items()}


def one_loop(n: int, body: str, threads: int, repeats: int) -> dict:
    X = te.placeholder((n,), "float32", "X")
    f = {"axpb": lambda i: X[i] * 2.0 + 1.0, "exp": lambda i: te.exp(X[i])}[body]
    Y = te.compute((n,), f, "Y")
    sch = Schedule([X, Y]).parallel("Y.i")
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.empty_like(x)
    ks = {"team": _kernel(sch, 0, threads), "serial": _kernel(sch, ALWAYS_SERIAL, threads)}
    for k in ks.values():
        k(x, y)
        ref = x * 2 + 1 if body == "axpb" else np.exp(x)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
    return side_by_side(ks, (x, y), repeats)


def nested(rows: int, threads: int, repeats: int) -> dict:
    X = te.placeholder((rows, 2), "float32", "X")
    Y = te.compute((rows, 2), lambda i, j: X[i, j] + 1.0, "Y")
    sch = Schedule([X, Y]).parallel("Y.j")
    x = np.random.default_rng(0).standard_normal((rows, 2)).astype(np.float32)
    y = np.empty_like(x)
    ks = {"team": _kernel(sch, 0, threads), "now": _kernel(sch, parallel.MIN_REGION_WORK, threads)}
    for k in ks.values():
        k(x, y)
        np.testing.assert_array_equal(y, x + 1)
    return side_by_side(ks, (x, y), repeats)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"# host {binding.get_host_cpu_name()}, {args.threads} threads, MIN_REGION_WORK = "
          f"{parallel.MIN_REGION_WORK}, medians of {args.repeats}")
    print("\n| body | stores n | thread team (us) | serial (us) | team / serial | built as |")
    print("|---|---|---|---|---|---|")
    for body in ("axpb", "exp"):
        for n in (256, 1024, 4096, 16384, 65536, 262144):
            t = one_loop(n, body, args.threads, args.repeats)
            built = "serial" if n < parallel.MIN_REGION_WORK else "team"
            print(f"| {body} | {n} | {t['team'] * 1e6:.2f} | {t['serial'] * 1e6:.2f} | "
                  f"{t['team'] / t['serial']:.2f} | {built} |", flush=True)
    print("\n| nest | team per call (ms) | now per call (ms) | speed-up |")
    print("|---|---|---|---|")
    rows = 100_000
    t = nested(rows, args.threads, args.repeats)
    print(f"| serial {rows} x parallel 2 | {t['team'] * 1e3:.2f} | {t['now'] * 1e3:.3f} | "
          f"{t['team'] / t['now']:.0f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
