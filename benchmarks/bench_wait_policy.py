"""Idle spin of the thread pool: how a model at 2 threads fares against onnxruntime when idle workers
spin N pauses before they sleep, on a quiet machine and with the other core busy
(docs/decisions/052-openmp-threads-spin-briefly-then-sleep.md, docs/decisions/080-idle-workers-spin-longer-and-yield.md).

    python benchmarks/bench_wait_policy.py [--models resnet18,se_block,gconv:32/32/16/1/1/3] [--threads 2]
        [--rounds 9] [--repeats 2] [--spins 300,3000/64] [--no-hog] [--no-serial-limit]

The pool (:mod:`tensorir.codegen.pool`) is compiled once per process, so each count runs in a process of
its own: the model (a name of ``tests/onnx_models.py``, ``gconv:`` ones included) compiled untuned and
onnxruntime (``ORT_ENABLE_ALL``, same threads, no spinning) timed side by side in that process, alternating
rounds; the figure is the median of per-round ratios (ours / onnxruntime's speed). The pool's
``IDLE_SPIN_COUNT`` and ``YIELD_EVERY`` are set per process. Phases: quiet, then
with one busy-looping process (``--no-hog`` skips it). ``--no-serial-limit`` runs models that decision 078
would run on one thread on the threads asked for.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def one(model: str, threads: int, rounds: int, spin: str, serial_limit: bool) -> float:
    """In this process, idle workers spinning as ``spin`` says (``N`` or ``N/Y``: N pauses, yielding
    every Y): ours / onnxruntime's speed, paired per round."""
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    from bench_model import feeds_for, ort_session

    import tensorir.codegen.pool as pool
    import tuner.model_threads as model_threads
    from tests.onnx_models import by_name
    from tuner.compare import limit_threads, paired_speedup, side_by_side
    from tuner.model_api import compile_model, load
    count, _, every = spin.partition("/")
    pool.IDLE_SPIN_COUNT = int(count)
    if every:
        pool.YIELD_EVERY = int(every)
    if not serial_limit:
        model_threads.SERIAL_MODEL_SECONDS = 0.0
    proto = by_name(model)
    compiled = compile_model(proto, threads=threads, log=[])
    sess = ort_session(proto, threads)
    feeds = feeds_for(proto, load(proto))
    with limit_threads(threads):
        res = side_by_side({"ours": lambda: compiled.run(feeds), "ort": lambda: sess.run(None, feeds)},
                           rounds=rounds, min_repeat_ms=200, repeats_per_round=1)
    return paired_speedup(res, "ours", "ort")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,se_block")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-hog", action="store_true")
    ap.add_argument("--spins", default="300,3000/64", help="idle spins, N or N/Y: N pauses, a yield every Y "
                    "(Y a power of two; comma separated)")
    ap.add_argument("--no-serial-limit", action="store_true", help="small models too on --threads")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    spins = [n for n in args.spins.split(",") if n]
    if args.one:
        print(f"{one(args.one, args.threads, args.rounds, spins[0], not args.no_serial_limit):.3f}")
        return 0
    import llvmlite.binding as llvm
    sys.path.insert(0, HERE)
    from busy_core import phases
    print(f"host {llvm.get_host_cpu_name()}; ours / onnxruntime at {args.threads} threads, paired rounds")
    print("| phase | model | " + " | ".join(f"spin {n}" for n in spins) + " |")
    print("|---|---|" + "---|" * len(spins))
    for phase in phases(not args.no_hog):
        for model in args.models.split(","):
            cells = {n: [] for n in spins}
            for _ in range(args.repeats):
                for n in spins:
                    cmd = [sys.executable, __file__, "--one", model, "--threads", str(args.threads),
                           "--rounds", str(args.rounds), "--spins", str(n)]
                    out = subprocess.run(cmd + (["--no-serial-limit"] if args.no_serial_limit else []),
                                         capture_output=True, text=True, check=True)
                    cells[n].append(out.stdout.split()[-1])
            print(f"| {phase} | {model} | " + " | ".join(" / ".join(v) for v in cells.values()) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
