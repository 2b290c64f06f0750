"""A case as Python that rebuilds it (accepted calls as code, refused ones as comments), and as a report."""
from __future__ import annotations

import json

from tests.fuzz.calls import call_to_python
from tests.fuzz.outcomes import Finding


def record_report(rec: dict) -> str:
    """A failing case for humans: the message, Python that reproduces it, and its record line."""
    lines = [f"{rec['category']} on {rec.get('workload')}: {rec.get('message', '')}", ""]
    if rec.get("log_tail"):
        lines += ["worker log:", rec["log_tail"], ""]
    lines += ["reproduce (refused calls commented out):",
              reproducer(rec.get("workload"), rec.get("calls") or [], rec.get("results"),
                         rec.get("findings") or ()),
              "", "record (one line for benchmarks/fuzz_schedules.py --replay FILE):",
              json.dumps(rec, default=repr)]
    return "\n".join(lines)


def reproducer(workload_name: str, calls: list, results: list | None = None, findings: list = ()) -> str:
    """Python that rebuilds the case: accepted calls as code, refused ones as comments.

    Without ``results`` (as :func:`tests.fuzz.cases.replay_calls` records them) every call is written as code.
    """
    findings = [f if isinstance(f, Finding) else Finding(f["category"], f["message"], f.get("call_index"))
                for f in findings]
    failed = {f.call_index: f for f in findings if f.call_index is not None}
    lines = ["import numpy as np", "from schedules import Schedule, ScheduleError",
             "from tests.fuzz.check import check", "from tests.fuzz.workloads import WORKLOADS, all_tensors",
             f"wl = WORKLOADS[{workload_name!r}]", "tensors = wl.make()"]
    if any("$tensor" in json.dumps(c) for c in calls):
        lines.append("tensor_named = {t.name: t for t in all_tensors(tensors)}.get")
    lines.append("s = Schedule(tensors)")
    reverts = any(c["op"] == "$revert" for c in calls)
    if reverts:
        lines.append("good = s")
    for n, c in enumerate(calls):
        res = results[n] if results and n < len(results) else "ok"
        if c["op"] == "$revert":
            lines.append("s = good  # back to the last schedule that lowered")
        elif res == "refused":
            lines.append(f"# {call_to_python(c)}  # refused")
        elif res == "failed":
            lines.append(f"{call_to_python(c)}  # <- {failed[n].message[:150] if n in failed else 'fails'}")
            lines.append("# (the case goes on from the schedule before that call)")
        else:
            lines.append(call_to_python(c))
            if res == "ok" and reverts:
                lines.append("good = s")
    lines.append("print(check(wl, s).category, check(wl, s).message)")
    return "\n".join(lines)
