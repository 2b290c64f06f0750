"""A whole model tuned by one 2-thread process against two pinned 1-thread workers sharing a PostgreSQL study storage.

    python benchmarks/bench_workers_model.py [--storage postgresql://user@host/postgres] [--trials 128]
                                             [--repeats 1] [--model mlp|mlp-small] [--rounds 7]

Set-ups, each from an empty log (the cost model on, as users run it):

* ``1 process x 2 threads``: ``tensortune tune-model MODEL --trials N --threads 2`` (the one-process
  task scheduler; no database);
* ``2 workers x 1 thread``: ``tensortune tune-model MODEL --trials N --storage DB --workers 2 --threads 1``
  (a fresh database; the coordinator only coordinates, each worker pinned to a core of its own).

Runs alternate (A B B A ...) with a pause at each switch.  Reported per set-up, medians over the
repeats: tuning wall time (planning, the untuned build and the tuning with its finalists; not the
command's own final timing), measured trials per second, the estimated model latency (sum over
tasks of weight x the log's best median kernel time) and the measured end-to-end latency of the
result.  At the end every result is rebuilt from its log and timed side by side in this process,
alternating rounds, beside the untuned model at 1 and 2 threads.  The two set-ups tune different
targets (1-thread against 2-thread kernels): their latencies compare what a user gets from each
on this machine, and a 1-thread result runs on one core.  Model ``mlp``: tests/onnx_models.py's MLP,
32x1024 -> 2048 -> 2048 -> 1000 (3 tasks); ``mlp-small``: 16x256 -> 512 -> 256 -> 128 (a quick check).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SETUPS = {"1 process x 2 threads": (0, 2), "2 workers x 1 thread": (2, 1)}
MODELS = {"mlp": {"batch": 32, "sizes": (1024, 2048, 2048, 1000)},
          "mlp-small": {"batch": 16, "sizes": (256, 512, 256, 128)}}

from bench_workers import PAUSE_S, fresh_database  # noqa: E402 - (benchmarks/ is this script's folder)
def run_once(model: str, server: str, workers: int, threads: int, trials: int, log: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, "-m", "tuner.cli", "tune-model", model, "--trials", str(trials), "--threads", str(threads),
           "--log", log, "--rounds", "1", "--json"]
    if workers:
        cmd += ["--storage", fresh_database(server), "--workers", str(workers)]
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"tune-model failed: {done.stderr.strip()[-800:]}")
    out = json.loads(done.stdout)
    out["command_seconds"] = time.perf_counter() - started
    out["estimated_from_log_s"] = estimated_latency(model, log, threads)
    return out


def estimated_latency(model: str, log: str, threads: int) -> float:
    """Sum over the tuned tasks of weight x the log's best median kernel time (as a rebuild picks it)."""
    from logs import TuningLog
    from tuner.model_api import load
    from tuner.model_compile import plan_graph
    from tuner.model_tasks import extract_tasks
    from tuner.target import host_target
    plan = plan_graph(load(model))
    target, db, total = host_target(threads), TuningLog(log, mode="r"), 0.0
    for task in extract_tasks(plan.graph, plan.groups, plan.lowered):
        if task.tuned:
            best = db.best(task.spec.key, target)
            total += task.weight * (best[0].median_cost if best else float("nan"))
    return total


