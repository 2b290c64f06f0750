"""``tensortune report``: what the tuning logs hold, and why the best schedules are fast."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

from tensorir.tir.ir import Allocate, For, ForKind, Scope, walk_stmts

# who chose the measured candidates (TuneResult.arms, and each trial's record meta "origin")
ARMS = {"unranked": "Optuna unscreened", "sampler": "Optuna's first asks",
        "model:ask": "the cost model's picks among Optuna's asks", "model:mutant": "the cost model's picks among mutants",
        "stand-in": "mutants standing in for repeated asks"}


def explain(func) -> list:
    """Short facts about a lowered kernel that explain its speed."""
    facts = []
    loops = [s for s in walk_stmts(func.body) if isinstance(s, For)]
    par = sorted({s.extent for s in loops if s.kind is ForKind.PARALLEL})
    vec = sorted({s.extent for s in loops if s.kind is ForKind.VECTORIZED})
    unr = sorted({s.extent for s in loops if s.kind is ForKind.UNROLLED})
    facts.append(f"parallel loops over {par} iterations" if par else "single-threaded (no parallel loop)")
    facts.append(f"SIMD: {'/'.join(map(str, vec))}-lane vectorized inner loops" if vec else "no vectorized loop")
    if unr:
        facts.append(f"unrolled loops of extent {unr}")
    for s in walk_stmts(func.body):
        if isinstance(s, Allocate):
            shape = "x".join(map(str, s.buffer.shape))
            if s.buffer.scope is Scope.LOCAL:
                facts.append(f"tile {s.buffer.name} [{shape}] computed per iteration ({s.buffer.nbytes} B, "
                             "registers/L1)")
            elif s.buffer.name.endswith("_pack"):
                facts.append(f"packed copy {s.buffer.name} [{shape}] so inner loops read contiguous memory")
            else:
                facts.append(f"intermediate {s.buffer.name} [{shape}] in memory")
    return facts


def format_latency(seconds: float) -> str:
    """A kernel latency in s, ms (down to 0.1 ms) or us, with at least three significant digits."""
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-4:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


MODEL_HEADER = ("ID", "task", "FLOP", "weight", "GFLOP/s", "best latency", "weighted latency", "share", "trials")


def model_rows(model: dict) -> list:
    """Rows (tuples of str, as :data:`MODEL_HEADER`) of a model section's task table
    (:func:`tuner.report_model.gather_models`)."""
    def lat(x):
        return format_latency(x) if x is not None else "-"
    return [(str(t["task"]), t["label"], f"{t['flops']:.3g}" if t["flops"] is not None else "-", str(t["weight"]),
             f"{t['gflops']:g}" if t["gflops"] else "-", lat(t["best_latency_s"]), lat(t["weighted_latency_s"]),
             f"{100 * t['share']:.1f}%" if t["share"] is not None else "-", str(t["trials"]))
            for t in model["tasks"]]


def model_summary(model: dict) -> str:
    """One line: the estimated latency of a model section, its tasks, trials and tuning time."""
    n = len(model["tasks"])
    est = model["estimated_latency_s"]
    head = (f"estimated latency {format_latency(est)} (sum of weight x best latency over the tuned kernels)"
            if est is not None else "estimated latency unknown (a task has no successful measurement)")
    runs = model["runs"]
    return (f"{head}; {n} tuned task{'s' if n != 1 else ''}, {model['trials']} trials, "
            f"{model['tuning_seconds']:.1f} s of tuning in {runs} run{'s' if runs != 1 else ''}")


def curve_summary(curve: list) -> str:
    """The first and last points of a model's latency curve, in words."""
    if not curve:
        return "no latency curve: a task has no successful measurement"
    (n0, s0, l0), (n1, s1, l1) = curve[0], curve[-1]
    return (f"estimated latency {format_latency(l0)} after {n0} trials ({s0:.1f} s) -> "
            f"{format_latency(l1)} after {n1} trials ({s1:.1f} s)")


