"""A scope for tuning logs: ``with logs.apply_best(paths):`` makes every build inside it use them.

>>> with apply_best("run.jsonl"):                    # doctest: +SKIP
...     k1 = build(ops.matmul(37, 45, 23))           # searches run.jsonl, the user log, the shipped logs
...     k2 = build(ops.softmax(7, 33))
... # one TuningFallbackWarning here: a table of the builds that used no tuned schedule

Like TVM's ``ApplyHistoryBest`` dispatch context, but the scope lives in a
:class:`contextvars.ContextVar`: nested scopes stack (the inner scope's logs
are searched first), and each thread or asyncio task sees only the scopes it
entered.  A thread started inside a scope does not inherit it unless started
with ``contextvars.copy_context().run``.  Builds that fell back are collected
by the innermost scope and handed to the enclosing one when it ends, so they
are reported once, by the outermost scope; a ``strict`` scope raises
:class:`~logs.fallback.TuningRequiredError` instead when it ends.
"""
from __future__ import annotations

import contextvars
import os
import threading
import warnings

from .fallback import Fallback, TuningFallbackWarning, required_error, summary
from .paths import default_log_paths

_SCOPES: contextvars.ContextVar = contextvars.ContextVar("tensortune_log_scopes", default=())


def _as_paths(paths) -> list[str]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    try:
        items = list(paths)
    except TypeError:
        raise TypeError(f"apply_best() takes a log path or a list of them, got {type(paths).__name__}") from None
    for p in items:
        if not isinstance(p, (str, os.PathLike)):
            raise TypeError(f"apply_best(): a log path must be a str or path-like, got {type(p).__name__} {p!r}")
    return [os.path.abspath(os.path.expanduser(os.fspath(p))) for p in items]


class LogScope:
    """What :func:`apply_best` returns: the scope's logs and, once it ends, what fell back.

    Attributes
    ----------
    paths : list of str
        This scope's logs (absolute), searched before those of enclosing scopes.
    strict : bool
        Raise instead of warning when the scope ends with fallbacks.
    fallbacks : list of Fallback
        Builds inside the scope (and scopes nested in it) that used no tuned
        schedule or skipped records.
    builds : int
        Builds made inside the scope (and nested scopes).
    """

    def __init__(self, paths, strict: bool = False):
        self.paths = _as_paths(paths)
        self.strict = bool(strict)
        self.fallbacks: list[Fallback] = []
        self.builds = 0
        self._lock = threading.Lock()
        self._token = None

    def __repr__(self) -> str:
        return f"LogScope({self.paths!r}, strict={self.strict})"

    def add(self, entry: Fallback | None) -> None:
        """Count one build; keep ``entry`` if it fell back or skipped records."""
        with self._lock:
            self.builds += 1
            if entry is not None:
                self.fallbacks.append(entry)

    def __enter__(self) -> "LogScope":
        if self._token is not None:
            raise RuntimeError("an apply_best() scope cannot be entered twice")
        self._token = _SCOPES.set(_SCOPES.get() + (self,))
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _SCOPES.reset(self._token)
        self._token = None
        with self._lock:
            entries, builds = list(self.fallbacks), self.builds
        fell = any(e.fell_back for e in entries)
        if self.strict and fell and exc_type is None:
            raise required_error(entries)
        outer = _SCOPES.get()
        if outer:
            parent = outer[-1]
            with parent._lock:
                parent.fallbacks.extend(entries)
                parent.builds += builds
        elif entries:
            warnings.warn(summary(entries, builds), TuningFallbackWarning, stacklevel=2)


def apply_best(paths, strict: bool = False) -> LogScope:
    """A scope in which every :func:`logs.build` searches ``paths`` first.

    Parameters
    ----------
    paths : path-like or list of path-like
        Tuning logs; searched before the logs of enclosing scopes, then the
        per-user log, then the shipped ones.  Missing files count as empty.
    strict : bool
        When the scope ends, raise :class:`~logs.fallback.TuningRequiredError`
        (one line naming the workloads and the commands that would tune them)
        if any build inside it used no tuned schedule.  Default: one
        :class:`~logs.fallback.TuningFallbackWarning` with a short table.

    Returns
    -------
    LogScope
        A context manager; after the ``with`` block its ``fallbacks`` list
        what fell back.

    Examples
    --------
    >>> with apply_best(["team.jsonl", "mine.jsonl"], strict=True):   # doctest: +SKIP
    ...     kernel = build(tensors)
    """
    return LogScope(paths, strict)


def current_scope() -> LogScope | None:
    """The innermost active :func:`apply_best` scope of this context, or None."""
    scopes = _SCOPES.get()
    return scopes[-1] if scopes else None


def search_paths() -> list[str] | None:
    """The logs a build searches here: the scopes' logs, innermost first, then the default logs;
    None outside any scope (a build then searches :func:`~logs.paths.default_log_paths`)."""
    scopes = _SCOPES.get()
    if not scopes:
        return None
    paths = [p for scope in reversed(scopes) for p in scope.paths]
    paths += [os.path.abspath(os.fspath(p)) for p in default_log_paths()]
    return list(dict.fromkeys(paths))
