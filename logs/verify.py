"""Check a logged schedule before a build uses it: replay its trace, compile, compare with numpy.

A log outlives the code that wrote it: a trace may no longer replay, or may
replay into a loop nest that a later version lowers differently.  The record
a build is about to use is therefore run once on random inputs and compared
with :func:`tensorir.evaluate.evaluate` (the tensor expression computed by
numpy).  Verdicts are cached per record and workload naming, so each record
is checked once per process, and only records that are actually chosen.
"""
from __future__ import annotations

import json
import threading

import numpy as np

from tensorir.te.check import check_outputs, longest_reduction

_VERDICTS: dict = {}
_LOCK = threading.Lock()


def clear_verdicts() -> None:
    """Forget the cached verdicts (a changed record is a new record anyway)."""
    with _LOCK:
        _VERDICTS.clear()


def replay(tensors, record):
    """The record's schedule on ``tensors``, or None if its trace does not replay there.

    The workload key is structural, so a log may hold records of the same
    computation written with other tensor or axis names; their traces name
    other loops.
    """
    from schedules import Schedule
    from schedules.errors import ScheduleError
    try:
        return Schedule.from_json(list(tensors), record.trace)
    except (ScheduleError, ValueError, TypeError, KeyError):
        return None


def error_line(err: BaseException, limit: int = 160) -> str:
    """``err`` as one line of at most ``limit`` characters, led by its type."""
    text = " ".join(str(err).split()) or type(err).__name__
    text = f"{type(err).__name__}: {text}" if not text.startswith(type(err).__name__) else text
    return text if len(text) <= limit else text[:limit - 3] + "..."


def random_inputs(tensors, seed: int = 0) -> list:
    """One random array per placeholder, in workload order: uniform in [-1, 1], small integers for ints."""
    rng = np.random.default_rng(seed)
    out = []
    for t in tensors:
        if not t.is_placeholder:
            continue
        if np.dtype(t.dtype).kind in "iu":
            out.append(rng.integers(-8 if np.dtype(t.dtype).kind == "i" else 0, 8, t.shape).astype(t.dtype))
        else:
            out.append(rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype))
    return out


def check_schedule(tensors, schedule) -> str | None:
    """Compile ``schedule`` and run it on random inputs against numpy: None if right, else why not.

    Returns None as well when the reference itself cannot be computed (e.g. too
    large for memory): the check cannot tell, and a build should not fail on that.
    """
    from tensorir.runtime import build as build_func
    from tensorir.te.evaluate import EvaluateError, evaluate
    tensors = list(tensors)
    try:
        kernel = build_func(schedule.lower())
    except Exception as err:  # noqa: BLE001 - any failure to lower or compile makes the record unusable
        return f"does not build: {error_line(err)}"
    try:
        inputs = random_inputs(tensors)
        refs = evaluate(tensors, inputs)
        outs = [np.full(t.shape, np.nan if np.dtype(t.dtype).kind == "f" else 0, t.dtype)
                for t in tensors if not t.is_placeholder]
    except (EvaluateError, MemoryError):
        return None
    feed, fill = iter(inputs), iter(outs)
    try:
        kernel(*[next(feed) if t.is_placeholder else next(fill) for t in tensors])
    except Exception as err:  # noqa: BLE001
        return f"fails when run: {error_line(err)}"
    names = [t.name for t in tensors if not t.is_placeholder]
    wrong = check_outputs(names, outs, refs, reduction_length=longest_reduction(tensors))
    return None if wrong is None else f"wrong answer: {wrong}"


def usable(tensors, record, check: bool = True):
    """True if ``record`` replays on ``tensors`` and (if ``check``) computes the right numbers,
    else one line saying why not (cached per record and tensor naming)."""
    from tensorir.te.serialize import workload_to_json
    key = (record.canonical_key(), json.dumps(workload_to_json(tensors), sort_keys=True), check)
    with _LOCK:
        if key in _VERDICTS:
            return _VERDICTS[key]
    schedule = replay(tensors, record)
    if schedule is None:
        verdict = "does not replay on these tensors"
    else:
        verdict = (check_schedule(tensors, schedule) if check else None) or True
    with _LOCK:
        _VERDICTS[key] = verdict
    return verdict
