"""Reading tuning logs: parse lines into records, skip bad ones, and count why.

A full read parses every line.  A keyed read first groups the lines by
workload key with a regex (no JSON parsing) and parses only one workload's
lines, which keeps compile-time lookups fast on logs of ~100k lines.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from .record import FORMAT_VERSION, RecordError, RecordVersionError, TuningRecord


@dataclass
class ReadResult:
    """What one read of a log found.

    Attributes
    ----------
    path : str
        The log file.
    records : list of TuningRecord
        Valid records of the current format version, in file order.
    lines : int
        Non-empty lines examined.
    skipped : Counter
        Skipped line counts by reason: ``"incomplete last line"``, ``"unparsable"``,
        ``"invalid"``, or ``"version N"`` for another format version.
    first_invalid : str or None
        Line number and message of the first invalid record, for the warning.
    scope : str or None
        What part of the file was examined, e.g. ``"workload key 3fa2c1d0..."``;
        ``None`` for the whole file.
    line_numbers : list of int
        The 1-based line of each record, in the order of ``records``.
    """

    path: str
    records: list[TuningRecord] = field(default_factory=list)
    lines: int = 0
    skipped: Counter = field(default_factory=Counter)
    first_invalid: str | None = None
    scope: str | None = None
    line_numbers: list[int] = field(default_factory=list)

    @property
    def message(self) -> str | None:
        """One-line summary of the skipped lines, or ``None`` if none were skipped."""
        total = sum(self.skipped.values())
        if not total:
            return None
        parts = []
        for reason in ("incomplete last line", "unparsable"):
            if self.skipped[reason]:
                parts.append(f"{self.skipped[reason]} {reason}")
        if self.skipped["invalid"]:
            parts.append(f"{self.skipped['invalid']} invalid (first: {self.first_invalid})")
        versions = sorted(r for r in self.skipped if r.startswith("version "))
        for reason in versions:
            parts.append(f"{self.skipped[reason]} from format {reason}")
        scope = f" read for {self.scope}" if self.scope else ""
        text = (f"skipped {total} of {self.lines} lines{scope} in {self.path}: "
                + ", ".join(parts))
        if versions:
            text += f" (this tensortune reads version {FORMAT_VERSION})"
        return text


# The workload key of a line, found without parsing the JSON.  Records are
# written with ``version`` then ``workload_key`` first, so the first match is
# the top-level field; keys with escapes are left to the full parser.
_KEY_RE = re.compile(rb'"workload_key"\s*:\s*"([^"\\]*)"')

Span = tuple[int, int, int]
"""A non-blank line: (1-based line number, start offset, end offset without newline)."""


def iter_spans(data: bytes) -> Iterator[Span]:
    """Yield the non-blank lines of a log as :data:`Span` tuples."""
    start, line_no, size = 0, 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        if end < 0:
            end = size
        line_no += 1
        if data[start:end].strip():
            yield line_no, start, end
        start = end + 1


@dataclass
class LineIndex:
    """The lines of a log grouped by workload key, found by a regex, not a JSON parse.

    Attributes
    ----------
    size : int
        Length of the indexed content in bytes.
    by_key : dict of str to list of Span
        Lines whose ``workload_key`` could be read cheaply.
    keyless : list of Span
        Other non-blank lines (torn, unparsable, or keys with escapes); a
        keyed read parses these too, so their problems are reported.
    """

    size: int
    by_key: dict[str, list[Span]]
    keyless: list[Span]

    @classmethod
    def build(cls, data: bytes) -> "LineIndex":
        """Index the bytes of a log."""
        by_key: dict[str, list[Span]] = {}
        keyless: list[Span] = []
        search = _KEY_RE.search
        for span in iter_spans(data):
            m = search(data, span[1], span[2])
            if m is None:
                keyless.append(span)
            else:
                by_key.setdefault(m.group(1).decode("utf-8", "replace"), []).append(span)
        return cls(len(data), by_key, keyless)

    def spans_for(self, workload_key: str) -> list[Span]:
        """Return the lines to parse for one workload key (its lines and the keyless ones)."""
        return sorted(self.by_key.get(workload_key, []) + self.keyless)


def parse_spans(read: Callable[[int, int], bytes], spans: Iterable[Span], path: str,
                size: int, workload_key: str | None = None) -> ReadResult:
    """Parse selected lines of a log into records, counting the lines it skips.

    Parameters
    ----------
    read : callable
        ``read(start, end)`` returns those bytes of the log.
    spans : iterable of Span
        The lines to parse.
    path : str
        Used in messages only.
    size : int
        Size of the log; a last line ending at ``size`` has no newline (torn).
    workload_key : str, optional
        Keep only records of this workload (and report the scope in messages).

    Returns
    -------
    ReadResult
    """
    result = ReadResult(path=path)
    if workload_key is not None:
        short = workload_key if len(workload_key) <= 12 else workload_key[:12] + "..."
        result.scope = f"workload key {short}"
    for line_no, start, end in spans:
        result.lines += 1
        try:
            obj = json.loads(read(start, end))
        except ValueError:  # includes UnicodeDecodeError
            result.skipped["incomplete last line" if end == size else "unparsable"] += 1
            continue
        try:
            record = TuningRecord.from_json(obj)
        except RecordVersionError as exc:
            result.skipped[f"version {exc.version}"] += 1
            continue
        except (RecordError, TypeError) as exc:
            result.skipped["invalid"] += 1
            if result.first_invalid is None:
                result.first_invalid = f"line {line_no}: {exc}"
            continue
        if workload_key is None or record.workload_key == workload_key:
            result.records.append(record)
            result.line_numbers.append(line_no)
    return result


def parse_lines(data: bytes, path: str, workload_key: str | None = None) -> ReadResult:
    """Parse the bytes of a log (all of it, or one workload's lines) into records.

    Parameters
    ----------
    data : bytes
        The whole file content.
    path : str
        Used in messages only.
    workload_key : str, optional
        Parse only the lines of this workload (found by :class:`LineIndex`),
        plus lines whose key cannot be read cheaply.

    Returns
    -------
    ReadResult
    """
    spans = (iter_spans(data) if workload_key is None
             else LineIndex.build(data).spans_for(workload_key))
    return parse_spans(lambda s, e: data[s:e], spans, path, len(data), workload_key)
