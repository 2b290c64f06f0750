"""Compile-time lookup: the best tuned schedule for a workload, over several logs.

``find_best`` prefers a record measured on the same CPU with the same thread
count, then the same CPU with other thread counts, then another CPU with the
same vector width and no feature this one lacks, and says which in one line of
text (TVM's per-kernel fallback warning was noisy and unclear, apache/tvm#7975).
A record measured on a CPU with features this one lacks is never used: its
schedule was shaped for instructions this CPU does not have.  Parsed logs are
summarised and cached by ``(path, mtime, size)``, so compiling many kernels
reads each log once.
"""
from __future__ import annotations

import os
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .database import LogWarning
from .reader import LineIndex, parse_spans
from .paths import default_log_paths
from .record import (TuningRecord, describe_target, missing_features, target_key, target_vector_bits,
                     workload_label)

MATCHES = ("exact", "same_cpu", "compatible_cpu", "heuristic", "naive", "none")
"""Possible values of :attr:`Lookup.match`, best first.

:func:`find_best` answers one of the three rules or ``"none"``; a kernel built
without a record says how it was built instead of ``"none"``: ``"heuristic"``
(the generated space's heuristic start, the tuner's first trial) or
``"naive"`` (the unscheduled loop nest).
"""


@dataclass(frozen=True)
class Skipped:
    """A record passed over for the next one: where it is and why (e.g. it no longer replays)."""
    path: str
    line: int | None
    why: str

    def where(self) -> str:
        """``path:line`` (the home directory shortened to ``~``)."""
        return display_path(self.path) + (f":{self.line}" if self.line is not None else "")


@dataclass(frozen=True)
class Lookup:
    """The result of :func:`find_best`.

    Attributes
    ----------
    record : TuningRecord or None
        The chosen record, ``None`` when ``match == "none"``.
    match : str
        ``"exact"`` (same kind, cpu and threads), ``"same_cpu"`` (other thread
        count), ``"compatible_cpu"`` (another CPU with the same vector width
        and a subset of this CPU's features) or ``"none"``; for a kernel built
        without a record, ``"heuristic"`` or ``"naive"`` (see :data:`MATCHES`).
    searched : tuple of str
        The log paths searched, in order.
    reason : str
        One line saying what was used and why, suitable for a single warning
        or log message when ``match != "exact"``.
    source : str or None
        The log the record came from.
    line : int or None
        The record's line in ``source``.
    skipped : tuple of Skipped
        Faster records passed over (they do not replay, or fail the check).
    why : str
        Why no record was used, in a few words (``"no record"``, ``"all 3 records
        failed"``...), or "" when one was.
    label : str or None
        The workload's label (``matmul(M=64, ...)``) if a log or the caller named it.
    """

    record: TuningRecord | None
    match: str
    searched: tuple[str, ...]
    reason: str
    source: str | None = None
    line: int | None = None
    skipped: tuple[Skipped, ...] = ()
    why: str = ""
    label: str | None = None

    @property
    def found(self) -> bool:
        """True if a record was found (``match != "none"``)."""
        return self.record is not None

    def __str__(self) -> str:
        return self.reason


@dataclass
class _WorkloadSummary:
    name: str | None = None
    params: dict | None = None
    count: int = 0
    errors: Counter = field(default_factory=Counter)
    best: dict = field(default_factory=dict)  # target_key -> the TOP_K fastest records, fastest first
    line_of: dict = field(default_factory=dict)  # id(record) -> its line, for the records in ``best``


@dataclass
class _FileSummary:
    """A log's line index plus, per workload looked up so far, its parsed summary."""
    path: str
    note: str | None = None  # "no such file" / "unreadable: ..." for messages
    stamp: tuple[int, int] | None = None
    index: LineIndex | None = None
    keyless_reported: bool = False
    workloads: dict = field(default_factory=dict)  # workload_key -> _WorkloadSummary

    def other_workloads(self, workload_key: str) -> tuple[int, int]:
        """Return (records, workloads) of the other workload keys, from the index."""
        if self.index is None:
            return 0, 0
        others = [spans for key, spans in self.index.by_key.items() if key != workload_key]
        return sum(len(spans) for spans in others), len(others)


