"""A worker process that runs cases (under a memory limit, its output in a log), and its handle.

A crash (segfault) or a hang of a kernel must cost a worker process, not the caller: the long run
(benchmarks/fuzz_schedules.py) and the property test run cases in a :class:`tests.fuzz.pool.Pool`.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time

# At module level: a spawned worker imports them (numpy, LLVM) as it unpickles its target, before it
# sets its memory limit.
from tests.fuzz.cases import replay_calls, run_case, seeded_case
from tests.fuzz.outcomes import describe_exc

CASES_PER_WORKER = 100          # a worker is replaced after this many cases (bounds memory growth)


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

    def hook(event, payload):
        conn.send((event, payload))

    while True:
        job = conn.recv()
        if job is None:
            break
        os.ftruncate(fd, 0)                    # the log keeps only this case's output (for crashes)
        conn.send(("start", job))
        try:
            opts = {"max_bytes": job.get("max_bytes"), "checked": job.get("checked"), "hook": hook}
            if job["kind"] == "seeded":
                res = seeded_case(job["seed"], job["index"], allow_huge=job["huge"],
                                  avoid_known=job.get("avoid", False), **opts)
            elif job["kind"] == "case":
                res = run_case(job["workload"], random.Random(job["seed"]), seed=job["seed"], **opts)
            else:
                res = replay_calls(job["workload"], job["calls"], seed=job.get("seed"), **opts)
            rec = res.record()
        except BaseException as err:  # noqa: BLE001 - the fuzzer itself failed: report it as such
            rec = {"workload": job.get("workload"), "category": "bad_error", "seed": job.get("seed"),
                   "message": f"fuzzer error: {describe_exc(err)}", "calls": [], "trace": None}
        conn.send(("done", json.loads(json.dumps(rec, default=repr))))


class Worker:
    """The parent's handle on one worker process: its pipe, its log, its job and what it reported."""

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
        """Start a fresh worker process."""
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker_main, args=(child, self.mem_gb, self.log), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.job = None
        self.count = 0

    def restart(self):
        """Kill the worker process if it still runs, and start a fresh one."""
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
        """Send ``job`` to the worker (replacing it first if it has run ``CASES_PER_WORKER`` cases)."""
        if self.count >= CASES_PER_WORKER:
            self.retire()
        self.count += 1
        self.job = job
        self.started = time.monotonic()
        seed = f"{job['seed']}:{job['index']}" if job["kind"] == "seeded" else job.get("seed")
        self.progress = {"workload": job.get("workload"), "calls": [], "trace": None, "seed": seed}
        self.conn.send(job)

    def log_tail(self, n: int = 3000) -> str:
        """The end of the worker's log: from its last fatal-error traceback if there is one."""
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
