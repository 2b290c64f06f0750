"""Cases: a workload and its drawn (or recorded) calls, applied and checked; and minimizing one."""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from schedules import ScheduleError
from tests.fuzz.check import IN_PROCESS_MAX_BYTES, check
from tests.fuzz.drawer import Drawer
from tests.fuzz.outcomes import Finding, describe_exc, safe_trace, worst
from tests.fuzz.reproducer import record_report
from tests.fuzz.run import Run
from tests.fuzz.workloads import WORKLOADS, output_names, pick_workload, tensor_shapes


@dataclass
class CaseResult:
    workload: str
    category: str
    message: str
    calls: list
    findings: list                  # [Finding]
    trace: dict | None              # the final schedule's trace
    seed: object = None             # what drew the case (for the record)
    lowered: str | None = None
    results: list = field(default_factory=list)   # per call, see Run.results

    def record(self) -> dict:
        """One JSON-able line for the failing-cases file (and for ``--replay``)."""
        return {"workload": self.workload, "category": self.category, "message": self.message,
                "trace": self.trace, "calls": self.calls, "results": self.results, "seed": self.seed,
                "findings": [f.as_dict() for f in self.findings]}

    def report(self) -> str:
        """The case for humans (see :func:`tests.fuzz.reproducer.record_report`)."""
        return record_report(self.record())


def _finish(run: Run, *, run_kernel: bool, max_bytes, checked, seed, hook=None) -> CaseResult:
    findings = list(run.findings)
    out = None
    if hook is not None:
        hook("check", safe_trace(run.s))
    if run_kernel:
        out = check(run.workload, run.s, max_bytes=max_bytes, checked=checked)
        findings += out.findings
        if out.category == "refused" and not findings:
            return CaseResult(run.workload.name, "refused", out.message, run.calls, [], safe_trace(run.s), seed,
                              None, list(run.results))
    cat = worst([f.category for f in findings])
    msg = next((f.message for f in findings if f.category == cat), "")
    return CaseResult(run.workload.name, cat, msg, run.calls, findings, safe_trace(run.s), seed,
                      out.lowered if out else None, list(run.results))


def run_case(workload_name: str, rnd, *, allow_huge: bool = False, avoid_known: bool = False,
             min_calls: int = 3, max_calls: int = 12,
             run_kernel: bool = True, max_bytes: int | None = IN_PROCESS_MAX_BYTES, checked: bool | None = None,
             seed=None, hook=None) -> CaseResult:
    """Draw 3-12 calls on a fresh schedule of the workload, then check the result.

    ``hook(event, payload)``, if given, hears ``("call", call)`` before each call is applied and
    ``("check", trace)`` before the final checks (the long run's workers report progress with it, so
    that a crash or a hang is attributed to the right call).
    """
    wl = WORKLOADS[workload_name]
    if hook is not None:
        hook("workload", workload_name)
    run = Run(wl)
    drawer = Drawer(rnd, allow_huge=allow_huge, avoid_known=avoid_known)
    outputs, shapes = output_names(run.tensors), tensor_shapes(run.tensors)
    for _ in range(rnd.randint(min_calls, max_calls)):
        try:
            c = drawer.draw(run.s, outputs, shapes)
        except ScheduleError as err:
            # The inspection API refused to describe the current schedule: a finding of its own.
            run.findings.append(Finding("bad_error", f"inspecting the schedule: {describe_exc(err)}",
                                        len(run.calls), safe_trace(run.s)))
            break
        if hook is not None:
            hook("call", c)
        run.step(c)
    return _finish(run, run_kernel=run_kernel, max_bytes=max_bytes, checked=checked, seed=seed, hook=hook)


def replay_calls(workload_name: str, calls: list, *, run_kernel: bool = True,
                 max_bytes: int | None = IN_PROCESS_MAX_BYTES, checked: bool | None = None, seed=None,
                 hook=None) -> CaseResult:
    """Re-apply recorded calls (a case, or a minimized one) and check the result."""
    run = Run(WORKLOADS[workload_name])
    for c in calls:
        if hook is not None:
            hook("call", c)
        run.step(c)
    return _finish(run, run_kernel=run_kernel, max_bytes=max_bytes, checked=checked, seed=seed, hook=hook)


def case_seed(seed: int, index: int) -> str:
    """The seed of case ``index`` of a run with ``seed`` (a ``random.Random`` seed)."""
    return f"{seed}:{index}"


def seeded_case(seed: int, index: int, *, allow_huge: bool = False, **kw) -> CaseResult:
    """Case ``index`` of a run with ``seed``: the workload and the calls both come from the seed."""
    rnd = random.Random(case_seed(seed, index))
    name = pick_workload(rnd, allow_huge)
    return run_case(name, rnd, allow_huge=allow_huge, seed=case_seed(seed, index), **kw)


def minimize(workload_name: str, calls: list, category: str, still_fails: Callable | None = None) -> list:
    """Greedily drop calls while the case keeps failing with ``category`` (in-process by default)."""
    def default(cs):
        return replay_calls(workload_name, cs).category == category
    test = still_fails or default
    cur = list(calls)
    changed = True
    while changed:
        changed = False
        i = len(cur) - 1
        while i >= 0:
            cand = cur[:i] + cur[i + 1:]
            if test(cand):
                cur, changed = cand, True
            i -= 1
    return cur
