"""The long schedule-fuzzing run: random schedules in worker processes; crashes and hangs are counted.

    python benchmarks/fuzz_schedules.py --schedules 2000 --seed 1 --workers 2 --timeout 60
    python benchmarks/fuzz_schedules.py --replay benchmarks/results/fuzz-<date>-seed1.jsonl [--minimize]

Case ``i`` of seed ``S`` is ``tests.schedule_fuzz.seeded_case(S, i, allow_huge=...)``: the workload
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
import multiprocessing as mp
import os
import re
import sys
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
CASES_PER_WORKER = 100          # a worker is replaced after this many cases (bounds memory growth)


# ================================================================= worker side

def _worker_main(conn, mem_gb: float, log_path: str) -> None:
    """Run jobs from ``conn`` until told to stop; report progress before each step."""
    import faulthandler
    import resource
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))      # a crash must not spend minutes writing a core
    if mem_gb > 0:
        limit = int(mem_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from tests import schedule_fuzz as F

    def hook(event, payload):
        conn.send((event, payload))

    while True:
        job = conn.recv()
        if job is None:
            break
        os.ftruncate(fd, 0)                    # the log keeps only this case's output (for crashes)
        conn.send(("start", job))
        try:
            if job["kind"] == "seeded":
                res = F.seeded_case(job["seed"], job["index"], allow_huge=job["huge"],
                                    avoid_known=job.get("avoid", False), max_bytes=None, hook=hook,
                                    checked=job.get("checked"))
            else:
                res = F.replay_calls(job["workload"], job["calls"], max_bytes=None, hook=hook,
                                     seed=job.get("seed"), checked=job.get("checked"))
            rec = res.record()
        except BaseException as err:  # noqa: BLE001 - the fuzzer itself failed: report it as such
            rec = {"workload": job.get("workload"), "category": "bad_error", "seed": job.get("seed"),
                   "message": f"fuzzer error: {F._describe_exc(err)}", "calls": [], "trace": None}
        conn.send(("done", json.loads(json.dumps(rec, default=repr))))


# ================================================================= parent side

class Worker:
    def __init__(self, ctx, mem_gb: float, logdir: str, n: int):
        self.ctx, self.mem_gb, self.n = ctx, mem_gb, n
        self.log = os.path.join(logdir, f"worker{n}.log")
        self.proc = self.conn = None
        self.job = None
        self.count = 0
        self.started = 0.0
        self.progress: dict = {}
        self.start()

    def start(self):
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker_main, args=(child, self.mem_gb, self.log), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.job = None
        self.count = 0

    def restart(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self.start()

    def retire(self):
        """Replace an idle worker by a fresh one (bounds the memory a long run accumulates)."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(10)
        self.restart()

    def submit(self, job):
        if self.count >= CASES_PER_WORKER:
            self.retire()
        self.count += 1
        self.job = job
        self.started = time.monotonic()
        seed = f"{job['seed']}:{job['index']}" if job["kind"] == "seeded" else job.get("seed")
        self.progress = {"workload": job.get("workload"), "calls": [], "trace": None, "seed": seed}
        self.conn.send(job)

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - 200_000))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        # the traceback faulthandler wrote, without LLVM's pass chatter
        lines = [ln for ln in text.splitlines() if not ln.startswith("Skipping pass ")]
        text = "\n".join(lines)
        at = text.rfind("Fatal Python error")
        return (text[at:] if at >= 0 else text)[-n:]


def _signal_name(code) -> str:
    import signal
    if code is None:
        return "still running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _crash_record(w: Worker, category: str, why: str) -> dict:
    p = w.progress
    tail = w.log_tail()
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\w+)', tail)
    where = ""
    if frames:
        f, line, fn = frames[0]                # faulthandler lists the innermost frame first
        where = f" @ {'/'.join(f.split('/')[-2:])}:{line} in {fn}"
    phase = "in the final checks (build/run)" if p.get("trace") is not None else \
        f"during call {len(p['calls']) - 1}" if p.get("calls") else "before the first call"
    return {"workload": p.get("workload"), "category": category, "seed": p.get("seed"),
            "message": f"{why} {phase}{where}", "trace": p.get("trace"), "calls": p.get("calls", []),
            "findings": [{"category": category, "message": f"{why} {phase}{where}", "call_index": None,
                          "trace": p.get("trace")}], "log_tail": tail[:2000]}


