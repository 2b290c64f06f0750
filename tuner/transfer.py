"""Transfer: a new workload's cost model starts from the other workloads' records in the log."""
from __future__ import annotations

import numpy as np

from .spec import WorkloadSpec


def pretrain_from_log(model, log, exclude_key: str, target: dict, limit: int = 256) -> int:
    """Transfer: train ``model`` on other workloads' records in ``log`` (same CPU;
    docs/decisions/003-transfer-learning-from-the-per-user-log.md).

    Up to ``limit`` records, taken in turn from each other workload (newest
    first within each), so one long-tuned workload does not crowd out the rest.
    Each record's trace is replayed on its own workload (rebuilt from its name
    and parameters) and lowered to features; records that cannot be rebuilt
    are skipped.  Returns the number of samples added.
    """
    if log is None:
        return 0
    from cost_model import extract_features
    from logs import target_key
    from schedules import Schedule
    from schedules.lowering import SCHEDULED
    want = target_key(target)[:2]
    by_workload: dict = {}
    for rec in reversed(log.read(warn=False).records):   # (the run already warned about skipped lines)
        if rec.workload_key != exclude_key and target_key(rec.target)[:2] == want and rec.trace.get("instructions") \
                and not rec.model_choice:     # (timed inside a model, not as kernels are)
            by_workload.setdefault(rec.workload_key, []).append(rec)
    # round robin: every workload's newest record, then every workload's second newest, ...
    turns = sorted(((i, rec) for recs in by_workload.values() for i, rec in enumerate(recs)), key=lambda t: t[0])
    feats, thr, groups, specs = [], [], [], {}
    for _, rec in turns:
        if len(feats) >= limit:
            break
        spec = specs.get(rec.workload_key)
        try:
            if spec is None:
                spec = specs[rec.workload_key] = WorkloadSpec(rec.workload_name, dict(rec.workload_params))
            func = Schedule.from_json(spec.tensors(), rec.trace).lower(until=SCHEDULED)
        except Exception:  # noqa: BLE001 - an old or foreign record only loses its transfer value
            continue
        feats.append(extract_features(func))
        thr.append(rec.gflops if rec.ok and rec.gflops else 0.0)
        groups.append(rec.workload_key)
    if feats:
        model.pretrain(np.stack(feats), np.array(thr), groups)
    return len(feats)
