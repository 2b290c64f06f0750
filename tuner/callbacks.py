"""Measure callbacks: what follows each round of a tuning run.

:meth:`tuner.search.Tuner.step` measures one round, tells the study and the run's state, and
then calls each of ``tuner.callbacks`` in order as ``callback(tuner, round)``.  A callback is
any callable of that shape; :data:`DEFAULT_CALLBACKS` is the list a tuner starts with.  A
callback reads and updates ``tuner.state`` (:class:`tuner.state.RunState`), ``tuner.log``,
``tuner.model`` and ``tuner.config``, and keeps no state of its own, so one list can serve
several tuners.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .candidates import Candidate
from .measure import MeasureResult
from .state import decision_key


@dataclass
class Measured:
    """One measurement of a round: the candidate, its result and its log record."""
    candidate: Candidate
    result: MeasureResult
    record: object          # a logs.TuningRecord

    @property
    def gflops(self) -> float:
        """GFLOP/s of the measurement; 0 for a failed one."""
        return self.record.gflops if self.record.ok and self.record.gflops else 0.0


@dataclass
class Round:
    """What one :meth:`~tuner.search.Tuner.step` measured, in the order it was measured and logged."""
    trials: list = field(default_factory=list)    # Measured: the round's new candidates (trials)
    repeats: list = field(default_factory=list)   # Measured: schedules measured again, and the default
    #                                               schedule's one measurement (not trials)
    invalid: list = field(default_factory=list)   # records of asks that gave no legal schedule
    #                                               (logged when they were asked)


MeasureCallback = Callable[[object, Round], None]


def add_to_log(tuner, rnd: Round) -> None:
    """Append the round's measurements to the tuning log: the repeats, then the trials."""
    if tuner.log is not None:
        for m in rnd.repeats + rnd.trials:
            tuner.log.append(m.record)


def update_cost_model(tuner, rnd: Round) -> None:
    """Relabel the schedules measured again with their new estimates; train on the round's trials."""
    model, st = tuner.model, tuner.state
    if model is None:
        return
    for m in rnd.repeats:
        key = decision_key(m.candidate.decisions)
        if key in st.samples:
            model.relabel(st.samples[key], st.estimate(key))
    if rnd.trials:
        keys = [decision_key(m.candidate.decisions) for m in rnd.trials]
        st.samples.update((k, model.n_samples + i) for i, k in enumerate(keys))
        model.update(np.stack([m.candidate.features for m in rnd.trials]), np.array([m.gflops for m in rnd.trials]),
                     [tuner.spec.key] * len(keys))


def remeasure_fastest(tuner, rnd: Round) -> None:
    """Have the run's ``remeasure_top`` fastest schedules (by estimate) measured again beside the
    next round, until each has ``remeasure`` measurements: one measurement on a shared machine is
    noisy, and the fastest of many single measurements is mostly the luckiest."""
    st, cfg = tuner.state, tuner.config
    top = st.ranked(st.contenders)[:cfg.remeasure_top]
    st.due = [st.contenders[k] for k in top if len(st.scores[k][1]) < cfg.remeasure]


def report_progress(tuner, rnd: Round) -> None:
    """Call the tuner's ``progress(event)`` (trials measured, best estimate, errors, elapsed seconds)."""
    tuner.progress(tuner.status())


DEFAULT_CALLBACKS = (add_to_log, update_cost_model, remeasure_fastest, report_progress)
