"""Benchmark phases on a quiet machine and beside one busy-looping process (another program on the
other core), shared by bench_wait_policy.py and bench_parallel_schedule.py."""
from __future__ import annotations

import subprocess
import sys
import time


def phases(hog: bool = True):
    """Yield ``"quiet"``, then (``hog``) ``"other core busy"`` while a busy loop runs in a child process."""
    for phase in ("quiet", "other core busy") if hog else ("quiet",):
        proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if phase != "quiet" else None
        time.sleep(1)
        try:
            yield phase
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
