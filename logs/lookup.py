"""Compile-time lookup: the best tuned schedule for a workload, over several logs.

``find_best`` prefers a record measured on the same CPU with the same thread
count, then the same CPU with other thread counts, then any target, and says
which in one line of text (TVM's per-kernel fallback warning was noisy and
unclear, apache/tvm#7975).  Parsed logs are summarised and cached by
``(path, mtime, size)``, so compiling many kernels reads each log once.
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
from .record import TuningRecord, describe_target, target_key, workload_label

MATCHES = ("exact", "same_cpu", "other_target", "none")
"""Possible values of :attr:`Lookup.match`, best first."""


@dataclass(frozen=True)
class Lookup:
    """The result of :func:`find_best`.

    Attributes
    ----------
    record : TuningRecord or None
        The chosen record, ``None`` when ``match == "none"``.
    match : str
        ``"exact"`` (same kind, cpu and threads), ``"same_cpu"`` (other thread
        count), ``"other_target"`` (another CPU) or ``"none"``.
    searched : tuple of str
        The log paths searched, in order.
    reason : str
        One line saying what was used and why, suitable for a single warning
        or log message when ``match != "exact"``.
    source : str or None
        The log the record came from.
    """

    record: TuningRecord | None
    match: str
    searched: tuple[str, ...]
    reason: str
    source: str | None = None

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


def _summarize(records: Iterable[TuningRecord]) -> _WorkloadSummary:
    summary = _WorkloadSummary()
    for record in records:
        summary.name, summary.params = record.workload_name, record.workload_params
        summary.count += 1
        if not record.ok:
            summary.errors[str(record.error_kind)] += 1
            continue
        top = summary.best.setdefault(target_key(record.target), [])
        if len(top) < TOP_K or record.rank_key < top[-1].rank_key:
            top.append(record)
            top.sort(key=lambda r: r.rank_key)
            del top[TOP_K:]
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
    entry.workloads[workload_key] = _summarize(result.records)
    with _CACHE_LOCK:
        _CACHE[path] = entry
    return entry


def _display(path: str) -> str:
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~" + path[len(home):]
    return path


def _pick(summaries: list[_FileSummary], workload_key: str, accept,
          usable) -> tuple[TuningRecord | None, str | None, int]:
    """The fastest usable record of the accepted targets, its log, and how many faster ones were unusable."""
    found = []
    for summary in summaries:
        wl = summary.workloads.get(workload_key)
        if wl is None:
            continue
        for tkey, records in wl.best.items():
            if accept(tkey):
                found.extend((r.rank_key, n, r, summary.path) for n, r in enumerate(records))
    skipped = 0
    for _, _, record, path in sorted(found, key=lambda x: (x[0], x[1])):
        if usable is None or usable(record):
            return record, path, skipped
        skipped += 1
    return None, None, skipped


def _cost_text(record: TuningRecord) -> str:
    text = f"median {record.median_cost * 1e3:.3g} ms"
    if record.gflops is not None:
        text += f", {record.gflops:.1f} GFLOP/s"
    return text


def find_best(workload_key: str, target: Mapping,
              paths: Iterable[str | os.PathLike] | None = None, *,
              name: str | None = None, params: Mapping | None = None, usable=None) -> Lookup:
    """Find the best tuned record for a workload on a target across several logs.

    Parameters
    ----------
    workload_key : str
        Structural hash of the workload.
    target : mapping
        The compiling machine's target, e.g. ``{"kind": "llvm", "cpu": "znver3",
        "threads": 2}``; matched by :func:`~logs.record.target_key`.
    paths : iterable of path-like, optional
        Logs to search; defaults to :func:`~logs.paths.default_log_paths`.
        Missing files count as empty.
    name, params : optional
        Workload name and shape, used in the message when no log knows the key.
    usable : callable, optional
        ``usable(record) -> bool``; records it rejects (e.g. a trace that does
        not replay on these tensors) are passed over for the next fastest.

    Returns
    -------
    Lookup
        The record (lowest median cost within the best match level), the match
        level (``"exact"``, ``"same_cpu"``, ``"other_target"``, ``"none"``), the
        searched paths and a one-line ``reason``.

    Notes
    -----
    Lines skipped while parsing produce one :class:`~logs.database.LogWarning`
    per log, only when the log is (re)read, not on every lookup.
    """
    if paths is None:
        paths = default_log_paths()
    elif isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    searched = tuple(os.path.abspath(os.path.expanduser(os.fspath(p))) for p in paths)
    summaries = []
    for path in searched:  # a loop, not a comprehension, so stacklevel reaches the caller
        summaries.append(_load(path, workload_key, stacklevel=3))
    kind, cpu, threads = target_key(target)
    here = describe_target(target)

    known = next((s.workloads[workload_key] for s in summaries
                  if workload_key in s.workloads and s.workloads[workload_key].count), None)
    if known is not None:
        label = workload_label(known.name, known.params)
    elif name is not None:
        label = workload_label(name, params)
    else:
        label = None

    levels = [
        ("exact", lambda k: k == (kind, cpu, threads)),
        ("same_cpu", lambda k: k[:2] == (kind, cpu)),
        ("other_target", lambda k: True),
    ]
    shown = label or f"workload key {workload_key}"
    unusable = 0
    for match, accept in levels:
        record, source, skipped = _pick(summaries, workload_key, accept, usable)
        unusable = max(unusable, skipped)
        if record is None:
            continue
        where = _display(source)
        if match == "exact":
            reason = (f"using tuned schedule for {shown} on {here} from {where} "
                      f"({_cost_text(record)})")
        elif match == "same_cpu":
            reason = (f"no tuning record for {shown} on {here}; using the best one "
                      f"measured on {describe_target(record.target)} from {where}")
        else:
            reason = (f"no tuning record for {shown} on {cpu or kind}; using the best one "
                      f"measured on {describe_target(record.target)} from {where}, "
                      f"which may be slow here")
        if skipped:
            reason += f"; {skipped} faster record(s) do not replay on these tensors and were skipped"
        return Lookup(record, match, searched, reason, source)

    reason = _none_reason(workload_key, label, summaries)
    if unusable:
        reason = (f"the {unusable} best tuning record(s) for {shown} do not replay on these tensors (traces "
                  f"name stages and loops; were tensors or axes renamed?); using the default schedule")
    return Lookup(None, "none", searched, reason)


def _none_reason(workload_key: str, label: str | None,
                 summaries: list[_FileSummary]) -> str:
    short = workload_key if len(workload_key) <= 12 else workload_key[:12] + "..."
    what = f"workload {label} key {short}" if label else f"workload key {short}"
    if not summaries:
        return f"no tuning logs searched for {what}; using the default schedule"
    where = ", ".join(_display(s.path) + (f" ({s.note})" if s.note else "")
                      for s in summaries)
    failed = Counter()
    for s in summaries:
        if workload_key in s.workloads:
            failed.update(s.workloads[workload_key].errors)
    if failed:
        total = sum(failed.values())
        kinds = ", ".join(f"{n} {kind}" for kind, n in failed.most_common())
        return (f"all {total} tuning records for {what} in {where} failed ({kinds}); "
                f"using the default schedule")
    n_records = n_workloads = 0
    for s in summaries:
        records, workloads = s.other_workloads(workload_key)
        n_records, n_workloads = n_records + records, n_workloads + workloads
    contents = (f"{n_records} record{'s' if n_records != 1 else ''} for {n_workloads} "
                f"other workload{'s' if n_workloads != 1 else ''}")
    return f"no tuning record for {what} in {where} ({contents}); using the default schedule"

