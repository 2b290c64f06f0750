"""What a tuning run knows of the schedules it has measured: their keys, estimates and counts."""
from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass, field

PARENTS = 8         # mutants are made from this many of the best measured schedules


def decision_key(decisions: dict) -> str:
    return json.dumps(decisions, sort_keys=True, default=str)


def estimates(records: list) -> dict:
    """{decision key: (decisions, GFLOP/s)} of the distinct schedules in ``records``, in order of first appearance.

    A schedule measured several times (re-measured while tuning, confirmed at
    the end) counts once, at the median of its successful measurements; one
    that never succeeded at 0.
    """
    out: dict = {}
    for rec in records:
        ok = rec.gflops if rec.ok and rec.gflops else None
        out.setdefault(decision_key(rec.decisions), (rec.decisions, []))[1].extend([ok] if ok else [])
    return {k: (d, statistics.median(g) if g else 0.0) for k, (d, g) in out.items()}


@dataclass
class RunState:
    """What a run has seen and measured.

    Shared by the tuner's rounds, their callbacks and the asking thread.  The asking thread
    works while a round is started and measured, reads ``seen`` and updates only what asking
    changes (``fresh``, ``seen_funcs``, ``asked``, ``invalid``, ``errors``, ``stale``); it is
    done before the round is told.
    """
    seen: set                                   # decision keys measured (this run or the log)
    fresh: set = field(default_factory=set)     # decision keys picked or pooled, not yet measured
    seen_funcs: set = field(default_factory=set)  # loop nests measured or pooled in this run
    errors: Counter = field(default_factory=Counter)
    invalid: int = 0
    asked: int = 0
    stale: int = 0                              # consecutive asks that brought nothing new
    scores: dict = field(default_factory=dict)  # decision key -> (decisions, [GFLOP/s of each measurement])
    mutants: int = 0                            # mutants measured
    arms: dict = field(default_factory=dict)    # arm -> [measured, beat the best at their round's start]
    remeasured: int = 0                         # repeated measurements
    measured: int = 0                           # trials measured in this run
    best: object = None                         # the TuningRecord a lookup in the log would now pick
    history: list = field(default_factory=list)   # (measured, seconds since start, GFLOP/s, best estimate)
    contenders: dict = field(default_factory=dict)  # decision key -> this run's successfully measured Candidate
    due: list = field(default_factory=list)     # candidates to measure again beside the next round's
    samples: dict = field(default_factory=dict)   # decision key -> its sample's row in the cost model

    def add_score(self, gflops: float, decisions: dict) -> str:
        key = decision_key(decisions)
        self.scores.setdefault(key, (dict(decisions), []))[1].append(gflops)
        return key

    def estimate(self, key: str) -> float:
        """A schedule's GFLOP/s: the median of its measurements."""
        return statistics.median(self.scores[key][1])

    def ranked(self, keys=None) -> list:
        """Decision keys (of ``keys``, default all), fastest estimate first."""
        return sorted(self.scores if keys is None else keys, key=lambda k: -self.estimate(k))

    def best_estimate(self) -> float:
        return max((self.estimate(k) for k in self.scores), default=0.0)

    @property
    def parents(self) -> list:
        """(GFLOP/s, decisions) of the ``PARENTS`` fastest schedules by estimate (not the default schedule)."""
        return [(self.estimate(k), self.scores[k][0]) for k in self.ranked() if self.scores[k][0]][:PARENTS]
