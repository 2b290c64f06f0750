"""Where tuning logs live by default.

This is the one place that reads the environment for log locations: the user
log follows the XDG base-directory convention, and pre-tuned logs ship inside
the package in ``logs/pretuned/``.
"""
from __future__ import annotations

import os
from pathlib import Path

LOG_FILENAME = "tuning.jsonl"


def default_log_path() -> Path:
    """Return the user's tuning log path.

    ``$XDG_CACHE_HOME/tensortune/tuning.jsonl`` if ``XDG_CACHE_HOME`` is set to
    an absolute path (the XDG spec says relative values are ignored), else
    ``~/.cache/tensortune/tuning.jsonl``.  The file need not exist.

    Returns
    -------
    pathlib.Path
    """
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if cache and os.path.isabs(cache) else Path.home() / ".cache"
    return base / "tensortune" / LOG_FILENAME


def pretuned_dir() -> Path:
    """Return the package directory holding shipped pre-tuned logs (``logs/pretuned/``).

    Returns
    -------
    pathlib.Path
    """
    return Path(__file__).resolve().parent / "pretuned"


def default_log_paths() -> list[Path]:
    """Return the logs a compile-time lookup searches by default.

    Returns
    -------
    list of pathlib.Path
        The user log (whether or not it exists yet) followed by the shipped
        ``*.jsonl`` files in :func:`pretuned_dir`, sorted by name.
    """
    shipped = sorted(pretuned_dir().glob("*.jsonl")) if pretuned_dir().is_dir() else []
    return [default_log_path(), *shipped]
