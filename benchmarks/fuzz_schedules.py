"""The long schedule-fuzzing run: random schedules in worker processes; crashes and hangs are counted.

    python benchmarks/fuzz_schedules.py --schedules 2000 --seed 1 --workers 2 --timeout 60
    python benchmarks/fuzz_schedules.py --replay benchmarks/results/fuzz-<date>-seed1.jsonl [--minimize]

Case ``i`` of seed ``S`` is ``tests.fuzz.cases.seeded_case(S, i, allow_huge=...)``: the workload
and 3-12 primitives drawn against the schedule as it is, then the checks (lower, JSON and Python
replays, build, a run on sentinel-fenced arrays against ``tensorir.evaluate``).  Cases run in
worker processes (multiprocessing, spawn) under ``RLIMIT_AS`` (``--mem-gb``), so the huge factors
and the 8.8 GB intermediate this run also tries cannot take the machine's memory; a worker that
dies (segfault, abort) counts its case as ``crash``, one that passes ``--timeout`` is killed and
its case counts as ``hang``; the worker is replaced and the run goes on.  A worker reports each
call before applying it, so a crash or hang is recorded with the calls that led to it.

Prints counts per category and per workload, and the distinct failures (grouped by message);
writes every failing case (workload, category, message, JSON trace, the calls that rebuild it,
every finding) as one JSON line to ``benchmarks/results/fuzz-<date>-seed<S>.jsonl``; exits 0.

``--replay FILE`` re-runs the cases of such a file (``--index N`` for one) in workers and says
what each gives now; ``--minimize`` also drops calls while the category stays the same and
prints each minimized case as Python (and writes them to ``<FILE>-min.jsonl``).
"""
from __future__ import annotations

import argparse
import collections
import datetime as _dt
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"


# ================================================================= reporting

def signature(rec: dict) -> str:
    """Groups failures that are most likely the same bug: category + message without names/numbers."""
    msg = rec.get("message", "").split("\n")[0]
    msg, _, where = msg.partition(" @ ")
    msg = re.split(r"; current loops of |; stages: |; tensors: | \(first at ", msg)[0]
    msg = re.sub(r"^(\w+): (\d+) of (\d+) element", "<out>: N of N element", msg)
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", msg)
    msg = re.sub(r"\b[A-Za-z_]\w*(\.[\w-]+)+", "<loop>", msg)
    msg = re.sub(r"\d+", "N", msg)
    return f"{rec['category']}: {msg[:160]}" + (f" @ {where}" if where else "")


def print_tables(records: list, categories) -> None:
    cats = [c for c in categories if any(r["category"] == c for r in records)]
    total = collections.Counter(r["category"] for r in records)
    print("\ncases per category:")
    for c in cats:
        print(f"  {c:14s} {total[c]:6d}")
    print(f"  {'total':14s} {len(records):6d}")
    by_wl = collections.defaultdict(collections.Counter)
    for r in records:
        by_wl[r.get("workload") or "?"][r["category"]] += 1
    width = max([len(w) for w in by_wl] + [8])
    print("\ncases per workload:")
    print("  " + "workload".ljust(width) + "".join(f"{c[:12]:>13s}" for c in cats))
    for wl in sorted(by_wl):
        print("  " + wl.ljust(width) + "".join(f"{by_wl[wl][c]:13d}" for c in cats))
    findings = collections.Counter()
    example = {}
    for r in records:
        for f in r.get("findings") or []:
            sig = signature({"category": f["category"], "message": f["message"]})
            findings[sig] += 1
            if sig not in example or len(r.get("calls") or []) < len(example[sig].get("calls") or []):
                example[sig] = r
    if findings:
        print("\ndistinct failures (findings grouped by message; a case can have several):")
        for sig, n in findings.most_common():
            print(f"  {n:5d}  {sig}")


def _write_jsonl(path: Path, records) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r, default=repr) + "\n" for r in records)


# ================================================================= main

def fuzz(args) -> None:
    from tests.fuzz.outcomes import CATEGORIES
    from tests.fuzz.outcomes import LONG_RUN_ACCEPTABLE as ACCEPTABLE
    from tests.fuzz.pool import Pool
    jobs = [{"kind": "seeded", "seed": args.seed, "index": i, "huge": not args.no_huge, "avoid": args.avoid_known,
             "checked": args.checked or None}
            for i in range(args.schedules)]
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else RESULTS / f"fuzz-{stamp}-seed{args.seed}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"fuzzing {args.schedules} schedules, seed {args.seed}, {args.workers} worker(s), "
          f"timeout {args.timeout:.0f} s, RLIMIT_AS {args.mem_gb} GB, huge sizes {'off' if args.no_huge else 'on'}"
          + (", avoiding the known findings' triggers" if args.avoid_known else ""))
    t0 = time.monotonic()
    with open(out, "w") as failing, Pool(args.workers, args.timeout, args.mem_gb) as pool:

        def on_result(jid, rec):              # written as they come: a killed run keeps its findings
            if rec["category"] not in ACCEPTABLE:
                failing.write(json.dumps(rec, default=repr) + "\n")
                failing.flush()

        records = pool.run(jobs, on_result=on_result)
    print_tables([r for r in records if r is not None], CATEGORIES)
    n_fail = sum(r is not None and r["category"] not in ACCEPTABLE for r in records)
    print(f"\n{n_fail} failing case(s) written to {out}  ({time.monotonic() - t0:.0f} s)")
    print(f"replay: python benchmarks/fuzz_schedules.py --replay {out} [--index N] [--minimize]")


