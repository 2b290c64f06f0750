"""One tuning measurement as a frozen record, and its JSON line format.

A tuning log is JSON Lines: one object per line, one line per measurement.
The object carries every field of :class:`TuningRecord`, ``version`` first::

    {"version":1,"workload_key":"3fa2c1d09b7e","workload_name":"matmul",
     "workload_params":{"M":512,"N":512,"K":512},
     "target":{"kind":"llvm","cpu":"znver3","features":"+avx2,+fma","threads":2},
     "trace":{"instructions":[["split",["C.i"],{"factor":32},["C.i.0","C.i.1"]]],
              "decisions":{"tile_i":32}},
     "decisions":{"tile_i":32},"costs":[0.00411,0.00409,0.00415],
     "error_kind":null,"error_msg":null,"compile_seconds":0.21,"run_seconds":0.05,
     "timestamp":"2026-11-21T12:00:00.000Z","tensortune_version":"0.1.0",
     "flops":268435456}

(shown wrapped; in the file it is a single line).  No pickle, no base64: a
person can read and ``grep`` the log, and any JSON tool can filter it.

The ``version`` field is :data:`FORMAT_VERSION`.  A reader skips lines of
another version *with a warning that says so* (TVM skipped them silently,
apache/tvm#4644).  Unknown extra fields of the same version are ignored, so a
later tensortune can add optional fields without breaking older readers.
"""
from __future__ import annotations

import enum
import json
import math
import statistics
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

FORMAT_VERSION = 1
"""Version of the JSON line format written by this tensortune."""

class ErrorKind(str, enum.Enum):
    """Why a measurement failed: the step it failed at (a ``str``, so logs store its value)."""
    SCHEDULE = "schedule"          # the trace does not replay
    LOWER = "lower"                # it replays but does not lower
    COMPILE = "compile"            # code generation, LLVM or the JIT link failed
    RUNTIME = "runtime"            # the kernel call raised or the runner could not start
    CRASH = "crash"                # the runner process died (a signal)
    TIMEOUT = "timeout"            # compile or run exceeded the budget
    WRONG_ANSWER = "wrong_answer"  # outputs differ from the numpy reference
    MEMORY = "memory"              # buffers too large to allocate

    def __str__(self) -> str:
        return self.value


ERROR_KINDS = tuple(k.value for k in ErrorKind)
"""Allowed values of :attr:`TuningRecord.error_kind` (besides ``None``)."""

# Fields a JSON line must carry; the others (decisions, error_msg, flops) default.
_REQUIRED_JSON_FIELDS = ("version", "workload_key", "workload_name", "workload_params",
                         "target", "trace", "costs", "error_kind", "compile_seconds",
                         "run_seconds", "timestamp", "tensortune_version")


class RecordError(ValueError):
    """A tuning record is malformed; the message names the offending field."""


class RecordVersionError(RecordError):
    """A record was written in another :data:`FORMAT_VERSION`.

    Attributes
    ----------
    version : object
        The version found in the record.
    """

    def __init__(self, version: Any):
        self.version = version
        super().__init__(f"field 'version': record is format version {version!r}, "
                         f"this tensortune reads version {FORMAT_VERSION}")


def utc_now() -> str:
    """Return the current time as ISO 8601 UTC text, e.g. ``2026-11-21T12:00:00.000Z``."""
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return now.replace("+00:00", "Z")


def installed_version() -> str:
    """Return the installed tensortune version (from package metadata or pyproject.toml).

    Returns
    -------
    str
        The version, or ``"unknown"`` if neither source is available.
    """
    global _VERSION
    if _VERSION is None:
        _VERSION = _find_version()
    return _VERSION


_VERSION: str | None = None


def _find_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("tensortune")
    except metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        import tomllib
        with open(pyproject, "rb") as f:
            return str(tomllib.load(f)["project"]["version"])
    except (ImportError, OSError, KeyError, ValueError):
        return "unknown"


def target_key(target: Mapping[str, Any]) -> tuple[str, str, int | None]:
    """Return the part of a target that decides whether a record applies.

    Records match a target exactly when kind, CPU name and thread count are
    equal.  The ``features`` string is not part of the key: its spelling
    (order, LLVM-version specific flags) changes between LLVM releases, which
    would orphan logs after an upgrade (a TVM complaint, forum 14457).
    Features are compared as sets instead (:func:`missing_features`).

    Parameters
    ----------
    target : mapping
        A target dict such as ``{"kind": "llvm", "cpu": "znver3", "threads": 2}``.

    Returns
    -------
    tuple of (str, str, int or None)
        ``(kind, cpu, threads)``; kind defaults to ``"llvm"``, cpu to ``""``.
    """
    kind = str(target.get("kind") or "llvm").lower()
    cpu = str(target.get("cpu") or "")
    threads = target.get("threads")
    return kind, cpu, (int(threads) if threads is not None else None)