_CACHE: dict[str, _FileSummary] = {}
_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget all cached log summaries (they are also refreshed when a file changes)."""
    with _CACHE_LOCK:
        _CACHE.clear()


TOP_K = 8   # records kept per workload and target: the next ones serve if the best does not replay


def _summarize(records: Iterable[TuningRecord], lines: Iterable[int]) -> _WorkloadSummary:
    summary = _WorkloadSummary()
    for record, line in zip(records, lines):
        summary.name, summary.params = record.workload_name, record.workload_params
        summary.count += 1
        if not record.ok:
            summary.errors[str(record.error_kind)] += 1
            continue
        top = summary.best.setdefault(target_key(record.target), [])
        if len(top) < TOP_K or record.rank_key < top[-1].rank_key:
            top.append(record)
            top.sort(key=lambda r: r.rank_key)
            if record.model_choice:     # only the latest model choice counts: the others make room
                top[:] = [r for n, r in enumerate(top) if not r.model_choice or n == 0]
            del top[TOP_K:]
            summary.line_of[id(record)] = line
    kept = {id(r) for top in summary.best.values() for r in top}
    summary.line_of = {k: v for k, v in summary.line_of.items() if k in kept}
    return summary


def _load(path: str, workload_key: str, stacklevel: int) -> _FileSummary:
    """Return the (cached) summary of one log, with ``workload_key`` parsed."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return _FileSummary(path=path, note="no such file")
    except OSError as exc:
        return _FileSummary(path=path, note=f"unreadable: {exc.strerror or exc}")
    stamp = (st.st_mtime_ns, st.st_size)
    with _CACHE_LOCK:
        entry = _CACHE.get(path)
    if entry is not None and entry.stamp == stamp and workload_key in entry.workloads:
        return entry
    try:
        with open(path, "rb") as f:
            if entry is None or entry.stamp != stamp:
                data = f.read()
                entry = _FileSummary(path=path, stamp=stamp, index=LineIndex.build(data))
                read = lambda start, end: data[start:end]  # noqa: E731
            else:
                fd = f.fileno()
                read = lambda start, end: os.pread(fd, end - start, start)  # noqa: E731
            spans = entry.index.by_key.get(workload_key, [])
            if not entry.keyless_reported:
                spans = sorted(spans + entry.index.keyless)
            result = parse_spans(read, spans, path, entry.index.size, workload_key)
    except OSError as exc:
        message = f"cannot read tuning log {path}: {exc.strerror or exc}"
        warnings.warn(message, LogWarning, stacklevel=stacklevel)
        return _FileSummary(path=path, note=f"unreadable: {exc.strerror or exc}")
    if result.message:
        warnings.warn(result.message, LogWarning, stacklevel=stacklevel)
    entry.keyless_reported = True
    entry.workloads[workload_key] = _summarize(result.records, result.line_numbers)
    with _CACHE_LOCK:
        _CACHE[path] = entry
    return entry


def display_path(path: str) -> str:
    """``path`` for messages, the home directory shortened to ``~``."""
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~" + path[len(home):]
    return path


def _pick(summaries: list[_FileSummary], workload_key: str, accept, usable,
          verdicts: dict, choices: bool = True) -> tuple[TuningRecord | None, str | None, int | None, list]:
    """The fastest usable record of the accepted targets, its log and line, and the faster unusable ones.

    ``verdicts`` (id(record) -> True or the reason it is unusable) spares asking
    ``usable`` twice about a record when several rules accept it.
    """
    found = []
    for summary in summaries:
        wl = summary.workloads.get(workload_key)
        if wl is None:
            continue
        for records in wl.best.values():
            found.extend((r.rank_key, n, r, summary.path, wl.line_of.get(id(r)))
                         for n, r in enumerate(records) if accept(r.target) and (choices or not r.model_choice))
    skipped = []
    for _, _, record, path, line in sorted(found, key=lambda x: (x[0], x[1])):
        if usable is None:
            return record, path, line, skipped
        if id(record) not in verdicts:
            verdict = usable(record)
            verdicts[id(record)] = True if verdict is True else (verdict or "does not replay on these tensors")
        if verdicts[id(record)] is True:
            return record, path, line, skipped
        skipped.append(Skipped(path, line, verdicts[id(record)]))
    return None, None, None, skipped