def _model_block(model: dict) -> list:
    rows = [MODEL_HEADER] + [r + (t["key"][:12],) for r, t in zip(model_rows(model), model["tasks"])]
    rows[0] = rows[0] + ("workload key",)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    left = {1}                                      # the task label; numbers align right
    out = [f"== model {model['model']} on {model['target']}", "   " + model_summary(model)]
    for r in rows:
        out.append("   " + "  ".join(c.ljust(w) if i in left or i == len(r) - 1 else c.rjust(w)
                                     for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    out.append("   latency curve: " + curve_summary(model["curve"]))
    return out


def spec_for(rec):
    """The workload of record ``rec`` if it can be rebuilt here, else None."""
    from .spec import SpecError, WorkloadSpec
    try:
        spec = WorkloadSpec(rec.workload_name, dict(rec.workload_params))
        spec.tensors()
        return spec
    except (SpecError, ValueError, TypeError, KeyError, OSError):
        return None


def group_records(paths, workload: str | None = None, params=()) -> dict:
    """``{(workload key, target description): [records]}`` of the logs at ``paths``, pooled; only
    ``workload`` with ``params`` (as ``tensortune tune`` takes them) when given.  Raises
    :class:`tuner.spec.SpecError` if they name no valid workload."""
    from logs import TuningLog, describe_target

    from .spec import WorkloadSpec
    want_key = WorkloadSpec.parse(workload, list(params)).key if workload else None
    groups = defaultdict(list)
    for path in paths:
        for rec in TuningLog(path, mode="r").records():
            if want_key is None or rec.workload_key == want_key:
                groups[(rec.workload_key, describe_target(rec.target))].append(rec)
    return groups


def report(log_paths=None, workload: str | None = None, params=(), top: int = 3, show_nest: bool = False) -> str:
    """The report as text: per tuned model its tasks and estimated latency, then per workload and
    machine the best schedules and why they are fast.

    Raises :class:`tuner.spec.SpecError` (one line) if ``workload`` and ``params`` name no valid workload.
    """
    from logs import default_log_paths
    from schedules import Schedule
    from schedules.errors import ScheduleError
    from schedules.lowering import SCHEDULED

    paths = [str(p) for p in (log_paths or default_log_paths())]
    groups = group_records(paths, workload, params)
    if not groups:
        where = ", ".join(paths) or "(no log)"
        what = f" for {workload} {' '.join(params)}".rstrip() if workload else ""
        return f"no tuning records{what} in {where}"
    out = []
    if not workload:                     # a model's section covers all its workloads
        from .report_model import gather_models
        for model in gather_models(r for recs in groups.values() for r in recs):
            out += _model_block(model) + [""]
    for (key, target), recs in sorted(groups.items(), key=lambda kv: kv[1][0].workload_label):
        ok = [r for r in recs if r.ok]
        errs = Counter(str(r.error_kind) for r in recs if not r.ok)
        head = recs[0]
        out.append(f"== {head.workload_label}  key {key[:12]}  on {target}")
        out.append(f"   {len(recs)} records: {len(ok)} ok" + (f", errors {dict(errs)}" if errs else ""))
        best, shown = [], set()
        for r in sorted(ok, key=lambda r: r.rank_key):     # each schedule once, by its best measurement
            sched = json.dumps([r.trace, r.decisions], sort_keys=True)
            if sched not in shown and len(best) < top:
                shown.add(sched)
                best.append(r)
        for rank, r in enumerate(best, 1):
            gf = f"{r.gflops:8.1f} GFLOP/s" if r.gflops else "         -"
            how = "confirmed" if r.confirmed else "measured"
            out.append(f"   #{rank} {format_latency(r.median_cost):>12} {gf}   {how} {r.timestamp}")
        if not best:
            continue
        spec = spec_for(best[0])
        if spec is None:
            out.append("   (workload cannot be rebuilt here; trace instructions:)")
            for inst in best[0].trace.get("instructions", []):
                out.append(f"     {inst}")
            continue
        try:
            sch = Schedule.from_json(spec.tensors(), best[0].trace)
            func = sch.lower(until=SCHEDULED)     # the schedule's nest, before codegen's passes
        except ScheduleError as err:
            out.append(f"   best trace no longer replays: {err}")
            continue
        out.append("   why it is fast: " + "; ".join(explain(func)))
        out.append("   schedule:")
        out.extend("     " + line for line in sch.to_python().splitlines())
        if show_nest:
            out.append("   loop nest:")
            out.extend("     " + line for line in str(func).splitlines())
    return "\n".join(out)
