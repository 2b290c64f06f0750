"""A sampler that reads a shared study's trials once per ask.

Optuna's TPE sampler with ``constant_liar`` reads every trial again (it must see the running ones)
for each group of parameters it samples, and the group decomposition reads them once more: on a
database several processes share, that is several reads of every unfinished trial per ask, and
it made asking, not measuring, most of a worker's time (a profile of a model worker: 7 reads and
~0.5 s per ask).  :class:`SnapshotSampler` hands the wrapped sampler a view of the study whose
trials are read once per asked trial; within one ask the others' trials hardly change, and the
trial being asked is left out of the model anyway.  Claims and tallies (:mod:`tuner.lease`) read
the study itself, never this view.
"""
from __future__ import annotations

import copy

import optuna


class _Snapshot:
    """The study, but ``get_trials`` answers from ``trials`` (read once)."""

    def __init__(self, study, trials: list):
        self._study = study
        self._snapshot = trials

    def __getattr__(self, name):
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states=None, use_cache: bool = False) -> list:
        trials = self._snapshot if states is None else [t for t in self._snapshot if t.state in states]
        return copy.deepcopy(trials) if deepcopy else trials

    def get_trials(self, deepcopy: bool = True, states=None) -> list:
        return self._get_trials(deepcopy, states)

    @property
    def trials(self) -> list:
        return self._get_trials(True)


class SnapshotSampler(optuna.samplers.BaseSampler):
    """``inner`` (an Optuna sampler) sampling from one read of the study's trials per asked trial."""

    def __init__(self, inner):
        self.inner = inner
        self._for = None        # (study id, trial number) the snapshot was read for
        self._trials = None

    def _view(self, study, trial):
        key = (study._study_id, trial.number)
        if key != self._for:
            self._trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            self._for = key
        return _Snapshot(study, self._trials)

    def infer_relative_search_space(self, study, trial):
        return self.inner.infer_relative_search_space(self._view(study, trial), trial)

    def sample_relative(self, study, trial, search_space):
        return self.inner.sample_relative(self._view(study, trial), trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.inner.sample_independent(self._view(study, trial), trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self.inner.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.inner.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