def _cost_text(record: TuningRecord) -> str:
    text = f"median {record.median_cost * 1e3:.3g} ms"
    if record.gflops is not None:
        text += f", {record.gflops:.1f} GFLOP/s"
    return text


def _rules(target: Mapping) -> list:
    """The match rules for ``target``, best first: ``(name, accept(record_target) -> bool)``."""
    kind, cpu, threads = target_key(target)
    bits = target_vector_bits(target)

    def fits(other: Mapping) -> bool:
        return target_key(other)[0] == kind and not missing_features(other, target)

    def compatible(other: Mapping) -> bool:   # another CPU: its features must be known to be a subset
        return (fits(other) and target_key(other)[1] != cpu and bits is not None
                and target_vector_bits(other) == bits)

    return [
        ("exact", lambda t: fits(t) and target_key(t) == (kind, cpu, threads)),
        ("same_cpu", lambda t: fits(t) and target_key(t)[1] == cpu and target_key(t)[2] != threads),
        ("compatible_cpu", compatible),
    ]


def _skipped_text(skipped: list) -> str:
    by_why: dict = {}
    for s in skipped:
        kind = "do not replay on these tensors" if s.why.startswith("does not replay") else "fail the check"
        by_why.setdefault(kind, []).append(s)
    return "; ".join(f"{len(group)} record(s) ranked before it {kind} and were skipped "
                     f"({', '.join(s.where() for s in group[:3])}{', ...' if len(group) > 3 else ''})"
                     for kind, group in by_why.items())


def find_best(workload_key: str, target: Mapping,
              paths: Iterable[str | os.PathLike] | None = None, *,
              name: str | None = None, params: Mapping | None = None, usable=None,
              choices: bool = True) -> Lookup:
    """Find the best tuned record for a workload on a target across several logs.

    Parameters
    ----------
    workload_key : str
        Structural hash of the workload.
    target : mapping
        The compiling machine's target, e.g. ``{"kind": "llvm", "cpu": "znver3",
        "features": "+avx2,+fma,-avx512f", "threads": 2}``
        (:meth:`tensorir.target.Target.record`).
    paths : iterable of path-like, optional
        Logs to search, in order; defaults to :func:`~logs.paths.default_log_paths`.
        Missing files count as empty.
    name, params : optional
        Workload name and shape, used in the message when no log knows the key.
    usable : callable, optional
        ``usable(record)`` returns True, or False or a one-line reason for a
        record that must be passed over (e.g. a trace that does not replay on
        these tensors, or gives wrong answers); the next best is tried.
    choices : bool
        Whether a model's choice (:attr:`TuningRecord.model_choice`) counts; False: the fastest
        measurement alone, as ``tune-model``'s final check weighs it against the start.

    Returns
    -------
    Lookup
        The record (best rank within the best rule that has a usable one), the
        rule (``"exact"``: same CPU and thread count; ``"same_cpu"``: another
        thread count; ``"compatible_cpu"``: another CPU with the same vector
        width and none of the features this one lacks; ``"none"``), the
        searched paths, the records skipped and a one-line ``reason``.

    Notes
    -----
    A record whose CPU had a feature that ``target`` lists as disabled is never
    used, whatever its CPU name.  Records whose target lists no features (older
    logs) still match on CPU name.  Lines skipped while parsing produce one
    :class:`~logs.database.LogWarning` per log, only when the log is (re)read.
    """
    if paths is None:
        paths = default_log_paths()
    elif isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    searched = tuple(os.path.abspath(os.path.expanduser(os.fspath(p))) for p in paths)
    summaries = []
    for path in searched:  # a loop, not a comprehension, so stacklevel reaches the caller
        summaries.append(_load(path, workload_key, stacklevel=3))
    kind, cpu, _ = target_key(target)
    here = describe_target(target)

    known = next((s.workloads[workload_key] for s in summaries
                  if workload_key in s.workloads and s.workloads[workload_key].count), None)
    if known is not None:
        label = workload_label(known.name, known.params)
    elif name is not None:
        label = workload_label(name, params)
    else:
        label = None

    shown = label or f"workload key {workload_key}"
    skipped, verdicts = [], {}
    for match, accept in _rules(target):
        record, source, line, passed = _pick(summaries, workload_key, accept, usable, verdicts, choices)
        skipped += passed
        if record is None:
            continue
        where = display_path(source)
        there = describe_target(record.target)
        if match == "exact":
            reason = (f"using tuned schedule for {shown} on {here} from {where} "
                      f"({_cost_text(record)})")
        elif match == "same_cpu":
            reason = (f"no tuning record for {shown} on {here}; using the best one "
                      f"measured on {there} from {where}")
        else:
            reason = (f"no tuning record for {shown} on {cpu or kind}; using the best one "
                      f"measured on {there} from {where} (same {target_vector_bits(target)}-bit "
                      f"vectors, no feature this CPU lacks)")
        if skipped:
            reason += "; " + _skipped_text(skipped)
        return Lookup(record, match, searched, reason, source, line, tuple(skipped), label=label)

    text, why = _none_reason(workload_key, label, summaries, target)
    if skipped:
        text = (f"the {len(skipped)} best tuning record(s) for {shown} cannot be used: "
                + _skipped_text(skipped).replace(" ranked before it", ""))
        if any(s.why.startswith("does not replay") for s in skipped):
            text += " (traces name stages and loops; were tensors or axes renamed?)"
        why = f"{len(skipped)} unusable record{'s' if len(skipped) != 1 else ''}"
    return Lookup(None, "none", searched, text + "; using the default schedule", skipped=tuple(skipped),
                  why=why, label=label)


