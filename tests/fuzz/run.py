"""Applying a case's calls one by one, from the last good schedule, lowering after each."""
from __future__ import annotations

from schedules import Schedule, ScheduleError
from tests.fuzz.calls import apply_call
from tests.fuzz.outcomes import Finding, describe_exc, one_line, safe_trace
from tests.fuzz.workloads import Workload

# Lowering checks that are deferred by design (a later reorder/split can make them pass): a
# schedule whose lowering fails on them is not a late refusal.
DEFERRED_CHECKS = frozenset({"vectorize", "unroll"})


def _own_primitives(op: str) -> set:
    return {"tile": {"tile", "split", "reorder"}}.get(op, {op})


class Run:
    """Applies calls one by one, from the last good schedule, and records findings."""

    def __init__(self, workload: Workload, lower_each: bool = True):
        self.workload = workload
        self.tensors = workload.make()
        self.s = Schedule(self.tensors)
        self.lower_each = lower_each
        self.lowerable = True
        self.last_lowerable = self.s
        self.calls: list = []
        self.results: list = []          # per call: ok | ok_unlowerable | refused | failed | reverted
        self.findings: list = []

    def step(self, c: dict) -> str:
        """Apply ``c``; returns what it gave: ok, ok_unlowerable, refused, failed or reverted."""
        idx = len(self.calls)
        self.calls.append(c)
        result = self._step(idx, c)
        self.results.append(result)
        return result

    def _finding(self, category, message, idx, before):
        self.findings.append(Finding(category, message, idx, safe_trace(before)))

    def _step(self, idx: int, c: dict) -> str:
        if c["op"] == "$revert":
            self.s, self.lowerable = self.last_lowerable, True
            return "reverted"
        before = self.s
        try:
            new = apply_call(before, c)
        except ScheduleError as err:
            if one_line(str(err)):
                return "refused"
            self._finding("bad_error", f"{c['op']}: multi-line ScheduleError: {describe_exc(err)}", idx, before)
            return "failed"
        except Exception as err:  # noqa: BLE001 - that is the finding
            self._finding("bad_error", f"{c['op']}: {describe_exc(err)}", idx, before)
            return "failed"
        if not isinstance(new, Schedule):
            self._finding("bad_error", f"{c['op']} returned {type(new).__name__}, not a Schedule", idx, before)
            return "failed"
        self.s = new
        if self.lower_each:
            try:
                new.lower()
                ok = True
            except ScheduleError as err:
                ok = False
                blamed = getattr(err, "primitive", None)
                if (self.lowerable and c["op"] != "from_json" and blamed not in DEFERRED_CHECKS
                        and blamed not in _own_primitives(c["op"])):
                    self._finding("late_refusal", f"{c['op']} was accepted, then lower() failed: {err}", idx,
                                  before)
                if not one_line(str(err)):
                    self._finding("bad_error", f"lower: multi-line ScheduleError: {describe_exc(err)}", idx,
                                  before)
            except Exception as err:  # noqa: BLE001
                ok = False
                self._finding("bad_error", f"lower after {c['op']}: {describe_exc(err)}", idx, before)
            if ok:
                self.last_lowerable = new
            self.lowerable = ok
            return "ok" if ok else "ok_unlowerable"
        return "ok"
