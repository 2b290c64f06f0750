"""Where a convolution's tuned schedule loses to its heuristic start: tuning against re-timing.

    python benchmarks/conv_tuning_variance.py --only c3x3_256@14,c1x1s2_64-128@56 [--net resnet18]
                                              [--threads 1] [--seeds 0,1] [--trials 64] [--rounds 5]

For each layer, thread count and seed: tunes ``--trials`` trials from an empty log (as bench_conv.py
does), then prints what the tuner measured for its first trial (the heuristic start) and for the
schedule it picked, and re-times the two side by side with onnxruntime in this process.  A pick that
the tuner measured faster than the start but that re-times slower is measurement noise winning; a
start that re-times slow is a weak heuristic.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from bench_conv import LAYERS, compare_variants, constants_of
from logs import TuningLog
from schedules.space import FixedDecisions, GeneratedSpace
from tuner.search import TuneConfig, Tuner
from tuner.spec import WorkloadSpec


def pin_parent_to_builders() -> None:
    """From now on, every Measurer started moves this (the tuner's) process onto its builders' cores, off
    the runner's: the tuner's own work (asks, the cost model) then never shares the timed core."""
    from tuner import measure
    start = measure.Measurer.start

    def pinned_start(self):
        out = start(self)
        cpus = sorted(os.sched_getaffinity(0))
        if self.overlap:
            os.sched_setaffinity(0, cpus[self.threads:])
        return out

    measure.Measurer.start = pinned_start


def tune(spec, threads: int, trials: int, seed: int, constants: tuple) -> tuple:
    """(result, log records as dicts) of a fresh run."""
    cpus = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TuneConfig(trials=trials, seed=seed, threads=threads, constants=constants)
        cfg.measure.threads = threads
        res = Tuner(spec, cfg, log=TuningLog(f"{tmp}/log.jsonl"), storage=f"sqlite:///{tmp}/log.jsonl.optuna.db",
                    model_path=f"{tmp}/log.jsonl.costmodel").run()
        with open(f"{tmp}/log.jsonl") as f:
            records = [json.loads(line) for line in f if line.strip()]
    os.sched_setaffinity(0, cpus)
    return res, records


def gflops_of(records: list, decisions: dict, flops: float) -> list:
    """Every GFLOP/s the tuner measured for ``decisions`` (one per repeat), confirmed ones marked."""
    out = []
    for r in records:
        if r.get("decisions") == decisions and r.get("costs"):
            out += [f"{flops / c / 1e9:.0f}{'c' if r.get('confirmed') else ''}" for c in r["costs"]]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", default="resnet18")
    ap.add_argument("--only", required=True)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pin-parent", action="store_true",
                    help="keep the tuning process off the runner's cores while it times (see pin_parent_to_builders)")
    args = ap.parse_args(argv)
    if args.pin_parent:
        pin_parent_to_builders()
    for threads in (int(t) for t in args.threads.split(",")):
        for name in args.only.split(","):
            workload, params = LAYERS[args.net][name]
            spec = WorkloadSpec(workload, params)
            constants = constants_of(spec, False)
            space = GeneratedSpace(spec.tensors())
            start = space.default_decisions()
            traces = {"heuristic": space.apply(FixedDecisions(start)).to_json()}
            for seed in (int(s) for s in args.seeds.split(",")):
                res, records = tune(spec, threads, args.trials, seed, constants)
                best = res.best
                diff = {k: v for k, v in best.decisions.items() if start.get(k) != v}
                print(f"{name} t={threads} seed={seed}: tuner measured start {gflops_of(records, start, spec.flops)}"
                      f" pick {gflops_of(records, best.decisions, spec.flops)}; finalists (tuning, confirmed) "
                      f"{[(round(a), round(b)) for a, b in res.finalists]}; pick differs by "
                      f"{' '.join(f'{k}={v}' for k, v in diff.items()) or '(nothing)'}", flush=True)
                traces[f"seed{seed}"] = best.trace
            t = compare_variants(spec, traces, threads, args.rounds, constants)
            print(f"  re-timed side by side: " + ", ".join(
                f"{k} {spec.flops / v / 1e9:.0f} GF/s" for k, v in t.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