def _misfit(other: Mapping, target: Mapping) -> str:
    """Why records measured on ``other`` do not serve ``target``, in a few words."""
    lacking = sorted(missing_features(other, target))
    if lacking:
        return "has " + ", ".join(lacking[:4]) + (", ..." if len(lacking) > 4 else "") + " (this CPU lacks)"
    theirs, ours = target_vector_bits(other), target_vector_bits(target)
    if theirs is None or ours is None:
        return "features not recorded"
    return f"{theirs}-bit vectors, not {ours}"


def _none_reason(workload_key: str, label: str | None,
                 summaries: list[_FileSummary], target: Mapping) -> tuple[str, str]:
    """Why no record serves: one line, and a few words for a table."""
    short = workload_key if len(workload_key) <= 12 else workload_key[:12] + "..."
    what = f"workload {label} key {short}" if label else f"workload key {short}"
    if not summaries:
        return f"no tuning logs searched for {what}", "no logs searched"
    where = ", ".join(display_path(s.path) + (f" ({s.note})" if s.note else "")
                      for s in summaries)
    failed = Counter()
    elsewhere = {}   # CPU -> why its records do not fit
    for s in summaries:
        if workload_key in s.workloads:
            wl = s.workloads[workload_key]
            failed.update(wl.errors)
            for records in wl.best.values():
                other = records[0].target
                elsewhere.setdefault(describe_target({**other, "threads": None}), _misfit(other, target))
    if elsewhere:
        cpus = ", ".join(sorted(elsewhere))
        causes = "; ".join(f"{cpu}: {why}" for cpu, why in sorted(elsewhere.items()))
        return (f"no tuning record for {what} in {where} fits {describe_target(target)} ({causes})",
                f"records only from {cpus}")
    if failed:
        total = sum(failed.values())
        kinds = ", ".join(f"{n} {kind}" for kind, n in failed.most_common())
        return (f"all {total} tuning records for {what} in {where} failed ({kinds})",
                f"all {total} records failed")
    n_records = n_workloads = 0
    for s in summaries:
        records, workloads = s.other_workloads(workload_key)
        n_records, n_workloads = n_records + records, n_workloads + workloads
    contents = (f"{n_records} record{'s' if n_records != 1 else ''} for {n_workloads} "
                f"other workload{'s' if n_workloads != 1 else ''}")
    return f"no tuning record for {what} in {where} ({contents})", "no record"
