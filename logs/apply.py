"""Compile time: build a workload with the best schedule its tuning logs hold.

>>> from logs import apply_best, build
>>> kernel = build([A, B, C])            # best tuned schedule, or the heuristic one + one warning
>>> kernel.lookup.match                  # "exact", "same_cpu", "compatible_cpu", "heuristic" or "naive"
>>> with apply_best("run.jsonl"):        # run.jsonl first; one summary of the fallbacks at the end
...     kernel = build([A, B, C])

Without a usable record the build uses the generated space's heuristic start
(the tuner's first trial, :meth:`schedules.space.GeneratedSpace.default_decisions`):
tiled, vectorized and parallel, it is within a few percent of a tuned schedule
on matmul-like workloads and many times faster than the naive loop nest,
which is built only on request (``fallback="naive"``) or when the heuristic
schedule fails to build.
"""
from __future__ import annotations

import dataclasses
import warnings

from .fallback import FALLBACKS, Fallback, TuningFallbackWarning, summary
from .lookup import find_best
from .naming import describe, identify
from .scope import current_scope, search_paths
from .verify import error_line, replay, usable as record_usable

__all__ = ["TuningFallbackWarning", "best_schedule", "build", "current_target", "heuristic_schedule", "replay"]


def current_target(threads: int | None = None) -> dict:
    """The host as tuning records store it (``kind``, ``cpu``, ``features``, ``threads``)."""
    from tensorir.target import Target
    return Target.host(threads or None).record()


def best_schedule(tensors, paths=None, threads: int | None = None, name: str | None = None,
                  params: dict | None = None, check: bool = True, choices: bool = True):
    """``(Schedule or None, Lookup)``: the best logged schedule for this workload and machine.

    A record whose trace no longer replays, or (with ``check``) whose kernel
    disagrees with numpy on random inputs, is skipped for the next one; the
    lookup's ``skipped`` names each with its log and line.
    """
    from tensorir.te.serialize import workload_key
    tensors = list(tensors)
    lookup = find_best(workload_key(tensors), current_target(threads), paths, name=name, params=params,
                       usable=lambda record: record_usable(tensors, record, check), choices=choices)
    if lookup.record is None:
        return None, lookup
    return replay(tensors, lookup.record), lookup


def heuristic_schedule(tensors, target=None):
    """The generated space's heuristic start for ``tensors``: the first trial of every tuning run.

    ``target`` (a :class:`~tensorir.target.Target`, default the host) sizes the space's vectors and tasks.
    Raises whatever the space raises (e.g. :class:`~schedules.errors.ScheduleError`).
    """
    from schedules.decisions import FixedDecisions
    from schedules.space import GeneratedSpace, SpaceOptions
    options = SpaceOptions.host() if target is None else SpaceOptions(target.vector_bits, target.cores)
    space = GeneratedSpace(list(tensors), options)
    return space.apply(FixedDecisions(space.default_decisions()))


def _untuned(tensors, lookup, fallback: str):
    """``(kernel, schedule, lookup)`` without a record: the heuristic schedule, else the naive nest."""
    from schedules import Schedule
    from tensorir.runtime import build as build_func
    base = lookup.reason.removesuffix("; using the default schedule")
    if fallback == "heuristic":
        try:
            sch = heuristic_schedule(tensors)
            kernel = build_func(sch.lower())
        except Exception as err:  # noqa: BLE001 - any failure of the heuristic start: the naive nest still serves
            failure = error_line(err, limit=200)
        else:
            reason = f"{base}; using the heuristic schedule (the tuner's first trial)"
            return kernel, sch, dataclasses.replace(lookup, match="heuristic", reason=reason)
        why = f"{lookup.why}; heuristic failed: {failure}"
        reason = f"{base}; the heuristic schedule failed ({failure}); using the naive loop nest"
    else:
        why, reason = lookup.why, f"{base}; using the naive loop nest (asked for)"
    sch = Schedule(list(tensors))
    return build_func(sch.lower()), sch, dataclasses.replace(lookup, match="naive", reason=reason, why=why)


def build(tensors, log=None, threads: int | None = None, name: str | None = None, params: dict | None = None,
          warn: bool = True, fallback: str = "heuristic", check: bool = True, choices: bool = True):
    """Build ``tensors`` with the best tuned schedule its logs hold.

    Parameters
    ----------
    tensors : list of te.Tensor
        The workload (inputs first, then outputs).
    log : path-like or list of path-like, optional
        Search only these logs.  Default: the logs of the enclosing
        :func:`~logs.scope.apply_best` scopes (innermost first), then the
        per-user log, then the shipped logs.
    threads : int, optional
        Threads of the kernel's parallel loops, and the thread count records
        are matched on (default: every usable core).
    name, params : optional
        The workload's name and parameters, for messages (a built-in workload
        is recognised from its tensors without them).
    warn : bool
        Outside any scope, emit one :class:`TuningFallbackWarning` when no
        tuned schedule is used (inside a scope, the scope reports it).
    fallback : {"heuristic", "naive"}
        What to build without a usable record: the generated space's heuristic
        start (default; the naive nest if that fails to build) or the naive
        loop nest.
    check : bool
        Check the chosen record's kernel against numpy once per process
        before using it (default True); a record that fails is skipped.
    choices : bool
        Let a model's choice (``tune-model``'s final check) rank first (default);
        False: the fastest measurement alone.

    Returns
    -------
    Kernel
        With ``lookup`` (:class:`~logs.lookup.Lookup`: the rule that matched,
        or ``"heuristic"`` / ``"naive"``, the record, its log and line, the
        records skipped and a one-line ``reason``) and ``schedule``.
    """
    from tensorir.runtime import build as build_func
    if fallback not in FALLBACKS:
        raise ValueError(f"build(): fallback must be one of {', '.join(map(repr, FALLBACKS))}, got {fallback!r}")
    tensors = list(tensors)
    if name is None:   # a built-in workload, recognised, is named in messages
        name, params = identify(tensors) or (None, params)
    if log is None:
        paths = search_paths()
    else:
        paths = [log] if isinstance(log, (str, bytes)) or hasattr(log, "__fspath__") else list(log)
    sch, lookup = best_schedule(tensors, paths, threads, name, params, check, choices)
    if sch is None:
        kernel, sch, lookup = _untuned(tensors, lookup, fallback)
    else:
        kernel = build_func(sch.lower())
    if threads is not None:
        kernel.threads = threads
    kernel.lookup = lookup
    kernel.schedule = sch
    _report(tensors, lookup, name, params, threads, warn)
    return kernel


def _report(tensors, lookup, name, params, threads, warn: bool) -> None:
    """Hand a fallback (or skipped records) to the enclosing scope, or warn about a fallback."""
    entry = None
    if lookup.match in FALLBACKS or lookup.skipped:
        label, command = describe(tensors, name, params, threads)
        entry = Fallback(label, command, lookup.match, lookup.why, lookup.skipped, lookup.searched)
    scope = current_scope()
    if scope is not None:
        scope.add(entry)
    elif entry is not None and entry.fell_back and warn:
        warnings.warn(summary([entry]), TuningFallbackWarning, stacklevel=3)
