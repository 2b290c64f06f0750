"""The data of ``tensortune report --html / --format md``: one plain dict per tuned model and per workload and target.

:func:`gather` reads the logs and returns everything the renderers show, as JSON-ready values
in a fixed order (sorted groups, sorted keys, rounded floats), so the same logs give the same
report byte for byte.  Nothing here depends on when or where the report is rendered, except
the machine ceilings, which the caller passes in (``peaks``: from the cache or fixed values).

Trials and tuning time are counted as :mod:`tuner.report_trials` defines them.  Besides:

- *bytes moved* is the compulsory traffic: every input tensor read once and every output
  written once (the cache-blind minimum; a schedule's real traffic is at least this), so the
  arithmetic intensity is an upper bound and the roofline placement optimistic.  Beside it, the
  best schedule's *estimated traffic*: bytes its loop nest moves past a 1 MiB cache, from the cost
  model's features (:func:`estimated_traffic`).
"""
from __future__ import annotations

import json
from collections import Counter

from .report_model import gather_models
# (RUN_GAP_S and is_trial are also read from here, as this module's definitions)
from .report_trials import INVALID_KINDS, RUN_GAP_S, elapsed_seconds, is_trial  # noqa: F401
from .report_trials import round_sig as _r


def _schedule_key(rec) -> str:
    return json.dumps([rec.trace, rec.decisions], sort_keys=True)


def compulsory_bytes(spec) -> int:
    """Bytes of every tensor of the workload list (inputs read once, outputs written once)."""
    import numpy as np
    total = 0
    for t in spec.tensors():
        n = int(np.dtype(t.dtype).itemsize)
        for d in t.shape:
            n *= int(d)
        total += n
    return total


def estimated_traffic(scheduled) -> float:
    """Bytes the loop nest moves past a 1 MiB cache, as the cost model's features estimate them
    (``func.total_traffic_l2``: per store, the footprint of the outermost loop level that fits the
    cache times the iterations around it)."""
    from cost_model import FEATURE_NAMES, extract_features
    value = float(extract_features(scheduled)[FEATURE_NAMES.index("func.total_traffic_l2")])
    return _r(2.0 ** value - 1.0)       # (features hold log2(1 + x))


def _curve(recs: list, elapsed: list) -> list:
    """``[trial, seconds, best GFLOP/s so far]`` per trial."""
    curve, best, n = [], 0.0, 0
    for rec, secs in zip(recs, elapsed):
        if not is_trial(rec):
            continue
        n += 1
        if rec.ok and rec.gflops:
            best = max(best, rec.gflops)
        curve.append([n, round(secs, 3), _r(best)])
    return curve


def _top(recs: list, top: int) -> list:
    ok = sorted((r for r in recs if r.ok), key=lambda r: (r.rank_key, _schedule_key(r)))
    count = Counter(_schedule_key(r) for r in ok)
    origin = {}
    for r in recs:
        if is_trial(r) and r.meta.get("origin"):
            origin.setdefault(_schedule_key(r), str(r.meta["origin"]))
    rows, shown = [], set()
    for r in ok:
        k = _schedule_key(r)
        if k in shown:
            continue
        shown.add(k)
        rows.append({"rank": len(rows) + 1, "latency_s": _r(r.median_cost), "gflops": _r(r.gflops),
                     "confirmed": r.confirmed, "measurements": count[k],
                     "origin": "default schedule" if not r.decisions else origin.get(k, "not recorded"),
                     "decisions": json.dumps(r.decisions, sort_keys=True), "record": r})
        if len(rows) == top:
            break
    return rows


def _numpy_reference(recs: list) -> dict | None:
    refs = [r for r in recs if r.ok and isinstance(r.meta.get("numpy_seconds"), (int, float))
            and r.meta["numpy_seconds"] > 0]
    if not refs:
        return None
    ref = max(refs, key=lambda r: r.timestamp)     # the latest tuning run's comparison
    numpy_s = float(ref.meta["numpy_seconds"])
    return {"numpy_seconds": _r(numpy_s), "tuned_seconds": _r(ref.median_cost),
            "speedup": _r(numpy_s / ref.median_cost, 3)}


def _best_schedule(spec, rec) -> dict:
    """Python, loop nest, speed facts and innermost-loop assembly of the best record's schedule."""
    from schedules import Schedule

    from .asm_view import innermost_loop, kernel_asm
    from .measure import replay_and_lower
    from .report import explain
    sch, func, scheduled, failure = replay_and_lower(lambda: Schedule.from_json(spec.tensors(), rec.trace))
    if failure is not None:
        return {"error": f"the best trace no longer replays here ({failure.error_kind}: {failure.error_msg})"}
    out = {"python": sch.to_python(), "loop_nest": str(func), "facts": explain(scheduled),
           "traffic_bytes": estimated_traffic(scheduled)}
    try:
        out["asm"] = innermost_loop(kernel_asm(func))
    except Exception as err:  # noqa: BLE001 - a report still shows the rest
        out["asm_error"] = f"{type(err).__name__}: {err}"
    return out


