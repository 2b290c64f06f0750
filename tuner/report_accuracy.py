"""How well the cost model ranks one workload's logged schedules (for ``tensortune report``).

The log's trials, in the order they were measured, are replayed and their features
extracted; a fresh :class:`cost_model.CostModel` (its default config and seed, one thread,
so the same log gives the same figure) is trained on the first half and scores the second
half.  The figure is the pairwise ranking accuracy on that second half: of the pairs of
held-out schedules with different measured throughputs, the fraction the model orders
correctly (0.5 is a coin toss).  Training on the earlier trials and testing on the later
ones is what the tuner faces: it ranks new candidates with a model fitted to earlier ones.
"""
from __future__ import annotations

import json
import math

MIN_SAMPLES = 16
"""Fewer replayable trials than this and no accuracy is reported (a half of 8 ranks nothing)."""

MAX_SAMPLES = 512
"""The most recent trials used (features cost a replay and lowering each)."""


def ranking_accuracy(spec, trials: list, min_samples: int = MIN_SAMPLES) -> dict:
    """The cost model's pairwise ranking accuracy on ``trials`` (records in measuring order).

    Parameters
    ----------
    spec : tuner.spec.WorkloadSpec
        The workload the records measured.
    trials : list of logs.TuningRecord
        Its trials (not the repeated or confirming measurements), oldest first.
    min_samples : int
        Fewest distinct replayable schedules needed.

    Returns
    -------
    dict
        ``{"accuracy": float or None, "train": n, "test": n, "note": str}``; accuracy is
        None (and ``note`` says why) when there are too few samples.
    """
    import numpy as np

    from cost_model import CostModel, extract_features, pairwise_accuracy
    from schedules import Schedule

    from .measure import replay_and_lower
    tensors = spec.tensors()
    seen, feats, labels = set(), [], []
    for rec in trials[-MAX_SAMPLES:]:
        key = json.dumps(rec.decisions, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        _, _func, scheduled, failure = replay_and_lower(lambda rec=rec: Schedule.from_json(tensors, rec.trace))
        if failure is not None or scheduled is None:
            continue
        feats.append(extract_features(scheduled))
        labels.append(rec.flops / rec.median_cost / 1e9 if rec.ok and rec.flops else 0.0)
    n = len(feats)
    if n < min_samples:
        return {"accuracy": None, "train": n, "test": 0,
                "note": f"not enough trials: {n} distinct replayable schedules, {min_samples} needed"}
    half = n // 2
    X, y = np.stack(feats), np.asarray(labels)
    model = CostModel()
    model.update(X[:half], y[:half], [spec.key] * half)
    if not model.is_trained:
        model.fit()
    acc = pairwise_accuracy(model.predict(X[half:]), y[half:])
    if math.isnan(acc):   # every held-out schedule measured the same
        return {"accuracy": None, "train": half, "test": n - half,
                "note": "the held-out schedules all measured the same throughput"}
    return {"accuracy": round(float(acc), 4), "train": half, "test": n - half,
            "note": f"trained on the first {half} trials, tested on the last {n - half}"}