def replay(args) -> None:
    import random

    from tests.fuzz.outcomes import CATEGORIES
    from tests.fuzz.pool import Pool
    from tests.fuzz.reproducer import reproducer
    from tests.fuzz.workloads import pick_workload
    with open(args.replay) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    for r in recs:
        if not r.get("workload") and isinstance(r.get("seed"), str):    # a crash before the draw said
            r["workload"] = pick_workload(random.Random(r["seed"]), allow_huge=True)
    idx = list(range(len(recs))) if args.index is None else [args.index]
    if args.only:
        keep = set(args.only.split(","))
        idx = [i for i in idx if recs[i]["category"] in keep]
    chosen = [recs[i] for i in idx]

    def job(wl, calls, seed=None):
        return {"kind": "calls", "workload": wl, "calls": calls, "seed": seed, "checked": args.checked or None}

    with Pool(args.workers, args.timeout, args.mem_gb) as pool:
        now = pool.run([job(r["workload"], r.get("calls") or [], r.get("seed")) for r in chosen], quiet=True)
        print(f"{'#':>4s}  {'workload':26s} {'recorded':14s} {'now':14s} message now")
        for i, old, new in zip(idx, chosen, now):
            print(f"{i:4d}  {old['workload']!s:26s} {old['category']:14s} {new['category']:14s} "
                  f"{new.get('message', '').splitlines()[0][:110] if new.get('message') else ''}")
        print_tables(now, CATEGORIES)
        if not args.minimize:
            return
        minimized = []
        for i, old, new in zip(idx, chosen, now):
            if new["category"] in ("ok", "refused"):
                continue
            want = signature(new)

            def still(cs, wl=old["workload"], want=want):
                return signature(pool.run([job(wl, cs)], quiet=True)[0]) == want

            calls = _greedy_minimize(list(old.get("calls") or []), still)
            final = pool.run([job(old["workload"], calls)], quiet=True)[0]
            minimized.append(final)
            print(f"\n=== case {i}: {new['category']} on {old['workload']}, "
                  f"{len(old.get('calls') or [])} -> {len(calls)} call(s)")
            print(final.get("message", ""))
            print(reproducer(old["workload"], calls, final.get("results")))
    out = Path(str(args.replay).removesuffix(".jsonl") + "-min.jsonl")
    _write_jsonl(out, minimized)
    print(f"\nminimized cases written to {out}")


def _greedy_minimize(calls: list, still_fails) -> list:
    """Drop calls one at a time (last first) while the case keeps its category; repeat to a fixpoint."""
    cur, changed = list(calls), True
    while changed:
        changed = False
        for i in range(len(cur) - 1, -1, -1):
            cand = cur[:i] + cur[i + 1:]
            if still_fails(cand):
                cur, changed = cand, True
    return cur


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedules", type=int, default=2000, help="number of random schedules (cases)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take before it is a hang")
    ap.add_argument("--mem-gb", type=float, default=3.0, help="RLIMIT_AS of each worker (0: none)")
    ap.add_argument("--no-huge", action="store_true", help="no huge pack factors, no 8.8 GB workload")
    ap.add_argument("--avoid-known", action="store_true",
                    help="draw no arguments that trigger the known findings (duplicate or None loop names, "
                         "numpy integers, known-bad pack/split/from_json arguments), to find others")
    ap.add_argument("--checked", action="store_true",
                    help="build with Schedule.build(checked=True) (bounds-checked code, once it exists)")
    ap.add_argument("--out", help="failing-cases file (default benchmarks/results/fuzz-<date>-seed<S>.jsonl)")
    ap.add_argument("--replay", help="re-run the cases of a failing-cases file")
    ap.add_argument("--index", type=int, help="with --replay: only this case (0-based line)")
    ap.add_argument("--only", help="with --replay: only cases recorded with these categories (comma-separated)")
    ap.add_argument("--minimize", action="store_true",
                    help="with --replay: drop calls while the failure (category and message) stays")
    args = ap.parse_args(argv)
    if args.replay:
        replay(args)
    else:
        fuzz(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
