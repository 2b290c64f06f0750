"""An append-only JSON Lines tuning log that survives kills and concurrent writers.

Writing: each :meth:`TuningLog.append` takes a file lock (``<path>.lock``,
:class:`filelock.FileLock`), writes the whole line with one ``os.write`` on an
``O_APPEND`` descriptor, and ``fsync``\\ s before releasing the lock.  A process
killed mid-append can therefore leave at most a torn *last* line without a
newline; the next append notices the missing newline and starts on a fresh line.

Reading: bad lines (torn, unparsable, invalid, or from another format version)
are skipped and summarised in *one* :class:`LogWarning` per read, with counts
and reasons.  Reading never raises because of the file's contents.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Iterable, Iterator, Mapping

import filelock

from .reader import ReadResult, parse_lines
from .record import TuningRecord, target_key

LOCK_TIMEOUT_SECONDS = 60.0
"""How long an append waits for another writer before raising :class:`LogError`."""


class LogError(Exception):
    """A tuning log cannot be opened or written (the message names the path)."""


class LogWarning(UserWarning):
    """Some lines of a tuning log were skipped while reading."""


class TuningLog:
    """A tuning log file in JSON Lines format.

    Parameters
    ----------
    path : str or os.PathLike
        The log file, e.g. ``~/.cache/tensortune/tuning.jsonl`` (``~`` is expanded).
    mode : {"a", "r"}
        ``"a"`` (default) opens for appending: missing parent directories are
        created and writability is checked now, so an unwritable path fails
        here rather than on the 100th append.  ``"r"`` only reads; a missing
        file reads as empty.

    Raises
    ------
    LogError
        In mode ``"a"``, if the file or its lock file cannot be created or written.

    Examples
    --------
    >>> log = TuningLog("/tmp/tuning.jsonl")            # doctest: +SKIP
    >>> log.append(record)                              # doctest: +SKIP
    >>> log.best(record.workload_key, record.target)    # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike, mode: str = "a"):
        if mode not in ("a", "r"):
            raise ValueError(f"mode must be 'a' or 'r', got {mode!r}")
        self.path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        self.mode = mode
        self._lock = filelock.FileLock(self.path + ".lock", timeout=LOCK_TIMEOUT_SECONDS)
        if mode == "a":
            self._check_writable()

    def __repr__(self) -> str:
        return f"TuningLog({self.path!r}, mode={self.mode!r})"

    def _check_writable(self) -> None:
        self.check_is_a_log()
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            for name in (self.path, self.path + ".lock"):
                with open(name, "ab"):
                    pass
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise LogError(f"cannot write tuning log {self.path}: {reason}") from exc

    def check_is_a_log(self) -> None:
        """Refuse to append to a file whose first line is not a JSON object with a ``version`` (a model or
        a script given to ``--log`` by mistake would otherwise get records appended to it)."""
        try:
            with open(self.path, "rb") as f:
                first = f.readline(1 << 16)
        except OSError:      # missing (created below) or unreadable (the write check reports it)
            return
        if not first.strip():
            return
        try:
            ok = "version" in json.loads(first)
        except (ValueError, TypeError):
            ok = False
        if not ok:
            raise LogError(f"{self.path} is not a tuning log (its first line is not a tuning record); "
                           "give --log a new file or an existing log")

    # --- writing -------------------------------------------------------------------
    def append(self, record: TuningRecord) -> None:
        """Append one record as one line, locked, flushed and fsynced.

        Parameters
        ----------
        record : TuningRecord

        Raises
        ------
        LogError
            If the log was opened read-only, the lock is not obtained within
            :data:`LOCK_TIMEOUT_SECONDS`, or the write fails.
        """
        self.extend([record])

    def extend(self, records: Iterable[TuningRecord]) -> int:
        """Append several records with one lock, one write and one fsync.

        Parameters
        ----------
        records : iterable of TuningRecord

        Returns
        -------
        int
            The number of records written.
        """
        lines = [r.to_json_line() + "\n" for r in records]
        if not lines:
            return 0
        self._write("".join(lines).encode("utf-8"))
        return len(lines)

    def _write(self, data: bytes) -> None:
        if self.mode != "a":
            raise LogError(f"cannot write tuning log {self.path}: opened read-only (mode 'r')")
        try:
            with self._lock:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    size = os.fstat(fd).st_size
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        data = b"\n" + data  # a killed writer left a torn last line
                    written = os.write(fd, data)
                    while written < len(data):  # only on a full disk or a signal
                        written += os.write(fd, data[written:])
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except filelock.Timeout as exc:
            raise LogError(f"cannot write tuning log {self.path}: lock {exc.lock_file} "
                           f"held by another process for {LOCK_TIMEOUT_SECONDS:.0f} s") from exc
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise LogError(f"cannot write tuning log {self.path}: {reason}") from exc

    def merge(self, other_paths: Iterable[str | os.PathLike]) -> int:
        """Append the records of other logs that this log does not hold yet.

        Records keep their own target, so logs tuned on different machines
        merge into one (TVM could not, apache/tvm#15549); lookups then pick the
        record for the compiling machine.  Identical records (same content,
        including timestamp) are stored once.

        Parameters
        ----------
        other_paths : iterable of str or os.PathLike
            Logs to merge in; missing files are treated as empty.

        Returns
        -------
        int
            The number of records added.
        """
        seen = {r.canonical_key() for r in self.read(warn=True, stacklevel=3).records}
        new = []
        for other in other_paths:
            for record in TuningLog(other, mode="r").read(warn=True, stacklevel=3).records:
                key = record.canonical_key()
                if key not in seen:
                    seen.add(key)
                    new.append(record)
        return self.extend(new)

    def locked(self) -> filelock.FileLock:
        """The log's write lock, as a context manager (re-entrant): hold it to read
        and then :meth:`rewrite` the log without losing another writer's appends."""
        return self._lock

    def rewrite(self, records: Iterable[TuningRecord]) -> int:
        """Replace the whole log by ``records``, atomically and under the lock.

        The lines go to a temporary file beside the log, which is fsynced and
        then renamed over the log while the lock is held, so a reader sees the
        old file or the new one, never a mix, and an appender waits for the
        rename instead of writing into the file being replaced.

        Parameters
        ----------
        records : iterable of TuningRecord

        Returns
        -------
        int
            The number of records written.

        Raises
        ------
        LogError
            If the log was opened read-only, the lock is not obtained within
            :data:`LOCK_TIMEOUT_SECONDS`, or the write fails.
        """
        if self.mode != "a":
            raise LogError(f"cannot write tuning log {self.path}: opened read-only (mode 'r')")
        data = "".join(r.to_json_line() + "\n" for r in records).encode("utf-8")
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with self._lock:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    written = 0
                    while written < len(data):
                        written += os.write(fd, data[written:])
                    os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, self.path)
        except filelock.Timeout as exc:
            raise LogError(f"cannot write tuning log {self.path}: lock {exc.lock_file} "
                           f"held by another process for {LOCK_TIMEOUT_SECONDS:.0f} s") from exc
        except OSError as exc:
            if os.path.exists(tmp):
                os.unlink(tmp)
            reason = exc.strerror or str(exc)
            raise LogError(f"cannot write tuning log {self.path}: {reason}") from exc
        return data.count(b"\n")

    # --- reading -------------------------------------------------------------------
    def read(self, warn: bool = True, stacklevel: int = 2,
             workload_key: str | None = None) -> ReadResult:
        """Read the log, skipping bad lines.

        Parameters
        ----------
        warn : bool
            Emit one :class:`LogWarning` summarising skipped lines, if any.
        stacklevel : int
            Passed to :func:`warnings.warn`.
        workload_key : str, optional
            Parse only this workload's lines, found by a regex before any JSON
            parsing (much faster on large logs).  Lines whose key the regex
            cannot read are parsed too, so their problems are still reported.

        Returns
        -------
        ReadResult
            The records and the skip counts.  A missing file reads as empty.

        Raises
        ------
        LogError
            If the file exists but cannot be read (permissions, a directory).
        """
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError):
            return ReadResult(path=self.path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise LogError(f"cannot read tuning log {self.path}: {reason}") from exc
        result = parse_lines(data, self.path, workload_key)
        if warn and result.message:
            warnings.warn(result.message, LogWarning, stacklevel=stacklevel)
        return result

    def records(self) -> list[TuningRecord]:
        """Return all valid records in file order (one :class:`LogWarning` if lines were skipped)."""
        return self.read(stacklevel=3).records

    def __iter__(self) -> Iterator[TuningRecord]:
        return iter(self.read(stacklevel=3).records)

    def for_workload(self, workload_key: str,
                     target: Mapping | None = None) -> list[TuningRecord]:
        """Return all records (successful or not) of a workload, in file order.

        Parameters
        ----------
        workload_key : str
        target : mapping, optional
            If given, keep only records whose :func:`~logs.record.target_key`
            (kind, cpu, threads) equals this target's.
        """
        want = target_key(target) if target is not None else None
        records = self.read(stacklevel=3, workload_key=workload_key).records
        return [r for r in records if want is None or target_key(r.target) == want]

    def best(self, workload_key: str, target: Mapping, k: int = 1) -> list[TuningRecord]:
        """Return the ``k`` fastest successful records of a workload on a target.

        A schedule measured several times counts once, by its best measurement,
        so the ``k`` results are ``k`` different schedules.  Confirmed
        measurements (the side-by-side re-timing at the end of a tuning run)
        rank before all others, see :attr:`TuningRecord.rank_key`.

        Parameters
        ----------
        workload_key : str
        target : mapping
            Matched by :func:`~logs.record.target_key` (kind, cpu, threads).
        k : int

        Returns
        -------
        list of TuningRecord
            Up to ``k`` records, fastest first (:attr:`TuningRecord.rank_key`).
        """
        want = target_key(target)
        best_by_schedule: dict[str, TuningRecord] = {}
        for record in self.read(stacklevel=3, workload_key=workload_key).records:
            if not record.ok or target_key(record.target) != want:
                continue
            schedule = json.dumps([record.trace, record.decisions], sort_keys=True)
            known = best_by_schedule.get(schedule)
            if known is None or record.rank_key < known.rank_key:
                best_by_schedule[schedule] = record
        ranked = sorted(best_by_schedule.values(), key=lambda r: r.rank_key)
        return ranked[:k]

