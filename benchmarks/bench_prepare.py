"""Parent-side cost of the tuner's candidates: CPU per ask and per measured candidate.

    python benchmarks/bench_prepare.py [--only matmul512,conv2d] [--n 30] [--rounds 5] [--seed 1000]

An ask (the asking thread's work: decisions -> schedule -> the schedule's own loop nest ->
features, ``Candidates.prepare``) is made for every proposal; once the cost model ranks, most
are screened out.  A measured candidate also runs the code-generation passes (``Candidate.func``)
before it is sent to a builder.  Decision sets: the heuristic default plus ``--n`` random ones
(fixed seed).  Thread CPU time (``time.thread_time``), the median over ``--rounds`` per decision
set, then the mean over the sets.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from schedules.decisions import RandomDecisions
from schedules.space import GeneratedSpace
from tuner.candidates import Candidates
from tuner.spec import WorkloadSpec

WORKLOADS = {
    "matmul512": ("matmul", ["M=512", "N=512", "K=512"]),
    "conv2d": ("conv2d", ["N=1", "C=64", "H=56", "W=56", "K=64", "R=3", "S=3", "pad=1"]),
}


def decision_sets(space, n: int, seed: int) -> list:
    sets = [dict(space.default_decisions())]
    while len(sets) < n + 1:
        src = RandomDecisions(seed + len(sets))
        try:
            space.apply(src).lower()
        except Exception:  # noqa: BLE001 - an illegal combination: draw another
            continue
        sets.append(dict(src.decisions))
    return sets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1000)
    args = ap.parse_args(argv)
    print("| workload | per ask (prepare) ms CPU | per measured candidate (passes) ms CPU | decision sets |")
    print("|---|---|---|---|")
    for key in args.only.split(","):
        name, params = WORKLOADS[key]
        spec = WorkloadSpec.parse(name, params)
        space = GeneratedSpace(spec.tensors())
        cands = Candidates(spec, space, {})
        sets = decision_sets(space, args.n, args.seed)
        ask = [[] for _ in sets]
        finish = [[] for _ in sets]
        for r in range(args.rounds + 1):          # round 0 warms up
            for i, d in enumerate(sets):
                t0 = time.thread_time()
                c = cands.prepare(None, d)
                t1 = time.thread_time()
                assert c.func is not None
                t2 = time.thread_time()
                if r:
                    ask[i].append(t1 - t0)
                    finish[i].append(t2 - t1)
        per_ask = statistics.mean(statistics.median(x) for x in ask) * 1e3
        per_measured = statistics.mean(statistics.median(x) for x in finish) * 1e3
        print(f"| {spec.label} | {per_ask:.2f} | {per_measured:.2f} | {len(sets)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
