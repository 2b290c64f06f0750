"""The CLI's user error, in a module of its own so command modules (``tuner/cmd_*.py``) can raise it
without importing :mod:`tuner.cli`, which imports them."""
from __future__ import annotations


class CLIError(Exception):
    """A user error: printed as one line."""
