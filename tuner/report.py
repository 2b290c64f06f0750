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
    """The report as text: per workload and machine, the best schedules and why they are fast.

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
