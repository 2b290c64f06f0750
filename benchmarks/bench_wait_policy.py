"""OpenMP wait policy: how a model at 2 threads fares against onnxruntime when idle threads spin or sleep,
on a quiet machine and with the other core busy (docs/decisions/041-openmp-threads-sleep-between-regions.md,
docs/decisions/052-openmp-threads-spin-briefly-then-sleep.md).

    python benchmarks/bench_wait_policy.py [--models resnet18,se_block] [--threads 2] [--rounds 9] [--repeats 2]
        [--spins 300,1000]

libgomp reads its policy when it loads, so each setting runs in a process of its own: the model of
``tests/onnx_models.py`` compiled untuned and onnxruntime (``ORT_ENABLE_ALL``, same threads, no spinning)
timed side by side in that process, alternating rounds; the figure is the median of per-round ratios
(ours / onnxruntime's speed). Settings: libgomp's default (``GOMP_SPINCOUNT=300000``: spin, then sleep;
set explicitly, since tensortune sets its own count when neither variable is set), ``OMP_WAIT_POLICY=PASSIVE``
(tensortune's default from decision 041 to 052) and ``GOMP_SPINCOUNT=N`` for each N of ``--spins`` (tensortune's
default since decision 052: ``tensorir.runtime.jit.SPIN_COUNT``); phases: quiet, then with one busy-looping
process (``--no-hog`` skips it).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# libgomp's own default (no variable set) spins 300,000 iterations; unset, tensortune sets its SPIN_COUNT
POLICIES = {"libgomp default (spin)": {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "300000"},
            "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": ""}}


def policies(spins: str) -> dict:
    """The fixed settings plus ``GOMP_SPINCOUNT=N`` for each N of ``spins`` (comma separated)."""
    out = dict(POLICIES)
    for n in filter(None, spins.split(",")):
        out[f"GOMP_SPINCOUNT={int(n)}"] = {"OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": str(int(n))}
    return out


def one(model: str, threads: int, rounds: int) -> float:
    """In this process: ours / onnxruntime's speed, paired per round."""
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    from bench_model import feeds_for, ort_session

    import tests.onnx_models as models
    from tuner.compare import limit_threads, paired_speedup, side_by_side
    from tuner.model_api import compile_model, load
    proto = getattr(models, model)()
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
    ap.add_argument("--spins", default="20000", help="GOMP_SPINCOUNT values to add (comma separated)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(f"{one(args.one, args.threads, args.rounds):.3f}")
        return 0
    import llvmlite.binding as llvm
    sys.path.insert(0, HERE)
    from busy_core import phases
    print(f"host {llvm.get_host_cpu_name()}; ours / onnxruntime at {args.threads} threads, paired rounds")
    settings = policies(args.spins)
    print("| phase | model | " + " | ".join(settings) + " |")
    print("|---|---|" + "---|" * len(settings))
    for phase in phases(not args.no_hog):
        for model in args.models.split(","):
            cells = {p: [] for p in settings}
            for _ in range(args.repeats):
                for policy, env in settings.items():
                    env = {k: v for k, v in {**os.environ, **env}.items() if v != ""}
                    out = subprocess.run([sys.executable, __file__, "--one", model, "--threads",
                                          str(args.threads), "--rounds", str(args.rounds)],
                                         env=env, capture_output=True, text=True, check=True)
                    cells[policy].append(out.stdout.split()[-1])
            print(f"| {phase} | {model} | " + " | ".join(" / ".join(v) for v in cells.values()) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
