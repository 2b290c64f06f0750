"""tensortune: logs.

Tuning records as JSON Lines, an append-only log that survives kills and
concurrent writers, default log locations, the compile-time lookup of the
best tuned schedule for a workload on a target, and builds from logs
(``build``, ``apply_best`` scopes, one summary of what fell back).
"""
from .database import LOCK_TIMEOUT_SECONDS, LogError, LogWarning, TuningLog
from .lookup import MATCHES, Lookup, clear_cache, find_best
from .paths import default_log_path, default_log_paths, pretuned_dir
from .reader import ReadResult
from .record import (ERROR_KINDS, FORMAT_VERSION, ErrorKind, RecordError, RecordVersionError,
                     TuningRecord, describe_target, installed_version, target_key,
                     utc_now, workload_label)

__all__ = [
    "ERROR_KINDS", "ErrorKind", "FORMAT_VERSION", "LOCK_TIMEOUT_SECONDS", "MATCHES",
    "LogError", "LogWarning", "Lookup", "ReadResult", "RecordError", "RecordVersionError",
    "TuningLog", "TuningRecord",
    "clear_cache", "default_log_path", "default_log_paths", "describe_target", "find_best",
    "pretuned_dir", "installed_version", "target_key", "utc_now", "workload_label",
]

from .apply import TuningFallbackWarning, best_schedule, build, current_target, heuristic_schedule  # noqa: E402,F401
from .fallback import Fallback, TuningRequiredError  # noqa: E402,F401
from .lookup import Skipped  # noqa: E402,F401
from .scope import LogScope, apply_best  # noqa: E402,F401
