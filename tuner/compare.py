"""Time several implementations side by side in one process, alternating round by round.

On a shared, noisy machine absolute timings drift by tens of percent within
minutes, so a tuned kernel is compared with numpy by measuring both in the
same process, interleaved: round 1 times A then B, round 2 B then A, and so
on, and the medians are compared.  The host's noise comes in blocks of
seconds (another tenant's burst slows every call of a round by up to 40%), so a
ratio is best taken round by round, between calls made a fraction of a second
apart, and the median of those per-round ratios reported (:func:`paired_speedup`):
on ResNet-18 against onnxruntime, four repetitions under load gave 0.84-0.90x
that way against 0.74-0.92x as a ratio of the two overall medians.

Runtimes leave threads spinning after a call: on this machine (2 cores)
OpenBLAS's worker thread kept burning CPU for about 110 ms after a 512^3 sgemm,
tensortune's pool for about 10 us after a parallel kernel.  A function timed right
after the other side would share its cores with those spinning threads, so
:func:`side_by_side` sleeps ``gap_s`` (default 0.2 s, about twice the
OpenBLAS spin) every time it switches from one function to another.

>>> import numpy as np
>>> a = np.ones((256, 256), np.float32)
>>> res = side_by_side({"numpy": lambda: a @ a, "copy": lambda: a.copy()}, rounds=2,
...                    min_repeat_ms=5, gap_s=0.01)
>>> sorted(res), res["numpy"]["median"] > 0
(['copy', 'numpy'], True)
"""
from __future__ import annotations

import gc
import math
import statistics
import time
from typing import Callable

DEFAULT_GAP_S = 0.2


def calibrate(fn: Callable[[], None], min_repeat_s: float, max_number: int = 1 << 24) -> int:
    """Calls of ``fn`` needed for one repeat to last at least ``min_repeat_s`` (after one warm-up call).

    Parameters
    ----------
    fn : callable
        The function to time (no arguments).
    min_repeat_s : float
        Target duration of one repeat in seconds.
    max_number : int
        Upper bound of the answer.

    Returns
    -------
    int
        At least 1.
    """
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= 0.2 * min_repeat_s or n >= max_number:
            break
        n *= 10 if dt < 0.02 * min_repeat_s else 2
    return int(min(max_number, max(1, math.ceil(min_repeat_s * n / max(dt, 1e-9)))))


def time_repeats(fn: Callable[[], None], number: int, repeats: int) -> list:
    """Seconds per call of ``fn``, one value per repeat of ``number`` calls, with the GC off."""
    out = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - t0) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return out


def side_by_side(fns: dict, rounds: int = 5, min_repeat_ms: float = 100.0, repeats_per_round: int = 3,
                 gap_s: float = DEFAULT_GAP_S) -> dict:
    """Time functions alternately in this process and return their median time per call.

    Parameters
    ----------
    fns : dict of str to callable
        Zero-argument functions, e.g. ``{"numpy": lambda: a @ b, "tuned": lambda: k(a, b, c)}``.
    rounds : int
        Rounds; each times every function in turn (order reversed every other round).
    min_repeat_ms : float
        Each repeat calls a function ``number`` times, calibrated per function
        so a repeat lasts at least this long.
    repeats_per_round : int
        Repeats of each function per round.
    gap_s : float
        Sleep before switching to another function, so threads the previous
        one left spinning (OpenBLAS, OpenMP) are idle again.

    Returns
    -------
    dict
        ``{name: {"median": seconds per call, "all": [seconds per call of
        each repeat, in order], "rounds": [median of each round's repeats],
        "number": calls per repeat}}``.
    """
    if not fns:
        return {}
    for name, fn in fns.items():
        if not callable(fn):
            raise TypeError(f"side_by_side: {name!r} is not callable")
    if rounds < 1 or repeats_per_round < 1 or min_repeat_ms <= 0 or gap_s < 0:
        raise ValueError("side_by_side: rounds and repeats_per_round must be >= 1, min_repeat_ms > 0, gap_s >= 0")
    names = list(fns)
    number = {}
    for name in names:
        time.sleep(gap_s)
        number[name] = calibrate(fns[name], min_repeat_ms / 1000.0)
    times: dict = {name: [] for name in names}
    per_round: dict = {name: [] for name in names}
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            time.sleep(gap_s)
            got = time_repeats(fns[name], number[name], repeats_per_round)
            times[name].extend(got)
            per_round[name].append(statistics.median(got))
    return {name: {"median": statistics.median(times[name]), "all": times[name], "rounds": per_round[name],
                   "number": number[name]} for name in names}


def paired_speedup(res: dict, name: str, base: str) -> float:
    """How many times faster ``name`` ran than ``base`` in a :func:`side_by_side` result: the median
    over rounds of ``base``'s time in the round divided by ``name``'s (above 1: ``name`` is faster).
    Each ratio compares calls made within one round, so a slow spell of the host that covers a
    round slows both sides of it instead of one side's median."""
    return statistics.median(b / a for a, b in zip(res[name]["rounds"], res[base]["rounds"]))


def limit_threads(threads: int):
    """A context manager that caps numpy's BLAS (and OpenMP) thread pools at ``threads`` while a
    comparison runs, so numpy uses as many threads as the kernel it is compared with."""
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(threads)
    except ImportError:  # pragma: no cover - a dependency of scikit-learn
        import contextlib
        return contextlib.nullcontext()
