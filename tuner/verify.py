"""Replay the best records of tuning logs on this machine and check them against numpy.

A record is checked as the measurer checks a candidate: its workload is
rebuilt from the record's name and parameters (:class:`tuner.spec.WorkloadSpec`:
a built-in or a ``file.py:function``), its trace replayed on it, the kernel
built for this machine and run on random inputs, and the outputs compared
with the numpy reference under the measurer's tolerances
(:func:`tuner.worker.check_outputs`).  This lives in the tuner layer because
rebuilding a workload and the numerics check are the tuner's.

Outcomes, by :attr:`Verdict.status`:

``ok``        replays, builds and computes the reference's answer;
``mismatch``  the name and parameters rebuild another workload than the record's key;
``replay``    the trace no longer replays on the workload;
``build``     it replays but does not lower or compile;
``runtime``   the kernel raised when called;
``wrong``     the outputs differ from numpy's;
``skipped``   the workload cannot be rebuilt here (unknown name, missing file, too large).
"""
from __future__ import annotations

from dataclasses import dataclass

from logs.tools import Entry, schedule_id

FAILURES = ("mismatch", "replay", "build", "runtime", "wrong")
"""Statuses that make ``tensortune logs verify`` exit with status 1."""

DESCRIBE = {"ok": "ok", "mismatch": "workload mismatch", "replay": "no longer replays",
            "build": "does not build", "runtime": "kernel raised", "wrong": "wrong answer",
            "skipped": "not checked"}
"""A few words per status, for messages."""


@dataclass(frozen=True)
class Verdict:
    """The result of checking one record.

    Attributes
    ----------
    entry : Entry
        The record, with its log file and line.
    status : str
        One of ``ok``, :data:`FAILURES` or ``skipped``.
    detail : str
        One line saying what went wrong (empty when ok).
    """
    entry: Entry
    status: str
    detail: str = ""

    @property
    def failed(self) -> bool:
        """True for a status in :data:`FAILURES`."""
        return self.status in FAILURES


def output_problem(spec, inputs, outputs) -> str | None:
    """None if a kernel's ``outputs`` for ``inputs`` match the workload's numpy reference, else why not.

    The measurer's check (:func:`tuner.worker.check_outputs`) with its tolerances (:class:`MeasureConfig`).
    """
    from .measure import MeasureConfig
    from .worker import check_outputs
    cfg = MeasureConfig()
    return check_outputs([t.name for t in spec.output_tensors()], outputs, spec.reference(inputs),
                         cfg.rtol, cfg.atol, spec.reduction_length)


def check_record(record, seed: int = 0) -> tuple[str, str]:
    """``(status, detail)`` of one record replayed and run on this machine.

    Parameters
    ----------
    record : logs.TuningRecord
    seed : int
        Seed of the random inputs.
    """
    from schedules import Schedule
    from schedules.errors import ScheduleError
    from tensorir.runtime import build

    from .spec import SpecError, WorkloadSpec
    from .text import one_line
    try:
        spec = WorkloadSpec(record.workload_name, dict(record.workload_params))
        tensors = spec.tensors()
        spec.check_memory()
    except SpecError as err:
        return "skipped", f"cannot rebuild the workload here: {one_line(err)}"
    if spec.key != record.workload_key:
        return "mismatch", (f"{spec.label} rebuilds as workload key {spec.key}, but the record was measured "
                            f"on key {record.workload_key}: its name and parameters do not match its key")
    try:
        sch = Schedule.from_json(tensors, record.trace)
    except (ScheduleError, ValueError, TypeError, KeyError) as err:
        return "replay", one_line(err)
    try:
        kernel = build(sch.lower())
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001 - any lowering or LLVM failure is this record's verdict
        return "build", f"{type(err).__name__}: {one_line(err)}"
    inputs = spec.inputs(seed)
    outs = spec.empty_outputs()
    try:
        kernel(*inputs, *outs)
    except MemoryError:
        raise
    except Exception as err:  # noqa: BLE001
        return "runtime", f"{type(err).__name__}: {one_line(err)}"
    problem = output_problem(spec, inputs, outs)
    return ("wrong", problem) if problem else ("ok", "")


def verify(groups, seed: int = 0, progress=None) -> list[Verdict]:
    """Check each record of ``groups`` (from :func:`logs.tools.best_entries`).

    A schedule of a workload listed for several targets is run once: a trace
    does not depend on the target it was measured on.

    Parameters
    ----------
    groups : list of list of Entry
    seed : int
        Seed of the random inputs.
    progress : callable, optional
        Called with each :class:`Verdict` as it is made.

    Returns
    -------
    list of Verdict
        In the order of ``groups``.
    """
    done: dict = {}
    out = []
    for group in groups:
        for entry in group:
            rec = entry.record
            key = (rec.workload_name, repr(sorted(rec.workload_params.items())), rec.workload_key,
                   schedule_id(rec))
            if key not in done:
                done[key] = check_record(rec, seed)
            verdict = Verdict(entry, *done[key])
            out.append(verdict)
            if progress is not None:
                progress(verdict)
    return out
