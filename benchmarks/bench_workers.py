"""One worker with 2 threads against two pinned workers with 1 thread each, sharing a study on PostgreSQL.

    python benchmarks/bench_workers.py [--storage postgresql://user@host/postgres] [--trials 48]
                                       [--repeats 3] [--workload matmul M=256 N=256 K=256]

Each run is ``tensortune tune WORKLOAD --storage DB --workers W --threads T --trials N`` from an
empty log and a fresh database (the cost model on, as users run it): W=1, T=2 (one worker on
both cores) against W=2, T=1 (each worker pinned to a core of its own).  Runs alternate
(A B B A A B ...) with a pause at each switch.  From each study's measured trials (completion
time and GFLOP/s while tuning) it reports, medians over the repeats: measured trials per
second (from the command's start), seconds to 90% of the run's own best, and the best GFLOP/s
reached after the same wall time (the shorter of the two runs of a pair).  The two set-ups tune
different targets (2-thread kernels against 1-thread kernels): their GFLOP/s compare what a user
gets from each, not the searches alone.

Without ``--storage`` a throwaway server is started with tests/pg_server.py (PostgreSQL's initdb).
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETUPS = {"1 worker x 2 threads": (1, 2), "2 workers x 1 thread": (2, 1)}
PAUSE_S = 5.0


def fresh_database(server: str) -> str:
    import psycopg
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + f"/{name}"


def run_once(server: str, workload: list, workers: int, threads: int, trials: int) -> dict:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = fresh_database(server)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    with tempfile.TemporaryDirectory() as tmp:
        started = datetime.datetime.now()
        done = subprocess.run([sys.executable, "-m", "tuner.cli", "tune", *workload, "--trials", str(trials),
                               "--storage", url, "--workers", str(workers), "--threads", str(threads),
                               "--log", f"{tmp}/log.jsonl", "--quiet", "--json"],
                              env=env, capture_output=True, text=True, check=False)
        wall = (datetime.datetime.now() - started).total_seconds()
    if done.returncode:
        raise SystemExit(f"tune failed: {done.stderr.strip()[-500:]}")
    (summary,) = optuna.get_all_study_summaries(url, include_best_trial=False)
    study = optuna.load_study(study_name=summary.study_name, storage=url)
    timeline = sorted(((t.datetime_complete - started).total_seconds(), t.value)
                      for t in study.get_trials(deepcopy=False)
                      if t.state.name == "COMPLETE" and t.user_attrs.get("tensortune.claim") is not None)
    best = max(v for _, v in timeline)
    t90 = next(s for s, v in timeline if v >= 0.9 * best)
    return {"wall": wall, "trials": len(timeline), "timeline": timeline, "best": best, "t90": t90,
            "rate": len(timeline) / wall}


def best_by(timeline: list, seconds: float) -> float:
    return max((v for s, v in timeline if s <= seconds), default=0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", help="a PostgreSQL server URL whose user may create databases")
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workload", nargs="+", default=["matmul", "M=256", "N=256", "K=256"])
    args = ap.parse_args(argv)
    folder = None
    server = args.storage
    if server is None:
        sys.path.insert(0, ROOT)
        from tests import pg_server
        folder = tempfile.mkdtemp(prefix="bench-pg-")
        server = pg_server.start(folder)
    import llvmlite.binding as llvm
    print(f"host {llvm.get_host_cpu_name()}, {len(os.sched_getaffinity(0))} cores; load average at start "
          f"{os.getloadavg()[0]:.2f}; workload {' '.join(args.workload)}; {args.trials} trials per run")
    runs = {name: [] for name in SETUPS}
    names = list(SETUPS)
    order = []
    for r in range(args.repeats):
        order += names if r % 2 == 0 else names[::-1]
    try:
        last = None
        for name in order:
            if last is not None and name != last:
                time.sleep(PAUSE_S)
            last = name
            workers, threads = SETUPS[name]
            res = run_once(server, args.workload, workers, threads, args.trials)
            runs[name].append(res)
            print(f"{name}: {res['trials']} trials in {res['wall']:.1f} s ({res['rate']:.2f}/s), best "
                  f"{res['best']:.1f} GFLOP/s, 90% of it after {res['t90']:.1f} s; load {os.getloadavg()[0]:.2f}",
                  flush=True)
    finally:
        if folder is not None:
            pg_server.stop(folder)
    # the best after equal wall time: pair the i-th runs of the two set-ups
    a, b = (runs[n] for n in names)
    equal = [min(x["wall"], y["wall"]) for x, y in zip(a, b)]
    med = statistics.median
    print("\n| set-up | trials/s | s to 90% of own best | best GFLOP/s (end) | best GFLOP/s after equal wall time |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        rs = runs[name]
        print(f"| {name} | {med(r['rate'] for r in rs):.2f} | {med(r['t90'] for r in rs):.1f} | "
              f"{med(r['best'] for r in rs):.1f} | {med(best_by(r['timeline'], s) for r, s in zip(rs, equal)):.1f} |")
    print(f"\nmedians over {args.repeats} runs each; equal wall times (s): {', '.join(f'{s:.1f}' for s in equal)}; "
          f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