def target_features(target: Mapping[str, Any]) -> tuple[frozenset, frozenset] | None:
    """The ``(enabled, disabled)`` LLVM features of a target, or None if it records none.

    ``"+avx2,+fma,-avx512f"`` gives ``({"avx2", "fma"}, {"avx512f"})``.
    """
    text = target.get("features")
    if not isinstance(text, str) or not text.strip():
        return None
    flags = [f.strip() for f in text.split(",") if f.strip()]
    return (frozenset(f[1:] for f in flags if f.startswith("+")),
            frozenset(f[1:] for f in flags if f.startswith("-")))


def target_vector_bits(target: Mapping[str, Any]) -> int | None:
    """The widest SIMD register of a target in bits (from its features), or None if unknown."""
    from tensorir.target import vector_bits_of
    text = target.get("features")
    if not isinstance(text, str) or not text.strip():
        return None
    return vector_bits_of(text.replace(" ", ""))


def missing_features(record_target: Mapping[str, Any], host: Mapping[str, Any]) -> frozenset:
    """Features the record's CPU had that ``host`` lacks (empty if either lists no features).

    A feature counts as lacking when the host lists it disabled, or when the host lists only
    enabled features and it is not among them.  A feature the host's LLVM does not name at all
    (renamed or added in another LLVM release) is not held against the record.
    """
    theirs, ours = target_features(record_target), target_features(host)
    if theirs is None or ours is None:
        return frozenset()
    enabled, disabled = ours
    absent = theirs[0] - enabled
    return absent if not disabled else absent & disabled


def describe_target(target: Mapping[str, Any]) -> str:
    """Return a short label such as ``"znver3, 2 threads"`` for messages."""
    kind, cpu, threads = target_key(target)
    label = cpu or f"{kind} (generic cpu)"
    if threads is not None:
        label += f", {threads} thread" + ("" if threads == 1 else "s")
    return label


def workload_label(name: str, params: Mapping[str, Any] | None) -> str:
    """Return a readable workload label such as ``"matmul(M=64, N=64, K=64)"``.

    Parameters
    ----------
    name : str
        Workload name, e.g. ``"matmul"``.
    params : mapping or None
        Shape parameters, shown in their insertion order.

    A workload carried as its tensor expression (``"expr:LABEL"``, a model's fused group) is
    shown as its label: its one parameter is the whole expression.
    """
    if name.startswith("expr:") and set(params or {}) == {"workload"}:
        return name[len("expr:"):]
    inner = ", ".join(f"{k}={v}" for k, v in (params or {}).items())
    return f"{name}({inner})"


