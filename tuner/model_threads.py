"""How many threads a compiled model runs on: one when its whole work is smaller than waking a second.

A worker that slept (between two calls, or after a pause) is woken at the first parallel region
of a call. On libgomp the region's end waited for it, 35-100 us per call on the virtual machines
measured, so a one-conv model of 0.4 MFLOP ran 4-6x slower at 2 threads than at one. The pool
(decision 079) no longer waits for it, but the futex wake, the caller's yield and a late worker's
last chunk still make 2 threads slower than one on models estimated under 150 us called after an
idle pause (0.72x-0.98x; called back to back, the worker spins between calls and 2 threads win:
decision 080). A model whose
estimated one-thread time is below :data:`SERIAL_MODEL_SECONDS` therefore runs on one thread
whatever thread count was asked for (``model.threads`` set afterwards still overrides it).
docs/decisions/078-small-models-run-on-one-thread.md
"""
from __future__ import annotations

import numpy as np

from tensorir.te.evaluate import count_flops
from tuner.target import compile_target

# A model estimated to take less than this on one thread runs on one (decision 078).
SERIAL_MODEL_SECONDS = 150e-6
# The estimate's rates: deliberately below what untuned kernels reach (AVX2 hosts included), so a
# model near the limit is counted slower than it is and keeps its threads.
SERIAL_FLOPS_PER_SECOND = 50e9
SERIAL_BYTES_PER_SECOND = 10e9


def serial_estimate(lowered) -> float:
    """Seconds the lowered groups (one per step) would take on one thread, roughly: every stage's
    arithmetic at :data:`SERIAL_FLOPS_PER_SECOND` plus every tensor each group reads or writes,
    once, at :data:`SERIAL_BYTES_PER_SECOND`."""
    flops = nbytes = 0
    for lw in lowered:
        flops += count_flops(lw.tensors)
        nbytes += sum(int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in lw.tensors)
    return flops / SERIAL_FLOPS_PER_SECOND + nbytes / SERIAL_BYTES_PER_SECOND


def model_threads(lowered, threads: int | None) -> tuple:
    """``(threads, reason)``: 1 and why when the model is too small for more (see the module
    docstring), else ``(threads, None)`` unchanged (None: the kernels' default)."""
    if threads == 1 or (threads is None and compile_target().cores < 2):
        return threads, None
    seconds = serial_estimate(lowered)
    if seconds >= SERIAL_MODEL_SECONDS:
        return threads, None
    return 1, (f"runs on 1 thread: its estimated work ({seconds * 1e6:.0f} us on one thread) is below "
               f"the cost of waking a second ({SERIAL_MODEL_SECONDS * 1e6:.0f} us limit)")
