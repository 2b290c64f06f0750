"""Tuning benchmark: 64 trials per workload, tuned kernel vs numpy (conv2d: onnxruntime) side by side.

    python benchmarks/bench_tune.py [--trials 64] [--only matmul512,matmul1024,dense,conv2d] [--threads 1,2]
                                    [--seed 0] [--keep-logs DIR]

Each run starts from an empty log and an untrained cost model (no resume, no
transfer), exactly like a first `tensortune tune` (the Optuna study in a SQLite
file and the model saved next to the log, as the CLI keeps them).  Reports the tuned/numpy
ratio (re-timed side by side in this process; conv2d against onnxruntime's Conv as
``bench_conv.py`` times it: numpy's im2col is no baseline a user would pick), tuning wall time, time to 90%
of the final best (trials and seconds) and measured candidates per second.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

from logs import TuningLog
from tuner.cli import compare_with_numpy
from tuner.search import TuneConfig, Tuner
from tuner.spec import WorkloadSpec

from bench_conv import compare_with_onnxruntime

WORKLOADS = {
    "matmul512": ("matmul", ["M=512", "N=512", "K=512"], 0.9, 25),
    "matmul1024": ("matmul", ["M=1024", "N=1024", "K=1024"], 1.0, 60),
    "dense": ("dense", ["batch=128", "in_features=1024", "out_features=1024"], 0.9, 27),
    "conv2d": ("conv2d", ["N=1", "C=64", "H=56", "W=56", "K=64", "R=3", "S=3", "pad=1"], 1.1, 48),
    # the same layer with constant weights (`tensortune tune conv2d ... --const Wt`), packed once outside the
    # call as onnxruntime packs its Conv's initializer; the row above packs them in every call
    "conv2d_const": ("conv2d", ["N=1", "C=64", "H=56", "W=56", "K=64", "R=3", "S=3", "pad=1"], 1.1, 48, ("Wt",)),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--threads", default="2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-logs", metavar="DIR", help="copy each run's tuning log into DIR")
    args = ap.parse_args(argv)
    rows = []
    for key in args.only.split(","):
        name, params, target_ratio, target_s, *const = WORKLOADS[key]
        constants = const[0] if const else ()
        for threads in map(int, args.threads.split(",")):
            spec = WorkloadSpec.parse(name, params)
            with tempfile.TemporaryDirectory() as tmp:
                log = TuningLog(f"{tmp}/log.jsonl")
                cfg = TuneConfig(trials=args.trials, seed=args.seed, threads=threads, constants=constants)
                cfg.measure.threads = threads
                # as `tensortune tune --log LOG` runs: the Optuna study in SQLite and the model saved next to the log
                res = Tuner(spec, cfg, log=log, storage=f"sqlite:///{tmp}/log.jsonl.optuna.db",
                            model_path=f"{tmp}/log.jsonl.costmodel").run()
                if name == "conv2d":
                    # the user's NCHW convolution against onnxruntime's, reorders included on both sides
                    tuned, ref, _ = compare_with_onnxruntime(spec, res.best.trace, threads, constants=constants)
                else:
                    tuned, ref, _ = compare_with_numpy(spec, res.best.trace, threads)
                if args.keep_logs:
                    os.makedirs(args.keep_logs, exist_ok=True)
                    shutil.copy(f"{tmp}/log.jsonl", os.path.join(
                        args.keep_logs, f"{key}-{threads}threads-seed{args.seed}.jsonl"))
            t90 = res.time_to_fraction(0.9)
            label = spec.label + (" weights constant" if constants else "")
            row = dict(workload=label, threads=threads, ratio=ref / tuned, target_ratio=target_ratio,
                       gflops=spec.flops / tuned / 1e9, numpy_gflops=spec.flops / ref / 1e9,
                       tune_s=res.tune_seconds, target_s=target_s, t90_trials=t90[0], t90_s=t90[1],
                       cps=res.trials / res.tune_seconds, errors=dict(res.errors), invalid=res.invalid,
                       asked=res.asked)
            rows.append(row)
            print(f"{spec.label} threads={threads}: tuned {row['gflops']:.1f} GFLOP/s, {'onnxruntime' if name == 'conv2d' else 'numpy'} "
                  f"{row['numpy_gflops']:.1f}, ratio {row['ratio']:.2f}x (target {target_ratio}x); "
                  f"tuning {res.tune_seconds:.1f} s (target {target_s} s); 90% after {t90[0]} trials / "
                  f"{t90[1]:.1f} s; {row['cps']:.2f} cand/s; errors {row['errors']}; invalid "
                  f"{res.invalid}/{res.asked}", flush=True)
    print("\n| workload | threads | tuned GFLOP/s | numpy GFLOP/s | tuned/numpy | target | tuning s (64 trials) "
          "| target s | 90% of best: trials / s | cand/s | invalid share |")
    print("(conv2d: the numpy columns are onnxruntime's Conv)")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['threads']} | {r['gflops']:.1f} | {r['numpy_gflops']:.1f} | "
              f"{r['ratio']:.2f}x | {r['target_ratio']}x | {r['tune_s']:.1f} | {r['target_s']} | "
              f"{r['t90_trials']} / {r['t90_s']:.1f} | {r['cps']:.2f} | {r['invalid']}/{r['asked']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
