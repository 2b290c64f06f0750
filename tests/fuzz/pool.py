"""A pool of worker processes that run fuzz jobs; a crash or a hang is recorded, not fatal.

A job is a dict: ``{"kind": "seeded", "seed", "index", "huge", "avoid"}`` (case ``index`` of a
seeded run), ``{"kind": "case", "workload", "seed"}`` (a case drawn from ``seed``) or
``{"kind": "calls", "workload", "calls", "seed"}`` (recorded calls replayed); each may also carry
``max_bytes`` and ``checked``.  The result of each is a case record (``CaseResult.record()``), or a
``crash`` / ``hang`` record with the calls the worker had reported.
"""
from __future__ import annotations

import collections
import multiprocessing as mp
import os
import re
import tempfile
import time
from multiprocessing.connection import wait

from tests.fuzz.worker import Worker


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
        """Stop the workers (killing those that do not stop) and remove their logs."""
        import shutil
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
        shutil.rmtree(self.logdir, ignore_errors=True)

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