def _group_section(key: str, recs: list, top: int, peaks, accuracy: bool) -> dict:
    from logs import describe_target, target_key

    from .report import spec_for
    head = recs[0]
    recs = sorted(recs, key=lambda r: r.timestamp)       # (stable: log order within a timestamp)
    _, cpu, threads = target_key(head.target)
    elapsed, runs = elapsed_seconds(recs)
    trials = [r for r in recs if is_trial(r)]
    origins = Counter(str(r.meta["origin"]) for r in trials if r.meta.get("origin"))
    sec = {"label": head.workload_label, "operator": head.workload_name,
           "params": ({} if head.workload_name.startswith("expr:")   # (the whole expression)
                      else {k: head.workload_params[k] for k in head.workload_params}), "key": key,
           "target": describe_target(head.target), "cpu": cpu, "threads": threads,
           "flops": head.flops, "records": len(recs), "trials": len(trials),
           "invalid": sum(1 for r in recs if str(r.error_kind) in INVALID_KINDS),
           "errors": dict(sorted(Counter(str(r.error_kind) for r in recs if not r.ok).items())),
           "origins": dict(sorted(origins.items())) or None,
           "tuning_seconds": round(elapsed[-1], 1) if elapsed else 0.0, "runs": runs,
           "curve": _curve(recs, elapsed), "numpy": _numpy_reference(recs)}
    rows = _top(recs, top)
    sec["top"] = [{k: v for k, v in row.items() if k != "record"} for row in rows]
    spec = spec_for(head)
    best = rows[0]["record"] if rows else None
    sec["best"] = None if best is None else {"latency_s": _r(best.median_cost), "gflops": _r(best.gflops),
                                             "confirmed": best.confirmed}
    peak = peaks(cpu, threads) if peaks is not None and threads else None
    sec["peak"] = None if peak is None else {"gflops": _r(peak.peak_gflops), "bandwidth_gbs": _r(peak.bandwidth_gbs),
                                             "source": peak.source}
    if spec is None:
        sec["unavailable"] = "the workload cannot be rebuilt here (a file that is missing, or unknown parameters)"
        return sec
    sec["flops"] = spec.flops
    nbytes = compulsory_bytes(spec)
    sec["bytes"] = nbytes
    sec["intensity"] = _r(spec.flops / nbytes) if nbytes else None
    if best is not None:
        gflops = spec.flops / best.median_cost / 1e9
        sec["best"]["gflops"] = _r(gflops)
        sec["best"]["gbs"] = _r(nbytes / best.median_cost / 1e9)
        if peak is not None:
            sec["best"]["fraction_of_peak"] = _r(gflops / peak.peak_gflops, 3)
            sec["best"]["fraction_of_bandwidth"] = _r(nbytes / best.median_cost / 1e9 / peak.bandwidth_gbs, 3)
        sec["schedule"] = _best_schedule(spec, best)
        traffic = sec["schedule"].get("traffic_bytes")
        if traffic:
            sec["intensity_estimated"] = _r(spec.flops / traffic)
    if accuracy:
        from .report_accuracy import ranking_accuracy
        sec["cost_model"] = ranking_accuracy(spec, trials)
    return sec


def gather(log_paths, workload: str | None = None, params=(), top: int = 5, peaks=None,
           accuracy: bool = True) -> dict:
    """Everything a report shows, per workload and target.

    Parameters
    ----------
    log_paths : list of path
        Logs to read (records of every log are pooled).
    workload, params : str, list of str
        Only this workload (as ``tensortune tune`` takes it), or every workload when None.
    top : int
        Schedules listed per workload.
    peaks : callable ``(cpu, threads) -> tuner.machine_peak.MachinePeak or None``, optional
        The machine ceilings to compare with (None: no comparison).
    accuracy : bool
        Compute the cost model's ranking accuracy (trains a model: seconds on big logs).

    Returns
    -------
    dict
        ``{"logs": [str], "models": [dict, ...], "sections": [dict, ...]}``: sections sorted by workload
        label, target and key; models (:func:`tuner.report_model.gather_models`) sorted by model file
        name and target, each task's ``section`` the index of its workload's section (only without
        ``workload``: a model section covers all the model's workloads).

    Raises
    ------
    tuner.spec.SpecError
        If ``workload`` and ``params`` name no valid workload.
    """
    from .report import group_records
    paths = [str(p) for p in log_paths]
    groups = group_records(paths, workload, params)
    order = sorted(groups, key=lambda k: (groups[k][0].workload_label, k[1], k[0]))
    models = [] if workload else gather_models(r for recs in groups.values() for r in recs)
    where = {k: i for i, k in enumerate(order)}
    for model in models:
        for task in model["tasks"]:
            task["section"] = where.get((task["key"], model["target"]))
    return {"logs": paths, "workload": workload, "params": list(params), "models": models,
            "sections": [_group_section(k[0], groups[k], top, peaks, accuracy) for k in order]}
