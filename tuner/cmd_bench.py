"""``tensortune bench``: the log's best kernel, the untuned build and numpy, timed side by side.

    tensortune bench matmul M=256 N=256 K=256 [--log PATH] [--threads T] [--json]

The three run in this process on the same inputs, alternating round by round
with a pause at each switch and compared by their medians
(:func:`tuner.compare.side_by_side`); numpy's BLAS is held to the kernels'
thread count (:func:`tuner.compare.limit_threads`).  The *tuned* kernel is
what :func:`logs.build` makes from the logs; the *untuned* one is what it
makes when no log is searched.  Each is checked against the numpy reference
before it is timed.
"""
from __future__ import annotations

import json
import os
import sys

from .errors import CLIError


def add_parser(sub) -> None:
    """Register ``bench`` on the CLI's subparsers."""
    b = sub.add_parser("bench", help="time the log's best kernel, the untuned build and numpy side by side",
                       description="Time WORKLOAD (a built-in name or path/to/file.py:function) with NAME=VALUE "
                       "parameters: the best logged schedule, the untuned build and numpy's implementation, "
                       "side by side in this process.")
    b.add_argument("workload")
    b.add_argument("params", nargs="*", metavar="NAME=VALUE")
    b.add_argument("--log", help="tuning log to take the best schedule from (default: the per-user log and the "
                   "shipped ones)")
    b.add_argument("--threads", type=int, help="kernel threads, and numpy's (default: all cores)")
    b.add_argument("--rounds", type=int, default=5, help="alternating rounds, 3 repeats each (default 5)")
    b.add_argument("--require-tuned", action="store_true",
                   help="fail, naming the tune command, if the logs hold no usable record for the workload")
    b.add_argument("--json", action="store_true", help="print one JSON object on the last line")


def _build(spec, threads: int, log):
    """``logs.build`` of the workload: from ``log`` (None: the default logs), or untuned (``log=[]``)."""
    import logs
    return logs.build(spec.tensors(), log=log, threads=threads, name=spec.name, params=spec.params, warn=False)


def _checked(kernel, spec, inputs, what: str):
    """A bound call of ``kernel`` whose outputs were checked against the reference."""
    from .verify import output_problem
    outs = spec.empty_outputs()
    kernel(*inputs, *outs)
    problem = output_problem(spec, inputs, outs)
    if problem:
        raise CLIError(f"the {what} kernel computes a wrong result here ({problem}); not timed")
    return kernel.bind(*inputs, *outs)


def run(args) -> int:
    """Time the kernels and print them with their ratios."""
    from .compare import limit_threads, side_by_side
    from .report import format_latency
    from .spec import SpecError, WorkloadSpec
    from .target import host_target
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be a positive integer, got {args.threads}")
    if args.rounds < 1:
        raise CLIError(f"--rounds must be a positive integer, got {args.rounds}")
    if args.log is not None and not os.path.isfile(args.log):
        raise CLIError(f"tuning log {args.log} " + ("is a directory" if os.path.isdir(args.log) else "not found"))
    try:
        spec = WorkloadSpec.parse(args.workload, args.params)
        spec.check_memory()
    except SpecError as err:
        raise CLIError(str(err)) from None
    threads = host_target(args.threads)["threads"]
    tuned = _build(spec, threads, args.log)
    lookup = tuned.lookup
    inputs = spec.inputs(0)
    fns = {}
    if lookup.record is not None:
        fns["tuned"] = _checked(tuned, spec, inputs, f"best logged ({lookup.source})")
    elif args.require_tuned:
        from logs.naming import describe
        label, command = describe(spec.tensors(), spec.name, spec.params, threads)
        raise CLIError(f"no tuned schedule for {label} ({lookup.why}); tune it: {command}")
    else:
        print(f"{lookup.reason}; timing the untuned build against numpy", file=sys.stderr)
    fns["untuned"] = _checked(_build(spec, threads, []), spec, inputs, "untuned")
    impl = spec.numpy_impl()
    if impl is not None:
        fns["numpy"] = lambda: impl(inputs)
    with limit_threads(threads):
        timing = side_by_side(fns, rounds=args.rounds, min_repeat_ms=100, repeats_per_round=3)
    seconds = {name: t["median"] for name, t in timing.items()}
    gflops = {name: spec.flops / s / 1e9 for name, s in seconds.items()}
    pairs = [("tuned", "untuned"), ("tuned", "numpy"), ("untuned", "numpy")]
    ratios = {f"{a}/{b}": seconds[b] / seconds[a] for a, b in pairs if a in seconds and b in seconds}
    work = f"{spec.flops / 1e9:.3f} GFLOP" if spec.flops >= 1e7 else f"{spec.flops:,} FLOP"
    print(f"workload  {spec.label}  ({work}, threads={threads})")
    for name, s in seconds.items():
        note = f"   best record in {lookup.source} ({lookup.match} match)" if name == "tuned" else ""
        print(f"{name:<9} {format_latency(s):>12}  {gflops[name]:9.2f} GFLOP/s{note}")
    if impl is None:
        print("numpy     -   (no numpy implementation for a workload from a file)")
    if ratios:
        print("speed     " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items()) + "   (>1: the first is faster)")
    print(f"timed     side by side in this process: {args.rounds} alternating round{'s' if args.rounds > 1 else ''}, "
          f"medians of "
          f"{3 * args.rounds} repeats each")
    if args.json:
        record = (None if lookup.record is None else
                  {"log": lookup.source, "match": lookup.match, "timestamp": lookup.record.timestamp})
        print(json.dumps({"workload": spec.name, "params": spec.params, "label": spec.label, "threads": threads,
                          "flops": spec.flops, "record": record,
                          "timings": {n: {"seconds": s, "gflops": gflops[n]} for n, s in seconds.items()},
                          "ratios": ratios}))
    return 0
