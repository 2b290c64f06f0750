"""The CLI's user error, in a module of its own so command modules (``tuner/cmd_*.py``) can raise it
without importing :mod:`tuner.cli`, which imports them."""
from __future__ import annotations

import os


class CLIError(Exception):
    """A user error: printed as one line."""


def require_logs(paths) -> None:
    """A one-line error for a ``--log`` to read that is not a file (a typo would otherwise build untuned)."""
    for path in paths or []:
        if os.path.isdir(path):
            raise CLIError(f"tuning log {path} is a directory; --log takes a log file (e.g. {path}/tuning.jsonl)")
        if not os.path.isfile(path):
            raise CLIError(f"tuning log {path} not found")