class Pool:
    """Worker processes that run jobs; a crash or a hang costs one worker, which is replaced."""

    def __init__(self, workers: int, timeout: float, mem_gb: float):
        ctx = mp.get_context("spawn")
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")       # idle OpenMP threads must not spin
        self.timeout = timeout
        self.logdir = tempfile.mkdtemp(prefix="fuzz-workers-")
        self.workers = [Worker(ctx, mem_gb, self.logdir, n) for n in range(max(1, workers))]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for w in self.workers:
            try:
                if w.job is None and w.proc.is_alive():
                    w.conn.send(None)
            except OSError:
                pass
        for w in self.workers:
            w.proc.join(2)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(2)

    def run(self, jobs, *, on_result=None, quiet=False) -> list:
        """Run ``jobs``; returns one record per job, in order (crash/hang records included)."""
        pending = collections.deque(enumerate(jobs))
        results: list = [None] * len(jobs)
        ids: dict = {}
        done = 0
        t0 = time.monotonic()

        def finish(w: Worker, rec: dict):
            nonlocal done
            jid = ids.pop(id(w))
            results[jid] = rec
            done += 1
            w.job = None
            if on_result:
                on_result(jid, rec)
            if not quiet and (done % 100 == 0 or done == len(jobs)):
                print(f"  {done}/{len(jobs)} cases, {time.monotonic() - t0:.0f} s", flush=True)

        while pending or any(w.job is not None for w in self.workers):
            for w in self.workers:
                if w.job is None and pending:
                    jid, job = pending.popleft()
                    ids[id(w)] = jid
                    try:
                        w.submit(job)
                    except OSError:                 # died between jobs: replace it and try again
                        w.restart()
                        w.submit(job)
            busy = [w for w in self.workers if w.job is not None]
            wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=0.5)
            for w in self.workers:
                broken = False
                try:
                    while w.conn.poll():
                        kind, payload = w.conn.recv()
                        if kind == "workload":
                            w.progress["workload"] = payload
                        elif kind == "call":
                            w.progress["calls"].append(payload)
                        elif kind == "check":
                            w.progress["trace"] = payload
                        elif kind == "done" and w.job is not None:
                            finish(w, payload)
                except (EOFError, OSError):
                    broken = True
                if w.job is None:
                    if broken or not w.proc.is_alive():
                        w.proc.join(5)
                        w.restart()
                    continue
                if broken or not w.proc.is_alive():
                    w.proc.join(1)
                    finish(w, _crash_record(w, "crash", f"worker died ({_signal_name(w.proc.exitcode)})"))
                    w.restart()
                elif time.monotonic() - w.started > self.timeout:
                    finish(w, _crash_record(w, "hang", f"no result after {self.timeout:.0f} s"))
                    w.restart()
        return results


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
        for r in records:
            f.write(json.dumps(r, default=repr) + "\n")


# ================================================================= main

def fuzz(args) -> None:
    from tests.schedule_fuzz import CATEGORIES, LONG_RUN_ACCEPTABLE as ACCEPTABLE
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
    failing = open(out, "w")

    def on_result(jid, rec):
        if rec["category"] not in ACCEPTABLE:
            failing.write(json.dumps(rec, default=repr) + "\n")
            failing.flush()

    try:
        with Pool(args.workers, args.timeout, args.mem_gb) as pool:
            records = pool.run(jobs, on_result=on_result)
    finally:
        failing.close()
    print_tables([r for r in records if r is not None], CATEGORIES)
    n_fail = sum(r is not None and r["category"] not in ACCEPTABLE for r in records)
    print(f"\n{n_fail} failing case(s) written to {out}  ({time.monotonic() - t0:.0f} s)")
    print(f"replay: python benchmarks/fuzz_schedules.py --replay {out} [--index N] [--minimize]")


def replay(args) -> None:
    from tests.schedule_fuzz import CATEGORIES, reproducer
    recs = [json.loads(line) for line in open(args.replay) if line.strip()]
    for r in recs:
        if not r.get("workload") and isinstance(r.get("seed"), str):    # a crash before the draw said
            import random
            from tests.schedule_fuzz import pick_workload
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
