"""Software prefetch of a dense product's packed weight panel, cold and warm: the heuristic start
with each prefetch distance of the space (docs/decisions/028-prefetch-packed-weights.md).

    python benchmarks/bench_prefetch.py [--threads 1,2] [--rounds 12] [--calls 3] [--shapes 32x1024x2048,...]

Each shape ``MxKxN`` is ``dense`` (``max(X @ W.T + bias, 0)``, a Gemm + Relu of a model) with its
weights constant: packed once outside the timing, as a model build packs them (``tuner.prepack``).
Variants: the generated space's heuristic start with the prefetch decision at every distance it
offers (0: no prefetch); ``*`` marks the heuristic's own pick. Two conditions: ``cold``, the
packed weights and the bias evicted from every cache level (``tensorir.runtime.cacheflush``) before every call, as a
model runs a kernel after the other kernels' weights have evicted its own; ``warm``, no flush.
Only the call is timed. Side by side in this process: in every round each variant runs ``calls``
timed calls in a row (cold, then warm), variants in turn (the order reversed every other round),
a pause at every switch; the figure is the median over every timed call.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from bench_small_rows import built

import schedules.prefetch as prefetch_module
from schedules.prefetch import PREFETCH_BYTES
from schedules.space import GeneratedSpace
from tensorir.runtime.cacheflush import evict
from tuner.spec import WorkloadSpec
from tuner.target import host_target

# the MLP's and the BERT layer's products, a matrix-vector product, then two shapes in no model (one
# whose weights fit in a core's L2)
SHAPES = "32x1024x2048,32x2048x2048,32x2048x1000,128x768x3072,128x3072x768,1x4096x4096,96x2304x700,48x640x600"
GAP_S = 0.05     # kernels of one thread team: a short pause lets its threads go idle

def prefetch_decision_name(decisions: dict) -> str:
    names = [n for n in decisions if ".prefetch_" in n]
    if len(names) != 1:
        raise SystemExit(f"bench_prefetch: expected one prefetch decision, got {names}")
    return names[0]


def kernel(spec: WorkloadSpec, decisions: dict, inputs: list, threads: int, choices: list):
    """(bound kernel, the constant arrays it reads: packed weights and bias); ``choices``: the
    prefetch distances to offer (the space's, or others to explore)."""
    saved = list(prefetch_module.PREFETCH_BYTES)
    prefetch_module.PREFETCH_BYTES[:] = sorted(set(saved) | set(choices))
    try:
        call, packed = built(spec, decisions, inputs, threads)
    finally:
        prefetch_module.PREFETCH_BYTES[:] = saved
    return call, packed + [inputs[2]]


def compare(fns: dict, flush, rounds: int, calls: int, clock=time.perf_counter) -> dict:
    """``{(name, cold): median seconds per call}``, alternating as the module docstring says."""
    times = {(n, c): [] for n in fns for c in (True, False)}
    names = list(fns)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            call, consts = fns[name]
            for cold in (True, False):
                time.sleep(GAP_S)
                call()                        # (untimed: code and activations in cache)
                for _ in range(calls):
                    if cold:
                        flush(consts)
                    t0 = clock()
                    call()
                    times[(name, cold)].append(clock() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=3, help="timed calls per variant and condition in a round")
    ap.add_argument("--shapes", default=SHAPES, help="MxKxN,... (rows x reduction x columns)")
    ap.add_argument("--distances", default=",".join(map(str, PREFETCH_BYTES)),
                    help="prefetch distances in bytes (default: the space's choices)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall time, or the process's CPU time (steadier on a busy machine; 1 thread only)")
    args = ap.parse_args(argv)
    if args.clock == "cpu" and args.threads != "1":
        ap.error("--clock cpu measures 1-thread runs only (the waiting threads of a team spin on CPU time)")
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    flush = evict
    every = [int(d) for d in args.distances.split(",")]
    dists = [d for d in every if d]
    every = [0] + dists
    print(f"host {host_target()['cpu']}; side by side in one process; medians of {args.rounds} rounds x "
          f"{args.calls} calls; {args.clock} ms per call, prefetch distance in bytes (0: none; * the heuristic's pick)", flush=True)
    head = " | ".join(f"{d}" for d in dists)
    print(f"| shape MxKxN | weights MiB | threads | cache | 0 | {head} | best/0 |")
    print("|---|---|---|---|---|" + "---|" * len(dists) + "---|")
    for threads in [int(t) for t in args.threads.split(",")]:
        ratios = {(d, cold): [] for d in every for cold in (True, False)}
        for shape in args.shapes.split(","):
            m, k, n = (int(v) for v in shape.split("x"))
            spec = WorkloadSpec("dense", {"batch": m, "in_features": k, "out_features": n})
            inputs = spec.inputs(0)
            start = GeneratedSpace(spec.tensors()).default_decisions()
            dname = prefetch_decision_name(start)
            fns = {d: kernel(spec, {**start, dname: d}, inputs, threads, choices=every) for d in every}
            t = compare(fns, flush, args.rounds, args.calls, clock)
            for cold in (True, False):
                cells = []
                for d in every:
                    mark = "*" if d == start[dname] else ""
                    cells.append(f"{t[(d, cold)] * 1e3:.3f}{mark}")
                best = min(t[(d, cold)] for d in dists)
                print(f"| {shape} | {k * n * 4 / 2 ** 20:.1f} | {threads} | {'cold' if cold else 'warm'} | "
                      f"{' | '.join(cells)} | {best / t[(0, cold)]:.2f} |", flush=True)
                for d in every:
                    ratios[(d, cold)].append(t[(d, cold)] / t[(0, cold)])
        for cold in (True, False):
            means = [statistics.geometric_mean(ratios[(d, cold)]) for d in every]
            print(f"| geomean time / time at 0 | | {threads} | {'cold' if cold else 'warm'} | "
                  f"{' | '.join(f'{m:.2f}' for m in means)} | |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
