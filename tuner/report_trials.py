"""What every report section counts with: which records are trials, how long tuning took, rounding.

- a *trial* is a record that is neither a repeated (``remeasured``) nor a confirming
  (``confirmed``) measurement, nor the default schedule's (no decisions: the tuner measures it
  once beside the trials), and whose schedule was legal (error kind not ``schedule`` or
  ``lower``: those are *invalid* asks, never measured);
- *tuning time* is the wall time the records span, from their timestamps, with any pause
  longer than :data:`RUN_GAP_S` between two records dropped (a log resumed later holds
  several runs; the run count says how many);
- figures are rounded to a few significant digits (:func:`round_sig`), so the same logs give
  the same report text byte for byte.
"""
from __future__ import annotations

import math
from datetime import datetime

RUN_GAP_S = 300.0
"""A pause between two records longer than this starts a new tuning run."""

INVALID_KINDS = ("schedule", "lower")
"""Error kinds of asks whose schedule was illegal (never measured)."""


def round_sig(x, digits: int = 4):
    """``x`` rounded to ``digits`` significant digits (None, 0 and non-finite values unchanged)."""
    if x is None or not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.{digits}g}")


def timestamp_seconds(ts: str) -> float:
    """Seconds since the epoch of a record's ISO 8601 UTC timestamp."""
    return datetime.fromisoformat(ts[:-1] + "+00:00" if ts.endswith("Z") else ts).timestamp()


def is_trial(rec) -> bool:
    """A new candidate's measurement (see the module docstring)."""
    return (not rec.confirmed and not rec.remeasured and not rec.model_choice and bool(rec.decisions)
            and str(rec.error_kind) not in INVALID_KINDS)


def elapsed_seconds(recs: list) -> tuple:
    """Tuning time at each of ``recs`` (in timestamp order) since the first, and the number of runs.

    Returns ``([seconds per record], runs)``: a pause longer than :data:`RUN_GAP_S` between two
    records is dropped and starts a new run.
    """
    out, runs, total, prev = [], 1, 0.0, None
    for rec in recs:
        t = timestamp_seconds(rec.timestamp)
        if prev is not None:
            gap = t - prev
            if gap > RUN_GAP_S:
                runs += 1
            elif gap > 0:
                total += gap
        prev = t
        out.append(total)
    return out, runs