def _fail(name: str, expected: str, value: Any) -> RecordError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return RecordError(f"field {name!r}: expected {expected}, got {shown}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, "a number of seconds", value)
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise _fail(name, "a finite number of seconds >= 0", value)
    return value


def _str_keyed_dict(name: str, value: Any) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(name, "a JSON object (dict with str keys)", value)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class TuningRecord:
    """One measurement of one schedule of one workload on one target.

    Construction validates every field and raises :class:`RecordError` naming
    the first bad one, so a bad record fails where it is made, not when a
    later run reads the log.  ``costs`` is stored as a tuple of floats (a list
    is accepted); integer second counts are stored as floats.  Records compare
    by value but are not hashable (they hold dicts): deduplicate with
    :meth:`canonical_key`.

    Attributes
    ----------
    version : int
        :data:`FORMAT_VERSION` of the line format.
    workload_key : str
        Stable structural hash of the tensor expression.
    workload_name : str
        Human name, e.g. ``"matmul"`` or ``"myfile.py:myop"``.
    workload_params : dict
        Shape parameters, e.g. ``{"M": 512, "N": 512, "K": 512}``.
    target : dict
        Where it was measured: ``kind``, ``cpu``, ``features``, ``threads``.
    trace : dict
        The schedule trace (``instructions`` and ``decisions``); opaque JSON here.
    decisions : dict
        The tuner's decision vector (may duplicate the trace's).
    costs : tuple of float
        Seconds per repeat; empty on error (any costs of a failed record are ignored).
    error_kind : str or None
        ``None`` on success, else one of :data:`ERROR_KINDS`.
    error_msg : str or None
        The error text of a failed measurement.
    compile_seconds, run_seconds : float
        Wall time to compile, and to measure.
    timestamp : str
        ISO 8601 UTC time of the measurement.
    tensortune_version : str
        Version of tensortune that measured it.
    flops : int or None
        Floating-point operations of one run, so GFLOP/s can be shown.
    confirmed : bool
        True for a *confirming* measurement: at the end of a tuning run its
        fastest few schedules are re-timed side by side, interleaved, so
        their order does not depend on when each was first measured (on a
        shared machine the clock and the load drift between measurements,
        and the single fastest of many measurements is often a lucky one).
        Lookups rank confirmed measurements before the others
        (:attr:`rank_key`).  Optional in the JSON line (default false).
    remeasured : bool
        True for a repeated measurement taken while tuning: a schedule that
        measured among the run's fastest is measured again in later rounds,
        and the median of its measurements ranks it (one lucky measurement
        must not steer the search).  Not a new trial.  Optional in the JSON
        line (default false).
    model_choice : bool
        True for the choice of ``tune-model``'s final check: the task's tuned
        schedule and its heuristic start were timed in place, as steps of the
        model (side by side, alternating rounds), and this one ran faster
        there; ``costs`` are its in-model times.  Lookups rank the latest such
        record of a workload and target before all others (:attr:`rank_key`),
        so builds use what ran fastest in the model, not in isolation
        (docs/decisions/045-tune-model-keeps-what-runs-faster-in-the-model.md).
        Optional in the JSON line (default false, omitted when false).
    meta : dict
        Optional annotations that do not change what was measured:
        ``"origin"``, who chose the candidate (the tuner's arm, e.g.
        ``"model:ask"``), and ``"numpy_seconds"``, numpy's time per call of
        the workload timed side by side with this schedule when the log was
        written (``tensortune tune`` appends one such record).  Omitted from
        the JSON line when empty, so lines without it read as before.
    """

    version: int = FORMAT_VERSION
    workload_key: str
    workload_name: str
    workload_params: dict
    target: dict
    trace: dict
    decisions: dict = field(default_factory=dict)
    costs: tuple[float, ...] = ()
    error_kind: str | None = None
    error_msg: str | None = None
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    timestamp: str = field(default_factory=utc_now)
    tensortune_version: str = field(default_factory=installed_version)
    flops: int | None = None
    confirmed: bool = False
    remeasured: bool = False
    meta: dict = field(default_factory=dict)
    model_choice: bool = False

    def __post_init__(self) -> None:
        if not _is_int(self.version) or self.version < 1:
            raise _fail("version", "a positive integer", self.version)
        if self.version != FORMAT_VERSION:
            raise RecordVersionError(self.version)
        if not isinstance(self.workload_key, str) or not self.workload_key:
            raise _fail("workload_key", "a non-empty string", self.workload_key)
        if not isinstance(self.workload_name, str):
            raise _fail("workload_name", "a string", self.workload_name)
        _str_keyed_dict("workload_params", self.workload_params)
        _str_keyed_dict("target", self.target)
        threads = self.target.get("threads")
        if threads is not None and (not _is_int(threads) or threads < 1):
            raise _fail("target.threads", "a positive integer or null", threads)
        _str_keyed_dict("trace", self.trace)
        _str_keyed_dict("decisions", self.decisions)
        if isinstance(self.costs, (str, bytes)) or not isinstance(self.costs, (list, tuple)):
            raise _fail("costs", "a list of seconds", self.costs)
        object.__setattr__(self, "costs", tuple(_seconds("costs", c) for c in self.costs))
        if self.error_kind is not None:
            if self.error_kind not in ERROR_KINDS:
                raise _fail("error_kind", f"null or one of {', '.join(ERROR_KINDS)}", self.error_kind)
            object.__setattr__(self, "error_kind", ErrorKind(self.error_kind))
        if self.error_kind is None and not self.costs:
            raise RecordError("field 'costs': a successful record (error_kind null) "
                              "needs at least one cost")
        if self.error_msg is not None and not isinstance(self.error_msg, str):
            raise _fail("error_msg", "a string or null", self.error_msg)
        object.__setattr__(self, "compile_seconds",
                           _seconds("compile_seconds", self.compile_seconds))
        object.__setattr__(self, "run_seconds", _seconds("run_seconds", self.run_seconds))
        self._check_timestamp()
        if not isinstance(self.tensortune_version, str):
            raise _fail("tensortune_version", "a string", self.tensortune_version)
        if self.flops is not None and (not _is_int(self.flops) or self.flops < 0):
            raise _fail("flops", "a non-negative integer or null", self.flops)
        for name in ("confirmed", "remeasured", "model_choice"):
            if not isinstance(getattr(self, name), bool):
                raise _fail(name, "true or false", getattr(self, name))
        _str_keyed_dict("meta", self.meta)

    def _check_timestamp(self) -> None:
        if not isinstance(self.timestamp, str):
            raise _fail("timestamp", "an ISO 8601 UTC string", self.timestamp)
        text = self.timestamp[:-1] + "+00:00" if self.timestamp.endswith("Z") else self.timestamp
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise _fail("timestamp", "an ISO 8601 UTC string", self.timestamp) from None
        if parsed.tzinfo is None:
            raise _fail("timestamp", "an ISO 8601 time with a UTC offset", self.timestamp)

    # --- derived values ------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """True if the measurement succeeded (no error kind, at least one cost)."""
        return self.error_kind is None and bool(self.costs)

    @property
    def median_cost(self) -> float:
        """Median of ``costs`` in seconds; ``inf`` for a failed measurement."""
        return statistics.median(self.costs) if self.ok else math.inf

    @property
    def rank_key(self) -> tuple:
        """Sort key of the fastest first: a model's choice (the latest first), then confirmed
        measurements, then by median cost."""
        if self.model_choice:
            return (False, -_epoch(self.timestamp), False, self.median_cost)
        return (True, 0.0, not self.confirmed, self.median_cost)

    @property
    def gflops(self) -> float | None:
        """GFLOP/s at the median cost; ``None`` if failed or ``flops`` is unknown."""
        cost = self.median_cost
        if self.flops is None or not math.isfinite(cost) or cost <= 0:
            return None
        return self.flops / cost / 1e9

    @property
    def workload_label(self) -> str:
        """Readable workload label, e.g. ``"matmul(M=64, N=64, K=64)"``."""
        return workload_label(self.workload_name, self.workload_params)

    # --- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Return the record as a plain JSON-ready dict (``costs`` as a list)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["costs"] = list(self.costs)
        if not out["meta"]:
            del out["meta"]      # optional: lines without annotations stay as before
        if not out["model_choice"]:
            del out["model_choice"]
        return out

    def to_json_line(self) -> str:
        """Return the record as one compact JSON line (no trailing newline).

        Raises
        ------
        RecordError
            If a field holds something JSON cannot represent (the message names it).
        """
        data = self.to_dict()
        try:
            return json.dumps(data, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            for name, value in data.items():
                try:
                    json.dumps(value, allow_nan=False)
                except (TypeError, ValueError) as exc:
                    raise RecordError(f"field {name!r}: not representable as JSON "
                                      f"({exc})") from None
            raise

    def canonical_key(self) -> str:
        """Return a text equal for records with equal content (sorted keys), for dedupe."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | str | bytes) -> "TuningRecord":
        """Build a record from a parsed JSON object or from one JSON line.

        Parameters
        ----------
        obj : mapping, str or bytes
            A dict as produced by ``json.loads(line)``, or the line itself.

        Returns
        -------
        TuningRecord

        Raises
        ------
        RecordVersionError
            If the record is of another :data:`FORMAT_VERSION` (checked first).
        RecordError
            If the text is not JSON, or a field is missing or invalid.
        """
        if isinstance(obj, (str, bytes)):
            try:
                obj = json.loads(obj)
            except ValueError as exc:
                raise RecordError(f"not valid JSON: {exc}") from None
        if not isinstance(obj, Mapping):
            raise RecordError(f"expected a JSON object, got {type(obj).__name__}")
        if "version" not in obj:
            raise RecordError("missing field 'version'")
        if obj["version"] != FORMAT_VERSION:
            raise RecordVersionError(obj["version"])
        missing = [name for name in _REQUIRED_JSON_FIELDS if name not in obj]
        if missing:
            raise RecordError("missing field" + ("s " if len(missing) > 1 else " ")
                              + ", ".join(repr(m) for m in missing))
        known = {name: obj[name] for name in _FIELD_NAMES if name in obj}
        for name in ("decisions", "meta"):
            if known.get(name) is None:
                known.pop(name, None)
        return cls(**known)


_FIELD_NAMES = tuple(f.name for f in fields(TuningRecord))


def _epoch(timestamp: str) -> float:
    text = timestamp[:-1] + "+00:00" if timestamp.endswith("Z") else timestamp
    return datetime.fromisoformat(text).timestamp()
