"""Untuned builds: the heuristic start against the naive loop nest, a briefly tuned schedule and numpy.

    python benchmarks/bench_untuned.py [--trials 16] [--only matmul,softmax] [--shapes default,odd1,odd2]
                                       [--threads 2] [--no-tuned] [--out FILE]

For every built-in workload (``tensortune workloads``) at its default parameters
and at two odd shapes, four kernels of the same workload, each checked against
the workload's numpy reference first:

- heuristic: ``logs.build(tensors)`` with no record (the generated space's heuristic start,
  what a build uses without a record since it no longer compiles the naive nest);
- naive: ``logs.build(tensors, fallback="naive")`` (the unscheduled loop nest);
- tuned: a brief tuning run (``--trials``, default 16, no cost model: it would only rank
  from 24 samples on) into a fresh log, then ``logs.build(tensors, log=LOG)``;
- numpy: the registry's numpy implementation (conv2d: im2col + matmul).

The four are timed side by side in this process (:func:`tuner.compare.side_by_side`:
alternating rounds, a 0.2 s pause at each switch, medians), numpy limited to the
kernels' thread count.  Also the wall time of each ``logs.build`` (cold: the kernel
cache is cleared first; the tuned build includes replaying and checking the record).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings

import llvmlite.binding as llvm

import logs
from logs import TuningFallbackWarning, TuningLog
from tensorir.runtime import clear_cache as clear_kernel_cache
from tuner.compare import limit_threads, side_by_side
from tuner.search import TuneConfig, Tuner
from tuner.spec import WorkloadSpec
from tuner.worker import check_outputs

# two odd shapes per workload: sizes no tile, vector width or thread count divides, and a skinny case
ODD = {
    "matmul": (["M=257", "N=383", "K=191"], ["M=1000", "N=37", "K=999"]),
    "batch_matmul": (["B=7", "M=65", "N=97", "K=129"], ["B=3", "M=200", "N=33", "K=77"]),
    "dense": (["batch=33", "in_features=1000", "out_features=517"], ["batch=1", "in_features=2047", "out_features=1001"]),
    "conv2d": (["C=35", "H=29", "W=31", "K=47"], ["N=2", "C=3", "H=57", "W=55", "K=29", "stride=2"]),
    "depthwise_conv2d": (["C=67", "H=45", "W=39"], ["C=129", "H=27", "W=29", "stride=2"]),
    "max_pool2d": (["C=67", "H=57", "W=45"], ["C=33", "H=99", "W=101"]),
    "avg_pool2d": (["C=67", "H=30", "W=34"], ["C=131", "H=22", "W=26"]),
    "softmax": (["rows=333", "cols=777"], ["rows=1001", "cols=129"]),
    "layer_norm": (["rows=333", "cols=1001"], ["rows=77", "cols=3001"]),
    "elementwise_chain": (["n=1000003"], ["n=77777"]),
}
SHAPES = ("default", "odd1", "odd2")


def cases(only, shapes):
    from tensorir.ops.registry import list_workloads
    for w in list_workloads():
        if only and w.name not in only:
            continue
        for shape in shapes:
            params = [] if shape == "default" else list(ODD[w.name][SHAPES.index(shape) - 1])
            yield shape, WorkloadSpec.parse(w.name, params)


def checked(spec, kernel, inputs, want, what):
    outs = spec.empty_outputs()
    kernel(*inputs, *outs)
    problem = check_outputs([t.name for t in spec.output_tensors()], outs, want, 1e-4, 1e-5, spec.reduction_length)
    if problem:
        raise SystemExit(f"{spec.label} {what}: wrong result ({problem})")
    return outs


def timed_build(**kw):
    clear_kernel_cache()
    logs.clear_cache()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningFallbackWarning)
        kernel = logs.build(**kw)
    return kernel, time.perf_counter() - t0


def run_case(shape, spec, args, empty_log, out):
    tensors = spec.tensors()
    inputs, want = spec.inputs(0), None
    want = spec.reference(inputs)
    kernels, builds, note = {}, {}, ""
    kernels["heuristic"], builds["heuristic"] = timed_build(tensors=tensors, log=empty_log, threads=args.threads)
    kernels["naive"], builds["naive"] = timed_build(tensors=tensors, log=empty_log, threads=args.threads,
                                                    fallback="naive")
    if kernels["heuristic"].lookup.match != "heuristic":
        note = f"heuristic failed: {kernels['heuristic'].lookup.why}"
    trials = 0
    if not args.no_tuned:
        with tempfile.TemporaryDirectory() as tmp:
            log = TuningLog(f"{tmp}/log.jsonl")
            cfg = TuneConfig(trials=args.trials, cost_model=False, threads=args.threads, timeout_s=args.tune_timeout)
            cfg.measure.threads = args.threads
            t0 = time.perf_counter()
            res = Tuner(spec, cfg, log=log).run()
            tune_s = time.perf_counter() - t0
            trials = res.trials
            if res.best is None:
                note += " tuning found nothing;"
            else:
                kernels["tuned"], builds["tuned"] = timed_build(tensors=tensors, log=log.path, threads=args.threads)
                if kernels["tuned"].lookup.match != "exact":
                    raise SystemExit(f"{spec.label}: the tuned build did not use the log ({kernels['tuned'].lookup})")
        print(f"  tuned {trials} trials in {tune_s:.0f} s", file=out, flush=True)
    fns = {}
    for what, kernel in kernels.items():
        kernel.threads = args.threads
        fns[what] = kernel.bind(*inputs, *checked(spec, kernel, inputs, want, what))
    impl = spec.numpy_impl()
    fns["numpy"] = lambda: impl(inputs)
    with limit_threads(args.threads):
        t = side_by_side(fns, rounds=args.rounds, min_repeat_ms=args.min_repeat_ms, repeats_per_round=3)
    gf = {what: spec.flops / t[what]["median"] / 1e9 for what in fns}
    row = dict(workload=spec.name, shape=shape, label=spec.label, gflops=gf, builds=builds, trials=trials,
               note=note.strip())
    print(f"  {row}", file=out, flush=True)
    return row


def _g(x: float) -> str:
    """GFLOP/s with 3 significant digits (pooling runs at a fraction of one)."""
    return f"{x:.3g}"


def table(rows, trials_wanted) -> str:
    lines = ["| workload | shape | numpy | naive | heuristic | tuned | heuristic/naive | heuristic/tuned | "
             "heuristic/numpy | build ms heuristic / naive / tuned |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g, b = r["gflops"], r["builds"]
        tuned = _g(g["tuned"]) + (f" ({r['trials']} trials)" if r["trials"] != trials_wanted else "") \
            if "tuned" in g else "-"
        vs_tuned = f"{g['heuristic'] / g['tuned']:.2f}x" if "tuned" in g else "-"
        ms = " / ".join(f"{b[k] * 1e3:.0f}" if k in b else "-" for k in ("heuristic", "naive", "tuned"))
        lines.append(f"| {r['label']} | {r['shape']} | {_g(g['numpy'])} | {_g(g['naive'])} | {_g(g['heuristic'])} | "
                     f"{tuned} | {g['heuristic'] / g['naive']:.1f}x | {vs_tuned} | {g['heuristic'] / g['numpy']:.2f}x "
                     f"| {ms} |" + (f" {r['note']}" if r["note"] else ""))
    ratios = [r["gflops"]["heuristic"] / r["gflops"]["naive"] for r in rows]
    vs_tuned = [r["gflops"]["heuristic"] / r["gflops"]["tuned"] for r in rows if "tuned" in r["gflops"]]
    lines.append("")
    lines.append(f"heuristic/naive: median {statistics.median(ratios):.1f}x, min {min(ratios):.2f}x, "
                 f"max {max(ratios):.1f}x over {len(rows)} cases")
    if vs_tuned:
        lines.append(f"heuristic/tuned: median {statistics.median(vs_tuned):.2f}x, min {min(vs_tuned):.2f}x, "
                     f"max {max(vs_tuned):.2f}x over {len(vs_tuned)} cases")
    return "\n".join(lines)


class Tee:
    def __init__(self, *files):
        self.files = files

    def write(self, text):
        for f in self.files:
            f.write(text)

    def flush(self):
        for f in self.files:
            f.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--tune-timeout", type=float, default=40.0, help="stop a tuning run's new rounds after S seconds")
    ap.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-repeat-ms", type=float, default=50.0)
    ap.add_argument("--no-tuned", action="store_true", help="skip the tuned column")
    ap.add_argument("--out", metavar="FILE", help="also write the raw output here")
    ap.add_argument("--table-from", metavar="FILE", help="only print the table of an earlier run's raw output")
    args = ap.parse_args(argv)
    if args.table_from:
        import ast
        with open(args.table_from) as f:
            rows = [ast.literal_eval(line.strip()) for line in f if line.startswith("  {")]
        print(table(rows, args.trials))
        return 0
    out_file = open(args.out, "w") if args.out else None
    out = Tee(sys.stdout, *([out_file] if out_file else []))
    start = time.perf_counter()
    print(f"host {llvm.get_host_cpu_name()}, threads {args.threads}, tuned: {args.trials} trials "
          f"(timeout {args.tune_timeout:.0f} s), rounds {args.rounds}, repeats >= {args.min_repeat_ms:.0f} ms",
          file=out, flush=True)
    rows = []
    only = {w for w in args.only.split(",") if w}
    with tempfile.TemporaryDirectory() as tmp:
        empty = f"{tmp}/empty.jsonl"
        for shape, spec in cases(only, [s for s in args.shapes.split(",") if s]):
            print(f"{spec.label} [{shape}]", file=out, flush=True)
            rows.append(run_case(shape, spec, args, empty, out))
    print("", file=out)
    print(table(rows, args.trials), file=out)
    print(f"\ntotal {time.perf_counter() - start:.0f} s", file=out, flush=True)
    if out_file:
        out_file.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
