"""The model sections of a report: a tuned model's tasks, its estimated latency, and how tuning lowered it.

Everything comes from the records alone: every record a model task writes (``tensortune
tune-model``) carries ``meta = {"model": file name, "task": id, "weight": occurrences in the
model, ...}``.  Records are grouped by model and target (CPU and threads, as the workload
sections are), and within a model by task id and workload key.  Definitions:

- a task's *best latency* is its best record as a lookup ranks them (confirmed measurements
  first, then the median cost: :attr:`logs.TuningRecord.rank_key`), i.e. the kernel a build
  would use;
- the *estimated model latency* is the sum over tasks of weight x best latency.  It covers the
  tuned kernels only: kernels built with their heuristic start write no record, and the time
  between kernels is not counted;
- the *latency curve* walks the model's records in timestamp order, keeping each task's best so
  far (ranked the same way, so a confirming re-timing at the end of a run replaces the single
  measurement it re-times, and the curve may step up there); it starts once every task has a
  successful measurement, has a point at every trial and at any other record that changes the
  estimate, and ends at the estimated latency.  Its seconds are tuning time and its trials are
  counted as :mod:`tuner.report_trials` defines them, over all the model's tasks.
"""
from __future__ import annotations

from collections import defaultdict

from .report_trials import elapsed_seconds, is_trial, round_sig


def _model_task(rec):
    """``(model, task id)`` of a model task's record, or None for any other record."""
    model, task = rec.meta.get("model"), rec.meta.get("task")
    if isinstance(model, str) and model and isinstance(task, int) and not isinstance(task, bool):
        return model, task
    return None


def _weight(rec) -> int:
    w = rec.meta.get("weight")
    return w if isinstance(w, int) and not isinstance(w, bool) and w >= 1 else 1


def _task_row(recs: list) -> dict:
    """One task's row (``recs``: its records, in timestamp order)."""
    last = recs[-1]
    weight = _weight(last)              # (the latest run's model)
    ok = [r for r in recs if r.ok]
    best = min(ok, key=lambda r: r.rank_key) if ok else None
    latency = best.median_cost if best is not None else None
    flops = last.flops
    return {"task": last.meta["task"], "label": last.workload_label, "key": last.workload_key, "flops": flops,
            "weight": weight, "best_latency_s": round_sig(latency), "confirmed": bool(best and best.confirmed),
            "gflops": round_sig(flops / latency / 1e9) if flops and latency else None,
            "weighted_latency_s": round_sig(weight * latency) if latency is not None else None,
            "trials": sum(1 for r in recs if is_trial(r)), "records": len(recs), "section": None,
            "_latency": latency}


def _latency_curve(recs: list, weights: dict, elapsed: list) -> list:
    """``[trial, seconds, estimated latency]`` points (see the module docstring)."""
    best: dict = {}
    curve, n, last = [], 0, None
    for rec, secs in zip(recs, elapsed):
        key = (rec.meta["task"], rec.workload_key)
        if rec.ok and (key not in best or rec.rank_key < best[key].rank_key):
            best[key] = rec
        trial = is_trial(rec)
        n += trial
        if len(best) < len(weights):
            continue
        est = sum(weights[k] * r.median_cost for k, r in best.items())
        if trial or est != last:
            curve.append([n, round(secs, 3), round_sig(est)])
            last = est
    return curve


def _model_section(model: str, recs: list) -> dict:
    from logs import describe_target, target_key
    recs = sorted(recs, key=lambda r: r.timestamp)       # (stable: log order within a timestamp)
    _, cpu, threads = target_key(recs[0].target)
    by_task = defaultdict(list)
    for r in recs:
        by_task[(r.meta["task"], r.workload_key)].append(r)
    tasks = sorted((_task_row(rs) for rs in by_task.values()), key=lambda t: (t["task"], t["label"], t["key"]))
    measured = all(t["_latency"] is not None for t in tasks)
    total = sum(t["weight"] * t["_latency"] for t in tasks) if measured else None
    for t in tasks:
        lat = t.pop("_latency")
        t["share"] = round_sig(t["weight"] * lat / total, 3) if total else None
    elapsed, runs = elapsed_seconds(recs)
    weights = {(t["task"], t["key"]): t["weight"] for t in tasks}
    curve = _latency_curve(recs, weights, elapsed) if measured else []
    return {"model": model, "target": describe_target(recs[0].target), "cpu": cpu, "threads": threads,
            "tasks": tasks, "estimated_latency_s": round_sig(total), "records": len(recs),
            "trials": sum(t["trials"] for t in tasks), "tuning_seconds": round(elapsed[-1], 1), "runs": runs,
            "curve": curve}


def gather_models(records) -> list:
    """The model sections of ``records`` (any iterable of :class:`logs.TuningRecord`), one per model and target.

    Records without model-task annotations are left out.  Each section is a dict::

        {"model", "target", "cpu", "threads", "estimated_latency_s" (None while a task has no
         successful measurement), "records", "trials", "tuning_seconds", "runs",
         "curve": [[trial, seconds, estimated latency s], ...],
         "tasks": [{"task", "label", "key", "flops", "weight", "best_latency_s", "confirmed", "gflops",
                    "weighted_latency_s", "share", "trials", "records", "section"}, ...]}

    with the tasks sorted by id, the sections by model name and target.  ``section`` is left
    None here (:func:`tuner.report_data.gather` sets it to the index of the task's workload section).
    """
    from logs import describe_target
    groups = defaultdict(list)
    for rec in records:
        mt = _model_task(rec)
        if mt is not None:
            groups[(mt[0], describe_target(rec.target))].append(rec)
    return [_model_section(k[0], groups[k]) for k in sorted(groups)]
