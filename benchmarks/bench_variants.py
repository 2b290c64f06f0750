"""Schedules of one workload's generated space, side by side with numpy.

    python benchmarks/bench_variants.py matmul M=1024 N=1024 K=1024 --threads 1,2 \\
        --variant '{}' --variant '{"C.pack_in_task": false, "C.outer": 1}'

Each ``--variant`` is a JSON object of decisions laid over the space's heuristic
start (``{}`` is the heuristic start itself); every kernel is checked against
the workload's reference first.  All variants and numpy are timed alternately in
this process (:func:`tuner.compare.side_by_side`), so the ratios are comparable
within a run even on a noisy machine.  ``--repeat N`` runs the whole comparison
N times, to show how far the ratios move from one run to the next.

``--from-log LOG --top N`` adds the decisions of the N fastest records of this
workload in a tuning log (the finalists a run re-measured first), as logged,
without the heuristic start under them.  A workload file has no numpy
implementation; ``--numpy EXPR`` gives one, an expression of ``ins`` (the input
arrays, in order) and ``np``:

    python benchmarks/bench_variants.py ops.py:gemm_at M=1000 N=999 K=517 \
        --from-log at.jsonl --top 2 --numpy 'ins[0].T @ ins[1]'
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys


from schedules.space import FixedDecisions, GeneratedSpace
from schedules.errors import ScheduleError
from tuner.cli import threadpool
from tuner.compare import side_by_side
from tuner.measure import MeasureConfig
from tuner.spec import WorkloadSpec
from tuner.worker import check_outputs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload")
    ap.add_argument("params", nargs="*", help="NAME=VALUE")
    ap.add_argument("--variant", action="append", default=[], help="JSON decisions over the heuristic start")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--from-log", metavar="LOG", help="also time the fastest records of this tuning log")
    ap.add_argument("--top", type=int, default=4, help="how many records --from-log takes (default 4)")
    ap.add_argument("--numpy", metavar="EXPR", help="numpy implementation: an expression of ins and np")
    args = ap.parse_args(argv)
    spec = WorkloadSpec.parse(args.workload, args.params)
    space = GeneratedSpace(spec.tensors())
    inputs = spec.inputs(0)
    want = spec.reference(inputs)
    cfg = MeasureConfig()
    kernels = {}
    threads_list = [int(t) for t in args.threads.split(",")]
    logged = _from_log(args.from_log, spec, args.top, threads_list) if args.from_log else []
    for text in (args.variant or ([] if logged else ["{}"])) + logged:
        decisions = json.loads(text) if text in logged else {**space.default_decisions(), **json.loads(text)}
        try:
            kernel = space.apply(FixedDecisions(decisions)).build()
        except ScheduleError as err:
            sys.exit(f"variant {text}: {err}")
        outs = spec.empty_outputs()
        kernel(*inputs, *outs)
        problem = check_outputs([t.name for t in spec.output_tensors()], outs, want, cfg.rtol, cfg.atol,
                                spec.reduction_length)
        if problem:
            sys.exit(f"variant {text}: wrong result ({problem})")
        kernels[text] = (kernel, outs)
    impl = spec.numpy_impl()
    if args.numpy:
        import numpy as np
        try:
            code = compile(args.numpy, "--numpy", "eval")
            impl = lambda ins: eval(code, {"np": np, "ins": ins})   # noqa: E731,S307 - the user's own expression
            got = impl(inputs)
        except Exception as err:  # noqa: BLE001 - the user's expression may raise anything
            sys.exit(f"--numpy: {type(err).__name__}: {err}")
        scale = max(1.0, float(np.abs(want[-1]).max()))
        if np.shape(got) != np.shape(want[-1]) or not np.allclose(got, want[-1], rtol=1e-3, atol=1e-3 * scale):
            sys.exit("--numpy: the expression does not compute the workload's output")
    for threads in map(int, args.threads.split(",")):
        ratios = {text: [] for text in kernels}
        for _ in range(args.repeat):
            fns = {}
            for text, (kernel, outs) in kernels.items():
                kernel.threads = threads
                fns[text] = kernel.bind(*inputs, *outs)
            if impl is not None:
                fns["numpy"] = lambda: impl(inputs)
            with threadpool(threads):
                t = side_by_side(fns, rounds=args.rounds)
            ref = t["numpy"]["median"] if impl is not None else None
            for text in kernels:
                gf = spec.flops / t[text]["median"] / 1e9
                ratios[text].append(ref / t[text]["median"] if ref else gf)
                print(f"threads={threads} {text}: {gf:.1f} GFLOP/s" +
                      (f", {ref / t[text]['median']:.2f}x numpy ({spec.flops / ref / 1e9:.1f})" if ref else ""),
                      flush=True)
        if args.repeat > 1:
            what = "x numpy" if impl is not None else " GFLOP/s"
            for text, v in ratios.items():
                print(f"threads={threads} {text}: median {statistics.median(v):.2f}{what} over {len(v)} runs "
                      f"[{min(v):.2f}-{max(v):.2f}]")
    return 0


def _from_log(path: str, spec, top: int, threads: list) -> list:
    """JSON texts of the decisions of the ``top`` fastest measured records of ``spec`` in log ``path``
    (those tuned for one of ``threads`` thread counts first)."""
    from logs import TuningLog
    recs = sorted((r for r in TuningLog(path).records() if r.workload_key == spec.key and r.ok),
                  key=lambda r: (r.target.get("threads") not in threads, r.rank_key))
    out = []
    for r in recs:
        text = json.dumps(r.decisions, sort_keys=True)
        if text not in out:
            out.append(text)
        if len(out) == top:
            break
    if not out:
        sys.exit(f"{path}: no measured record of {spec.label}")
    return out


if __name__ == "__main__":
    sys.exit(main())
