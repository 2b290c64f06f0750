"""Compile time: build a workload with the best schedule its tuning logs hold.

>>> from logs import build
>>> kernel = build([A, B, C])            # best tuned schedule, or the default one + one warning
"""
from __future__ import annotations

import warnings

from .lookup import find_best


class TuningFallbackWarning(UserWarning):
    """No usable tuning record: the default schedule is used (one line says why)."""


def current_target(threads: int | None = None) -> dict:
    from tensorir.target import Target
    return Target.host(threads or None).record()


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


def best_schedule(tensors, paths=None, threads: int | None = None, name: str | None = None,
                  params: dict | None = None):
    """``(Schedule or None, Lookup)``: the best logged schedule for this workload and machine.

    A record whose trace no longer replays (e.g. written by an incompatible
    version) is reported in the lookup's reason and skipped.
    """
    from tensorir.te.serialize import workload_key
    tensors = list(tensors)
    replayed = {}

    def replays(record) -> bool:
        replayed[id(record)] = replay(tensors, record)
        return replayed[id(record)] is not None

    lookup = find_best(workload_key(tensors), current_target(threads), paths, name=name, params=params,
                       usable=replays)
    if lookup.record is None:
        return None, lookup
    return replayed[id(lookup.record)], lookup


def build(tensors, log=None, threads: int | None = None, name: str | None = None, params: dict | None = None,
          warn: bool = True):
    """Build ``tensors`` with the best tuned schedule from ``log`` (default: the per-user and shipped logs).

    Falls back to the default schedule with a single :class:`TuningFallbackWarning`
    that says what was searched and why nothing was used.  The kernel gets
    ``lookup`` (how the schedule was found) and ``schedule`` attributes.
    """
    from schedules import Schedule
    from tensorir.runtime import build as build_func
    paths = None if log is None else ([log] if isinstance(log, (str, bytes)) or hasattr(log, "__fspath__")
                                      else list(log))
    sch, lookup = best_schedule(tensors, paths, threads, name, params)
    if sch is None:
        if warn:
            warnings.warn(lookup.reason, TuningFallbackWarning, stacklevel=2)
        sch = Schedule(list(tensors))
    kernel = build_func(sch.lower())
    if threads is not None:
        kernel.threads = threads
    kernel.lookup = lookup
    kernel.schedule = sch
    return kernel
