"""Builds that used no tuned schedule, reported once as a short table (not a warning per kernel).

TVM warned once per kernel with a hash (apache/tvm#7975): a model of fifty
kernels gave fifty lines nobody could act on.  Here a scope
(:func:`logs.apply_best`) collects one :class:`Fallback` per build that fell
back or skipped a stale record, and reports them together when it ends::

    2 of 3 builds used no tuned schedule (searched run.jsonl, ~/.cache/tensortune/tuning.jsonl, 3 shipped logs):
      workload                  built      why             to tune it
      matmul(M=37, N=45, K=23)  heuristic  no record       tensortune tune matmul M=37 N=45 K=23
      softmax(rows=7, cols=33)  naive      no record       tensortune tune softmax rows=7 cols=33
    skipped records (the next one was used instead):
      run.jsonl:12  dense(...)  wrong answer: output Y: max abs error 3.1 at [0, 5] ...
"""
from __future__ import annotations

from dataclasses import dataclass

from .lookup import Skipped, display_path
from .paths import pretuned_dir

FALLBACKS = ("heuristic", "naive")
"""How a build without a usable record is built (``Lookup.match`` of its kernel)."""


class TuningFallbackWarning(UserWarning):
    """Builds used no tuned schedule (or skipped stale records); the message is a short table."""


class TuningRequiredError(RuntimeError):
    """A strict :func:`logs.apply_best` scope built workloads without a tuned schedule (one line naming them)."""


@dataclass(frozen=True)
class Fallback:
    """One build that used no tuned schedule, or passed over records that no longer serve.

    Attributes
    ----------
    label : str
        The workload by operator and shape, e.g. ``"matmul(M=37, N=45, K=23)"``.
    command : str
        The ``tensortune tune ...`` command that would tune it.
    built : str
        ``"heuristic"`` or ``"naive"`` (a fallback), or the lookup rule of the
        tuned record used after skipping others (``"exact"``...).
    why : str
        Why no record was used (short), or "" for a tuned build.
    skipped : tuple of Skipped
        Records passed over: their log, line and what was wrong.
    searched : tuple of str
        The logs searched, in order.
    """

    label: str
    command: str
    built: str
    why: str
    skipped: tuple[Skipped, ...] = ()
    searched: tuple[str, ...] = ()

    @property
    def fell_back(self) -> bool:
        """True if the build used no tuned schedule."""
        return self.built in FALLBACKS


def _searched_text(paths) -> str:
    shipped_dir = str(pretuned_dir())
    own = [p for p in dict.fromkeys(paths) if not p.startswith(shipped_dir)]
    shipped = len(set(paths)) - len(own)
    parts = [display_path(p) for p in own]
    if shipped:
        parts.append(f"{shipped} shipped log{'s' if shipped != 1 else ''}")
    return ", ".join(parts) or "no logs"


def _table(rows: list, indent: str = "  ") -> list:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]


def summary(entries: list, builds: int | None = None) -> str:
    """The short table of ``entries`` (:class:`Fallback`), one row per workload.

    Parameters
    ----------
    entries : list of Fallback
    builds : int, optional
        How many builds there were in all, for the first line ("2 of 5 builds ...").
    """
    fell = list({e.label: e for e in entries if e.fell_back}.values())
    skipped = [(s, e.label) for e in entries for s in e.skipped]
    searched = [p for e in entries for p in e.searched]
    lines = []
    if fell:
        n = len([e for e in entries if e.fell_back])
        count = f"{n} of {builds} builds" if builds else f"{n} build{'s' if n != 1 else ''}"
        lines.append(f"{count} used no tuned schedule (searched {_searched_text(searched)}):")
        rows = [("workload", "built", "why", "to tune it")]
        rows += [(e.label, e.built, e.why, e.command) for e in fell]
        lines += _table(rows)
    if skipped:
        lines.append("skipped records (" + ("the next one was used instead" if not fell
                                            else "the next one, if any, was used instead") + "):")
        seen = dict.fromkeys((s.where(), label, s.why) for s, label in skipped)
        lines += _table(list(seen))
    return "\n".join(lines)


def required_error(entries: list) -> TuningRequiredError:
    """The one-line error of a strict scope whose builds in ``entries`` fell back."""
    fell = list({e.label: e for e in entries if e.fell_back}.values())
    names = ", ".join(e.label for e in fell)
    commands = "; ".join(e.command for e in fell)
    return TuningRequiredError(f"no tuned schedule for {len(fell)} workload{'s' if len(fell) != 1 else ''} "
                               f"(strict): {names}; tune with: {commands}")