def time_results(model: str, logs: dict, rounds: int) -> dict:
    """End-to-end seconds per call of each set-up's result (rebuilt from its logs) and of the
    untuned model at 1 and 2 threads, side by side in this process."""
    from tuner.compare import side_by_side
    from tuner.model_api import load
    from tuner.model_compile import assemble, build_kernels, plan_graph
    from tuner.model_timing import random_feeds
    plan = plan_graph(load(model))
    feeds = random_feeds(plan.graph, 0)
    models = {}
    for name, (log, threads) in logs.items():
        models[name] = assemble(plan, build_kernels(plan, log=log, threads=threads))
        models[name].threads = threads
    for threads in (2, 1):
        models[f"untuned x {threads}"] = assemble(plan, build_kernels(plan, log=[], threads=threads))
        models[f"untuned x {threads}"].threads = threads
    ref = models[f"untuned x {1}"].run(feeds)
    import numpy as np
    for name, m in models.items():      # every result computes the model
        got = m.run(feeds)
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-3, atol=1e-3, err_msg=name)
    res = side_by_side({n: (lambda m=m: m.run(feeds)) for n, m in models.items()}, rounds=rounds,
                       min_repeat_ms=200.0, repeats_per_round=3)
    return {name: r["median"] for name, r in res.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", help="a PostgreSQL server URL whose user may create databases")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--model", choices=list(MODELS), default="mlp")
    ap.add_argument("--rounds", type=int, default=7, help="alternating rounds of the final end-to-end timing")
    args = ap.parse_args(argv)
    import llvmlite.binding as llvm
    import onnx

    from tests import onnx_models
    folder, server = None, args.storage
    tmp = tempfile.mkdtemp(prefix="bench-wm-")
    os.chmod(tmp, 0o755)    # the server runs as another user (postgres) and must reach its folder inside
    if server is None:
        from tests import pg_server
        folder = os.path.join(tmp, "pg")
        server = pg_server.start(folder)
    model = os.path.join(tmp, f"{args.model}.onnx")
    onnx.save(onnx_models.mlp(**MODELS[args.model]), model)
    print(f"host {llvm.get_host_cpu_name()}, {len(os.sched_getaffinity(0))} cores; load average at start "
          f"{os.getloadavg()[0]:.2f}; model {args.model} {MODELS[args.model]}; {args.trials} trials per run")
    names = list(SETUPS)
    order = []
    for r in range(args.repeats):
        order += names if r % 2 == 0 else names[::-1]
    runs = {name: [] for name in names}
    try:
        last = None
        for k, name in enumerate(order):
            if last is not None and name != last:
                time.sleep(PAUSE_S)
            last = name
            workers, threads = SETUPS[name]
            log = os.path.join(tmp, f"run{k}.jsonl")
            res = run_once(model, server, workers, threads, args.trials, log)
            res["log_path"], res["threads_used"] = log, threads
            runs[name].append(res)
            by = res.get("by_worker") or {}
            print(f"{name}: {res['trials']} trials in {res['tuning_seconds']:.1f} s "
                  f"({res['trials'] / res['tuning_seconds']:.2f}/s), estimated {res['estimated_from_log_s'] * 1e3:.3f} ms"
                  + (f", by worker {sorted(by.values())}" if by else "")
                  + f", trials per task {[t['trials'] for t in res['tasks'] if t['state'] != 'heuristic']}"
                  + f"; load {os.getloadavg()[0]:.2f}", flush=True)
        # every result rebuilt from its log and timed side by side (the last run of each set-up's logs)
        time.sleep(PAUSE_S)
        logs = {f"{name} (run {i})": (r["log_path"], r["threads_used"])
                for name in names for i, r in enumerate(runs[name])}
        e2e = time_results(model, logs, args.rounds)
    finally:
        if folder is not None:
            pg_server.stop(folder)
    med = statistics.median
    print("\n| set-up | tuning s | trials/s | estimated ms | end-to-end ms |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        rs = runs[name]
        lat = [e2e[f"{name} (run {i})"] for i in range(len(rs))]
        print(f"| {name} | {med(r['tuning_seconds'] for r in rs):.1f} | "
              f"{med(r['trials'] / r['tuning_seconds'] for r in rs):.2f} | "
              f"{med(r['estimated_from_log_s'] for r in rs) * 1e3:.3f} | {med(lat) * 1e3:.3f} |")
    for threads in (2, 1):
        print(f"| untuned, {threads} thread{'s' if threads > 1 else ''} | - | - | - | "
              f"{e2e[f'untuned x {threads}'] * 1e3:.3f} |")
    print(f"\nmedians over {args.repeats} run(s) each; end-to-end: medians of {args.rounds} alternating rounds in one "
          f"process; load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
