"""The task table of whole-model tuning (after MetaSchedule's), refreshed after every round."""
from __future__ import annotations

import math
import sys


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f}" if math.isfinite(seconds) else "-"


def task_rows(scheduler, model_tasks: list) -> list:
    """One dict per model task: id, name, FLOP, weight, GFLOP/s, latency, weighted latency, trials, state."""
    by_spec = {id(st.task.spec): st for st in scheduler.states}
    rows = []
    for mt in model_tasks:
        st = by_spec.get(id(mt.spec))
        latency = st.latency if st is not None else math.nan
        gflops = mt.flops / latency / 1e9 if st is not None and math.isfinite(latency) and latency > 0 else None
        if st is None:
            state = "heuristic" if not mt.tuned else "not selected"
        elif st.dead:
            state = "done"
        else:
            state = "tuning" if st.rounds else "waiting"
        rows.append({"id": mt.index, "name": mt.label, "flop": mt.flops, "weight": mt.weight,
                     "gflops": gflops, "latency_s": latency if st is not None else None,
                     "weighted_latency_s": mt.weight * latency if st is not None else None,
                     "trials": st.trials if st is not None else 0, "state": state,
                     "stopped": st.dead if st is not None else mt.why_not or None})
    return rows


def format_table(scheduler, model_tasks: list, elapsed: float) -> str:
    rows = task_rows(scheduler, model_tasks)
    head = (f"{'ID':>3} | {'Name':<34} | {'FLOP':>9} | {'Weight':>6} | {'GFLOP/s':>8} | "
            f"{'Latency (us)':>12} | {'Weighted (us)':>13} | {'Trials':>6} | State")
    lines = [head, "-" * len(head)]
    for r in rows:
        gf = f"{r['gflops']:.1f}" if r["gflops"] else "-"
        lat = _us(r["latency_s"]) if r["latency_s"] is not None else "-"
        wlat = _us(r["weighted_latency_s"]) if r["weighted_latency_s"] is not None else "-"
        name = r["name"] if len(r["name"]) <= 34 else r["name"][:31] + "..."
        lines.append(f"{r['id']:>3} | {name:<34} | {r['flop']:>9.3g} | {r['weight']:>6} | {gf:>8} | "
                     f"{lat:>12} | {wlat:>13} | {r['trials']:>6} | {r['state']}")
    est = scheduler.estimated_latency()
    lines.append(f"Estimated latency of the tuned kernels: {_us(est)} us | trials {scheduler.trials}/"
                 f"{scheduler.config.trials} | {elapsed:.0f} s")
    return "\n".join(lines)


class TableProgress:
    """Prints the task table to stderr after every round (a scheduler ``progress`` callback)."""

    def __init__(self, model_tasks: list, enabled: bool = True, stream=None):
        self.model_tasks, self.enabled = model_tasks, enabled
        self.stream = stream or sys.stderr

    def __call__(self, scheduler, index: int) -> None:
        if not self.enabled:
            return
        import time
        elapsed = time.perf_counter() - scheduler.started
        print(format_table(scheduler, self.model_tasks, elapsed), file=self.stream, flush=True)
        print(file=self.stream, flush=True)
