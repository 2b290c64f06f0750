"""Log tools: summarize, merge and distill tuning logs, and pick the records to verify.

Every record keeps its own target: a log merged from several machines holds
each machine's measurements, and lookups pick the compiling machine's.
Records are grouped by *workload and target*: the workload key plus the
whole target dict (CPU, features, threads), so two machines reporting the
same CPU name with different features stay apart.

Two records are *duplicates* when they measure the same schedule (trace and
decisions) of the same workload on the same target; of duplicates the better
measurement is kept (:func:`better`: confirmed first, then the lower median
cost, then the earlier one).

Lines that do not parse, records of another format version and torn last
lines are counted per file (:class:`LogContents`), never fatal.

>>> logs = [read_log(p) for p in ("a.jsonl", "b.jsonl")]      # doctest: +SKIP
>>> kept, dropped = dedupe(logs)                              # doctest: +SKIP
>>> summaries = summarize(logs)                               # doctest: +SKIP
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Sequence

import filelock

from .database import LogError, TuningLog
from .reader import ReadResult, iter_spans, parse_spans
from .record import TuningRecord, describe_target


@dataclass(frozen=True)
class Entry:
    """A record with the log file and 1-based line it was read from."""
    path: str
    line: int
    record: TuningRecord

    @property
    def where(self) -> str:
        """``"path:line"`` for messages."""
        return f"{self.path}:{self.line}"


@dataclass
class LogContents:
    """One log, read whole: its records with their lines, and what was skipped.

    Attributes
    ----------
    path : str
        The log file (absolute).
    entries : list of Entry
        Valid records in file order.
    read : ReadResult
        Lines examined and skipped-line counts (``read.records`` is left empty).
    missing : bool
        True if the file does not exist (it reads as empty).
    """
    path: str
    entries: list = field(default_factory=list)
    read: ReadResult | None = None
    missing: bool = False

    @property
    def skipped(self) -> Counter:
        """Skipped lines by reason (see :class:`ReadResult`)."""
        return self.read.skipped if self.read is not None else Counter()


def read_log(path: str | os.PathLike) -> LogContents:
    """Read a whole log, keeping each record's line number.

    Each line is parsed by :func:`logs.reader.parse_spans`, the parser every
    reader uses, so bad lines are counted for the same reasons.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    LogContents
        A missing file reads as empty (``missing`` set).

    Raises
    ------
    LogError
        If the file exists but cannot be read (permissions, a directory).
    """
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))
    total = ReadResult(path=path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return LogContents(path, read=total, missing=True)
    except OSError as exc:
        raise LogError(f"cannot read tuning log {path}: {exc.strerror or exc}") from exc
    out = LogContents(path, read=total)
    read = lambda start, end: data[start:end]  # noqa: E731
    for span in iter_spans(data):
        one = parse_spans(read, [span], path, len(data))
        total.lines += one.lines
        total.skipped.update(one.skipped)
        if total.first_invalid is None and one.first_invalid is not None:
            total.first_invalid = one.first_invalid     # "line N: ...", N from the span
        out.entries.extend(Entry(path, span[0], r) for r in one.records)
    return out


# --- identities ------------------------------------------------------------------

def target_id(target: dict) -> str:
    """The whole target as canonical text: records group by it."""
    return json.dumps(target, sort_keys=True, separators=(",", ":"))


def group_of(record: TuningRecord) -> tuple[str, str]:
    """``(workload key, target id)``: the group a record is summarized and distilled in."""
    return record.workload_key, target_id(record.target)


def schedule_id(record: TuningRecord) -> str:
    """The schedule a record measured (trace and decisions) as canonical text."""
    return json.dumps([record.trace, record.decisions], sort_keys=True, separators=(",", ":"))


def _time(record: TuningRecord) -> datetime:
    text = record.timestamp
    return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)


def better(a: TuningRecord, b: TuningRecord) -> bool:
    """True if measurement ``a`` ranks before ``b``.

    Confirmed before unconfirmed, successful before failed, then the lower
    median cost (:attr:`TuningRecord.rank_key`); on a tie the earlier one.
    """
    if a.rank_key != b.rank_key:
        return a.rank_key < b.rank_key
    return _time(a) < _time(b)


def _sort_key(entry: Entry):
    return entry.record.rank_key, _time(entry.record)


# --- merge and distill ------------------------------------------------------------

def dedupe(logs: Sequence[LogContents]) -> tuple[list[Entry], int]:
    """The entries of several logs, in order, each schedule of a workload and target once.

    Of duplicates (same workload key, target, trace and decisions) the
    better measurement (:func:`better`) takes the place of the first one seen.

    Returns
    -------
    (list of Entry, int)
        The kept entries and the number of duplicates dropped.
    """
    kept: list[Entry] = []
    index: dict = {}
    dropped = 0
    for log in logs:
        for entry in log.entries:
            key = (*group_of(entry.record), schedule_id(entry.record))
            at = index.get(key)
            if at is None:
                index[key] = len(kept)
                kept.append(entry)
                continue
            dropped += 1
            if better(entry.record, kept[at].record):
                kept[at] = entry
    return kept, dropped


def best_entries(logs: Sequence[LogContents], top: int = 1) -> list[list[Entry]]:
    """Per workload and target, the ``top`` fastest successful schedules, fastest first.

    Groups are in the order they first appear; a schedule measured several
    times counts once, by its best measurement (TVM's "pick best").

    Parameters
    ----------
    logs : sequence of LogContents
    top : int
        Schedules kept per group (at least 1).

    Returns
    -------
    list of list of Entry
        One non-empty list per group that has a successful record.
    """
    if top < 1:
        raise ValueError(f"top must be at least 1, got {top}")
    kept, _ = dedupe(logs)
    groups: dict = {}
    for entry in kept:
        if entry.record.ok:
            groups.setdefault(group_of(entry.record), []).append(entry)
    return [sorted(entries, key=_sort_key)[:top] for entries in groups.values()]


@dataclass
class WriteResult:
    """What :func:`merge` or :func:`distill` wrote.

    Attributes
    ----------
    path : str
        The log written.
    written : int
        Records written.
    dropped : int
        Duplicate records left out (:func:`merge`), or records left out for
        not being among the best (:func:`distill`: duplicates, failures and slower ones).
    inputs : list of LogContents
        The logs read, with their skipped-line counts.
    """
    path: str
    written: int
    dropped: int
    inputs: list


def _read_all(paths: Iterable) -> list[LogContents]:
    return [read_log(p) for p in paths]


@contextlib.contextmanager
def _holding(log: TuningLog):
    try:
        with log.locked():
            yield
    except filelock.Timeout as exc:
        raise LogError(f"cannot write tuning log {log.path}: lock {exc.lock_file} is held by "
                       "another process") from exc


def merge(out: str | os.PathLike, paths: Iterable[str | os.PathLike]) -> WriteResult:
    """Write the records of ``paths`` to ``out``, each schedule of a workload and target once.

    Every record keeps its target; duplicates (:func:`dedupe`) are dropped and
    counted.  ``out`` is replaced as a whole through :meth:`TuningLog.rewrite`
    (locked, atomic); it may be one of ``paths`` to merge the others into it.
    Merging the result again changes nothing.  The output's lock is held from
    reading to writing, so records another process appends to ``out``
    meanwhile wait and are not lost.

    Raises
    ------
    LogError
        An input cannot be read or ``out`` cannot be written.
    """
    log = TuningLog(out)
    with _holding(log):
        logs = _read_all(paths)
        kept, dropped = dedupe(logs)
        written = log.rewrite(e.record for e in kept)
    return WriteResult(os.path.abspath(os.fspath(out)), written, dropped, logs)


def distill(out: str | os.PathLike, paths: Iterable[str | os.PathLike], top: int) -> WriteResult:
    """Write the ``top`` fastest schedules per workload and target of ``paths`` to ``out``.

    Failed records are left out; see :func:`best_entries`.  ``out`` is
    replaced as a whole through :meth:`TuningLog.rewrite`.

    Raises
    ------
    LogError
        An input cannot be read or ``out`` cannot be written.
    ValueError
        ``top`` is less than 1.
    """
    log = TuningLog(out)
    with _holding(log):
        logs = _read_all(paths)
        best = best_entries(logs, top)
        written = log.rewrite(e.record for group in best for e in group)
    total = sum(len(log.entries) for log in logs)
    return WriteResult(os.path.abspath(os.fspath(out)), written, total - written, logs)


# --- summaries --------------------------------------------------------------------

@dataclass
class Summary:
    """What the logs hold for one workload on one target.

    Attributes
    ----------
    label : str
        Workload label, e.g. ``"matmul(M=64, N=64, K=64)"``.
    workload_key : str
    target : dict
    records : int
        Records of this workload and target.
    trials : int
        Candidates measured (records that are not repeat or confirming measurements).
    errors : Counter
        Failed records by error kind.
    best : Entry or None
        The fastest successful record (confirmed first).
    newest : datetime
        Time of the newest record.
    """
    label: str
    workload_key: str
    target: dict
    records: int = 0
    trials: int = 0
    errors: Counter = field(default_factory=Counter)
    best: Entry | None = None
    newest: datetime | None = None

    @property
    def target_label(self) -> str:
        """E.g. ``"znver3, 2 threads"``."""
        return describe_target(self.target)

    def age_seconds(self, now: datetime | None = None) -> float:
        """Seconds since the newest record (from ``now``, default the current UTC time)."""
        now = now or datetime.now(timezone.utc)
        return max(0.0, (now - self.newest).total_seconds())

    def to_dict(self, now: datetime | None = None) -> dict:
        """A JSON-ready dict of the summary (latency in seconds, ``None`` without a success)."""
        best = self.best.record if self.best else None
        return {"workload": self.label, "workload_key": self.workload_key, "target": self.target,
                "records": self.records, "trials": self.trials, "errors": dict(self.errors),
                "best_latency_s": best.median_cost if best else None,
                "best_gflops": best.gflops if best else None,
                "best_at": self.best.where if self.best else None,
                "newest": self.newest.isoformat().replace("+00:00", "Z"),
                "age_s": round(self.age_seconds(now), 3)}


def summarize(logs: Sequence[LogContents]) -> list[Summary]:
    """Per workload and target, counts, errors by kind, the best record and the newest time.

    Records are counted as read (a record present in two logs counts twice);
    summaries come sorted by workload label, then target.
    """
    groups: dict = {}
    for log in logs:
        for entry in log.entries:
            rec = entry.record
            s = groups.get(group_of(rec))
            if s is None:
                s = groups[group_of(rec)] = Summary(rec.workload_label, rec.workload_key, rec.target)
            s.records += 1
            s.trials += not (rec.remeasured or rec.confirmed or rec.model_choice)
            if not rec.ok:
                s.errors[str(rec.error_kind)] += 1
            elif s.best is None or _sort_key(entry) < _sort_key(s.best):
                s.best = entry
            when = _time(rec)
            if s.newest is None or when > s.newest:
                s.newest = when
    return sorted(groups.values(), key=lambda s: (s.label, s.target_label, s.workload_key))


def format_age(seconds: float) -> str:
    """An age such as ``"40 s"``, ``"12 min"``, ``"5.0 h"`` or ``"3 d"``."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"
