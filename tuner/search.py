"""The tuning loop: Optuna proposes, the cost model screens, the chosen candidates are measured.

A :class:`Tuner` works in rounds.  :meth:`Tuner.step` does one: ask the study for a batch
(prepared in a thread while the previous round compiled, :mod:`tuner.screening`), screen it
with the cost model, measure it beside the schedules due to be measured again, tell the study
and the run's state (:mod:`tuner.state`), then call the measure callbacks (:mod:`tuner.callbacks`:
log, cost model, remeasuring, progress).  :meth:`Tuner.run` steps until the run is over, then
re-times its fastest schedules side by side (the finalists), whose *confirmed* measurements
lookups rank first.  :func:`drive` steps several tuners in turn, one round each.

Optuna is told every measured trial's GFLOP/s (0 for a failed candidate) and ``FAIL`` for an
ask that is not measured, because its samplers model COMPLETE trials only: a withdrawn ask
never enters them with a made-up value.  Schedules are ranked by estimates, the median of
their measurements, not by single measurements; Optuna keeps each trial's first measurement
(a finished trial cannot be re-told).
"""
from __future__ import annotations

import math
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from logs import TuningLog, TuningRecord
from schedules.decisions import FixedDecisions
from schedules.space import GeneratedSpace
from schedules.errors import ScheduleError

from .callbacks import DEFAULT_CALLBACKS, Measured, Round
from .candidates import Candidates
from .measure import MeasureConfig, MeasureResult, Measurer
from .prepack import constant_indices
from .screening import Asker, Screening
from .spec import WorkloadSpec
from .state import RunState, decision_key, estimates
from .study import SAMPLERS, StorageError, add_trial, make_sampler, open_study, study_name, write_back  # noqa: F401
from .target import host_target
from .transfer import pretrain_from_log


@dataclass
class TuneConfig:
    """How a tuning run searches.  Defaults suit a 64-trial run on a few cores."""
    trials: int = 64                 # measured candidates (invalid ones are not counted)
    batch_size: int = 8              # candidates measured per round
    # why asks are screened, 3 per measurement, a quarter unscreened: docs/decisions/001-search-policy-model-screens-tpe-asks.md
    asks_per_measure: int = 3        # sampler asks per measured candidate, once the model ranks them
    mutants_per_measure: int = 0     # variants of the best measured schedules per measured candidate
    epsilon: float = 0.25            # share of each batch measured in the sampler's order (exploration)
    sampler: str = "tpe"
    seed: int = 0
    cost_model: bool = True
    timeout_s: float | None = None   # stop starting new rounds after this many seconds
    seed_heuristic: bool = True      # first trial: the heuristic start (docs/decisions/009-heuristic-first-trial.md)
    # The model ranks candidates once trained on this many samples (own or transfer); before, the
    # sampler's asks alone are measured: a model ranking from its first few samples searched worse
    # (why: docs/decisions/002-cost-model-warmup-24-samples.md).
    model_warmup: int = 24
    # why re-measure and re-time: docs/decisions/006-remeasure-and-retime-finalists.md
    finalists: int = 4               # fastest schedules re-timed side by side at the end (0: off)
    remeasure_top: int = 4           # the run's fastest schedules (by estimate) are measured again ...
    remeasure: int = 3               # ... until each has this many measurements (1: off)
    final_rounds: int = 3            # interleaved rounds of that re-timing
    threads: int | None = None       # kernel threads (None: all cores)
    # inputs whose values are fixed (weights): their packs are timed outside the kernel (tuner.prepack)
    constants: tuple = ()
    # 3 repeats of >= 25 ms rank candidates reliably; reported figures are re-timed side by side
    measure: MeasureConfig = field(default_factory=lambda: MeasureConfig(repeat=3, min_repeat_ms=25.0))


@dataclass
class TuneResult:
    spec: WorkloadSpec
    best: TuningRecord | None
    trials: int                      # measured in this run
    resumed: int                     # records already in the log for this workload/target
    errors: Counter
    invalid: int                     # candidates whose decisions gave no legal schedule
    asked: int
    history: list                    # (measured index, seconds since start, gflops, best so far)
    tune_seconds: float
    log: str | None
    stop_reason: str | None = None   # why fewer than the requested trials were measured
    mutants: int = 0                 # measured mutants (model picks, or stand-ins for repeated asks)
    finalists: list = field(default_factory=list)  # (GFLOP/s while tuning, confirmed GFLOP/s), final order
    remeasured: int = 0              # repeated measurements of the fastest schedules (not trials)
    arms: dict = field(default_factory=dict)  # who chose the measured candidates: arm -> [measured, new bests]

    @property
    def best_gflops(self) -> float:
        return self.best.gflops if self.best is not None and self.best.gflops else 0.0

    @property
    def best_latency_s(self) -> float | None:
        return self.best.median_cost if self.best is not None else None

    def time_to_fraction(self, fraction: float = 0.9):
        """(trials, seconds) at which the run first reached ``fraction`` of its final best."""
        if not self.history:
            return None
        goal = fraction * self.history[-1][3]
        for n, secs, _, best in self.history:
            if best >= goal and goal > 0:
                return n, secs
        return None


START_MARGIN = 0.03
"""How much faster than the heuristic start a contender must run in the final re-timing to replace it
(docs/decisions/036-the-start-keeps-its-place-within-noise.md)."""
STALE_ASKS = 96     # consecutive proposals with nothing new before a space counts as exhausted


def _import_xgboost() -> None:
    try:
        import xgboost  # noqa: F401
    except ImportError:  # the model reports it when it first trains
        pass


def drive(tuners: list) -> list:
    """Run ``tuners`` to the end, one round of each in turn; their :class:`TuneResult`, in order.

    One tuner is a plain tuning run (:meth:`Tuner.run`); several interleave their rounds, as a
    task scheduler would (each has its own measurer, study and cost model; a shared log receives
    their rounds in turn).
    """
    started = []
    try:
        for tuner in tuners:
            started.append(tuner.start())
        active = list(tuners)
        while active:
            active = [tuner for tuner in active if tuner.step() is not None]
    except BaseException:
        for tuner in started:
            tuner.close()
        raise
    results = []
    try:
        for tuner in tuners:
            results.append(tuner.finish())
    except BaseException:
        for tuner in tuners[len(results) + 1:]:
            tuner.close()
        raise
    return results


class Tuner:
    """Tune one workload: :meth:`run`, or :meth:`start`, :meth:`step` until it returns None, :meth:`finish`.

    ``progress(event: dict)`` is called after every round (by the ``report_progress`` callback)
    and once more when the finalists are confirmed.  ``callbacks`` replaces the measure callbacks
    called after every round (default :data:`tuner.callbacks.DEFAULT_CALLBACKS`).
    """

    def __init__(self, spec: WorkloadSpec, config: TuneConfig | None = None, log: TuningLog | None = None,
                 storage: str | None = None, model_path=None, progress=None, space=None, callbacks=None):
        self.spec = spec
        self.config = config or TuneConfig()
        self.log = log
        self.storage = storage
        self.model_path = model_path
        self.progress = progress or (lambda event: None)
        self.callbacks = list(DEFAULT_CALLBACKS if callbacks is None else callbacks)
        if self.config.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.config.sampler!r}; choose one of {', '.join(SAMPLERS)}")
        self.target = host_target(self.config.threads)
        # a hand-written KnobSpace, or the space generated from the tensor expression
        self.space = space if space is not None else GeneratedSpace(spec.tensors())
        self.candidates = Candidates(spec, self.space, self.target,
                                     constant_indices(spec.tensors(), self.config.constants))
        self.screening = Screening(self.config)
        self.mutation_rng = random.Random(self.config.seed)  # mutants (the asking thread, one at a time)
        # set by start()
        self.state: RunState | None = None
        self.study = None
        self.model = None         # the cost model (None: --no-cost-model)
        self.measurer = None
        self.started = None       # time.perf_counter() at start()
        self.stop_reason = None   # why the run stopped before its trials
        self.finalists = []       # (GFLOP/s while tuning, confirmed GFLOP/s), once confirmed
        self._resumed = 0
        self._earlier_best = None  # the log's best when the run started
        self._baseline = None     # the default schedule, until it is measured
        self._ahead = None        # the next round's Asker, working while this round compiles
        self._ready = None        # its candidates, once taken
        self._importing = None    # the background import of xgboost, until the first timing
        self._mirror = None       # a SQLite study that the in-memory one is written back to
        self._synced = set()      # numbers of the in-memory trials it already holds

    # --------------------------------------------------------------- setup
    def study_name(self) -> str:
        """The name of this run's study: workload key, target fingerprint, sampler and space."""
        tag = "generated" if isinstance(self.space, GeneratedSpace) else \
            f"knobs-{getattr(getattr(self.space, 'fn', None), '__name__', 'custom')}"
        if self.config.constants:   # timed with these packed outside the kernel: a study of its own
            tag += "-prepacked-" + ",".join(sorted(self.config.constants))
            if self.config.measure.flush_cache:     # ... and evicted before each call (decision 031)
                tag += "-cold"
        return study_name(self.spec.key, self.target, self.config.sampler, tag)

    def _study(self, previous: list):
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = make_sampler(self.config.sampler, self.config.seed)
        study, self._mirror = open_study(self.storage, self.study_name(), sampler)
        self._synced = {t.number for t in study.trials}
        fresh = not study.trials
        if fresh or self._mirror is not None:
            # (a stored SQLite study may lack the last measurements of a run killed before it wrote back)
            self._warm_start_study(study, previous)
        if fresh and self.config.seed_heuristic:
            try:
                heuristic = self._as_params(self.space.default_decisions())
            except Exception as err:  # noqa: BLE001 - a space bug must not sink the run: search without it
                import warnings
                warnings.warn(f"the search space's heuristic starting point failed ({type(err).__name__}: "
                              f"{err}); searching without it", RuntimeWarning, stacklevel=2)
            else:
                study.enqueue_trial(heuristic, skip_if_exists=True)
        return study

    def _start_decisions(self) -> dict | None:
        """The space's heuristic start (the first trial of a fresh run), None if the space cannot give one."""
        try:
            return self.space.default_decisions()
        except Exception:  # noqa: BLE001 - as in _study: a space bug must not sink the run
            return None

    def _as_params(self, decisions: dict) -> dict:
        """Decision values -> the integer indices Optuna samples."""
        src = FixedDecisions(decisions)
        self.space.apply(src)
        return {k: src.choices[k].index(v) for k, v in src.decisions.items()}

    def _warm_start_study(self, study, previous: list) -> None:
        """Add the logged measurements that ``study`` lacks as completed trials."""
        have = {tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False)}
        for decisions, gflops in estimates(previous).values():
            try:
                src = FixedDecisions(decisions, strict=True)
                self.space.apply(src)
            except (ScheduleError, ValueError):
                continue  # recorded by an older space: the log still serves lookups
            if tuple(sorted((k, src.choices[k].index(v)) for k, v in src.decisions.items())) not in have:
                add_trial(study, src.decisions, src.choices, gflops)

    def _cost_model(self, previous: list):
        if not self.config.cost_model:
            return None
        # xgboost (and scikit-learn under it) take seconds to import: do it while the first round
        # compiles, and finish it before the first kernel is timed, as an import beside a timed
        # kernel slows it down
        self._importing = threading.Thread(target=_import_xgboost, daemon=True)
        self._importing.start()
        from cost_model import CostModel
        model = None
        if self.model_path is not None:
            try:
                model = CostModel.load(self.model_path)   # trained on earlier workloads: transfer
                model.treat_as_pretraining(self.spec.key)
            except (OSError, ValueError, KeyError):
                model = None
        if model is None:
            model = CostModel()
            pretrain_from_log(model, self.log, self.spec.key, self.target)
        feats, thr = [], []
        for decisions, gflops in [e for e in estimates(previous).values() if e[0]][-512:]:   # (not the default)
            c = self.candidates.prepare(None, decisions)
            if c.features is not None:
                feats.append(c.features)
                thr.append(gflops)
        if feats:
            model.update(np.stack(feats), np.array(thr), [self.spec.key] * len(feats))
        return model

    def _quiet_hook(self, nxt):
        """What ``measure`` calls just before timing: finish the xgboost import, pause the next asks."""
        importing, self._importing = self._importing, None

        def hook():
            if importing is not None:
                importing.join()
            if nxt is not None:
                nxt.pause()
        return hook

    def _best_replayable(self, records: list):
        """The fastest successful record whose trace replays on this run's tensors (see :func:`logs.replay`)."""
        from logs.apply import replay
        tensors = self.spec.tensors()
        return next((r for r in sorted((r for r in records if r.ok), key=lambda r: r.rank_key)
                     if replay(tensors, r) is not None), None)

    # ------------------------------------------------------------ the run
    def run(self) -> TuneResult:
        """Tune to the end: :meth:`start`, :meth:`step` until the run is over, :meth:`finish`."""
        return drive([self])[0]

    def start(self) -> Tuner:
        """Read the log, open the study and the cost model, start the measurer's workers."""
        self.started = time.perf_counter()
        previous = self.log.for_workload(self.spec.key, self.target) if self.log is not None else []
        # (a model's choice is timed inside a model, not as the search times kernels: not a trial)
        previous = [r for r in previous if not r.model_choice]
        st = self.state = RunState(seen={decision_key(r.decisions) for r in previous})
        for r in previous:
            if r.ok and r.gflops:
                st.add_score(r.gflops, r.decisions)
        self._resumed = len(previous)
        self.study = self._study(previous)
        self.model = self._cost_model(previous)
        st.best = self._earlier_best = self._best_replayable(previous)
        # The default schedule (the loop nest as written; scalar code gets LLVM's -O3 and its
        # auto-vectorizer) is measured once, beside the second round, as a contender that is not a
        # trial, so that a tuned result is never slower than the default.  When it is far slower,
        # screening stops it and it is forgotten.
        self._baseline = self.candidates.default() if decision_key({}) not in st.seen else None
        cfg = self.config
        mcfg = cfg.measure
        if cfg.threads is not None and mcfg.threads is None:
            mcfg.threads = cfg.threads
        if self.candidates.constants and mcfg.flush_cache:
            # timed with the weights evicted before each call, as a model runs it (decision 031)
            self.candidates.meta["cold"] = "all" if mcfg.flush_cache is True else "constants"
        self.measurer = Measurer(self.spec, mcfg, self.candidates.constants).start()
        return self

    def status(self, best_gflops: float | None = None) -> dict:
        """The progress event: trials measured, best GFLOP/s (default: the best estimate), errors, seconds."""
        st = self.state
        return {"measured": st.measured, "trials": self.config.trials,
                "best_gflops": st.best_estimate() if best_gflops is None else best_gflops,
                "errors": sum(st.errors.values()), "elapsed": time.perf_counter() - self.started}

    def remaining(self) -> int:
        """Trials left to measure in this run (a shared study counts other processes' too:
        :class:`tuner.distributed.SharedTuner`)."""
        return self.config.trials - self.state.measured

    def admit(self, picked: list, rest: list) -> tuple:
        """``(picked, rest)``: the round's candidates to measure and those withdrawn.  Here all the
        picked ones; a shared study's run first claims them against other processes'."""
        return picked, rest

    def step(self) -> Round | None:
        """One round: ask a batch, screen it with the cost model, measure it, tell the study; then
        call each measure callback.  Returns the :class:`~tuner.callbacks.Round`, or None once the
        run is over (``stop_reason`` says why when it stopped before its trials)."""
        import optuna
        cfg, st = self.config, self.state
        if self.stop_reason is not None or self.remaining() <= 0:
            return None
        if cfg.timeout_s is not None and time.perf_counter() - self.started > cfg.timeout_s:
            self.stop_reason = f"timeout of {cfg.timeout_s:g} s reached"
            return None
        rnd = Round()
        want = min(cfg.batch_size, self.remaining())
        if self._ready is None:
            asker = self._asker(want)
            asker.run()
            self._ready = self._take(asker, rnd)
        pool, self._ready = self._ready, None
        if not pool and st.stale >= max(STALE_ASKS, 4 * sum(self.screening.n_ask(want, self.model))):
            # A small space is used up (every proposal repeats a measured loop nest): stop rather than spin.
            self.stop_reason = (f"search space exhausted: the last {st.stale} proposals all "
                                "repeated schedules already measured")
            return None
        picked, rest = self.screening.pick(pool, want, self.model if self.screening.ranks(self.model) else None)
        picked, rest = self.admit(picked, rest)
        for cand in rest:
            if cand.trial is not None:
                self.study.tell(cand.trial, state=optuna.trial.TrialState.FAIL)  # unmeasured: withdrawn
            st.seen_funcs.discard(cand.nest)
            st.fresh.discard(decision_key(cand.decisions))
        # The next round's asks (Optuna sampling, lowering, features) run in a thread while this
        # round compiles, and pause before timing starts.
        left = self.remaining() - len(picked)
        if left > 0:
            self._ahead = self._asker(min(cfg.batch_size, left))
            self._ahead.start()
        again, st.due = st.due, []
        # the default schedule: once, when a time to screen it against exists (or in a run's only round)
        if self._baseline is not None and (st.contenders or left <= 0):
            again, self._baseline = again + [self._baseline], None
        results = self._measure(picked + again, before_timing=self._quiet_hook(self._ahead))
        if self._ahead is not None:
            # All of the next round's asks are made before this round's results are told, so the
            # sampler sees the same history whatever the timing.
            self._ready = self._take(self._ahead, rnd)
            self._ahead = None
        self._tell(rnd, picked, results[:len(picked)], again, results[len(picked):])
        for callback in self.callbacks:
            callback(self, rnd)
        return rnd

    def _measure(self, cands: list, **kw) -> list:
        """Measure ``cands`` (``Measurer.measure``); one whose code-generation passes failed gets that failure."""
        funcs = [c.func for c in cands]     # (the passes run here, for the measured candidates only)
        measured = iter(self.measurer.measure([f for f in funcs if f is not None], **kw))
        return [next(measured) if f is not None else c.error for c, f in zip(cands, funcs)]

    def _asker(self, want: int) -> Asker:
        return Asker(self.candidates, self.study, self.state, self.mutation_rng,
                     *self.screening.n_ask(want, self.model), finish=not self.screening.ranks(self.model))

    def _take(self, asker: Asker, rnd: Round | None = None) -> list:
        """The asker's new candidates; its invalid ones are logged (and added to ``rnd``)."""
        def log_invalid(cands):
            records = [self.candidates.record(c, c.error) for c in cands]
            if self.log is not None:
                for rec in records:
                    self.log.append(rec)
            if rnd is not None:
                rnd.invalid += records
        return asker.take(on_invalid=log_invalid)

    def _tell(self, rnd: Round, picked: list, results: list, again: list, again_results: list) -> None:
        """Tell the study the round's trials, and the run's state all of the round's measurements."""
        st = self.state
        for cand, res in zip(again, again_results):
            key = decision_key(cand.decisions)
            first = key not in st.scores      # the default schedule's first measurement
            if first and not res.ok:
                continue    # far slower than the contenders (screened): not a candidate
            m = Measured(cand, res, self.candidates.record(cand, res, remeasured=not first))
            rnd.repeats.append(m)
            if first:
                st.contenders[key] = cand
                st.seen.add(key)
            else:
                st.remeasured += 1
            st.add_score(m.gflops, cand.decisions)
            if m.record.ok and (st.best is None or m.record.rank_key < st.best.rank_key):
                st.best = m.record
        round_best = st.best_estimate()
        for cand, res in zip(picked, results):
            m = Measured(cand, res, self.candidates.record(cand, res))
            rnd.trials.append(m)
            rec, gf = m.record, m.gflops
            st.seen.add(decision_key(cand.decisions))
            if cand.trial is not None:
                self.study.tell(cand.trial, gf)
            else:          # a measured mutant: the sampler learns from it as from its own
                add_trial(self.study, cand.decisions, cand.choices, gf)
                st.mutants += 1
            if not rec.ok:
                st.errors[str(rec.error_kind)] += 1
            else:
                st.contenders[st.add_score(gf, cand.decisions)] = cand
                if st.best is None or rec.rank_key < st.best.rank_key:
                    st.best = rec
            arm = st.arms.setdefault(cand.origin, [0, 0])
            arm[0] += 1
            arm[1] += gf > round_best
            st.measured += 1
            st.history.append((st.measured, time.perf_counter() - self.started, gf, st.best_estimate()))

    # ---------------------------------------------------------- the end
    def finish(self) -> TuneResult:
        """End the run: withdraw what was asked ahead, write the study back, re-time the finalists
        side by side, stop the measurer, save the cost model; returns the run's result."""
        try:
            self._stop_asking()
            self._confirm_finalists()
        finally:
            self.measurer.close()
        model = self.model
        if model is not None and self.model_path is not None and model.n_samples:
            try:
                model.save(self.model_path)
            except OSError:
                pass  # the model is a cache; the log holds the data
        st = self.state
        return TuneResult(self.spec, st.best, st.measured, self._resumed, st.errors, st.invalid, st.asked,
                          st.history, time.perf_counter() - self.started,
                          str(self.log.path) if self.log is not None else None, self.stop_reason, st.mutants,
                          self.finalists, st.remeasured, st.arms)

    def close(self) -> None:
        """End a run that failed or was interrupted: withdraw the asks, write the study back, stop the measurer."""
        try:
            if self.study is not None:
                self._stop_asking()
        finally:
            if self.measurer is not None:
                self.measurer.close()

    def _stop_asking(self) -> None:
        import optuna
        ahead = (self._ready or []) + (self._take(self._ahead) if self._ahead is not None else [])
        self._ready = self._ahead = None
        for cand in ahead:       # stopped early: withdraw what was asked ahead
            if cand.trial is not None:
                self.study.tell(cand.trial, state=optuna.trial.TrialState.FAIL)
        self._mirror = write_back(self.study, self._mirror, self._synced)

    def _remeasure_finalists(self) -> None:
        """Measure again the would-be finalists measured only once, until none is (at most ``finalists``
        batches): the last rounds' lucky single measurements had no later round to be repeated in, and
        would otherwise take finalist places from schedules that are fast.  Each is measured once more,
        not up to ``remeasure`` times: a few kernel timings at the end of a run.  Part of finishing, like
        the re-timing: logged here, not a round for the measure callbacks."""
        cfg, st = self.config, self.state
        st.due = []
        if cfg.remeasure <= 1:
            return
        for _ in range(cfg.finalists):
            due = [st.contenders[k] for k in st.ranked(st.contenders)[:cfg.finalists] if len(st.scores[k][1]) < 2]
            if not due:
                return
            rnd = Round()
            self._tell(rnd, [], [], due, self.measurer.measure([c.func for c in due]))
            if self.log is not None:
                for m in rnd.repeats:
                    self.log.append(m.record)

    def _confirm_finalists(self) -> None:
        cfg, st = self.config, self.state
        if cfg.finalists <= 1:
            return
        self._remeasure_finalists()
        contenders = [(st.estimate(k), st.contenders[k]) for k in st.ranked(st.contenders)[:cfg.finalists]]
        tuned = {decision_key(c.decisions): g for g, c in contenders}
        earlier_best = self._earlier_best
        if earlier_best is not None:
            tuned.setdefault(decision_key(earlier_best.decisions), earlier_best.gflops or 0.0)
        confirmed = self._confirm(contenders, earlier_best)
        if not confirmed and st.best is not None and earlier_best is not None:
            st.best = min(st.best, earlier_best, key=lambda r: r.rank_key)   # as a later lookup ranks them
        if confirmed:
            st.best = confirmed[0]
            self.finalists = [(tuned.get(decision_key(r.decisions), 0.0), r.gflops or 0.0) for r in confirmed]
            self.progress(self.status(best_gflops=st.best.gflops))

    def _confirm(self, contenders: list, best):
        """Re-time ``contenders`` (fastest first) side by side; returns the confirmed records, fastest first.

        On a shared machine the clock and the load drift during a run, and the fastest of many
        measurements taken at different times is often a lucky one.
        """
        cfg = self.config
        top = [c for _, c in contenders]
        again = [best.decisions] if best is not None else []     # the log's best: re-timed on equal terms
        if cfg.seed_heuristic and top and not self._resumed:
            # and the heuristic start: a noisy measurement while tuning (1 thread on a shared machine:
            # the same schedule 25-160 GFLOP/s) must not let a slower pick replace it unconfirmed
            again.append(self._start_decisions())
        for decisions in again:
            if decisions is None or any(decision_key(decisions) == decision_key(c.decisions) for c in top):
                continue
            earlier = self.candidates.prepare(None, decisions)
            if earlier.func is not None and earlier.decisions == decisions:
                top.append(earlier)
        if len(top) < 2:
            return []
        costs, failed = [[] for _ in top], set()
        for r in range(cfg.final_rounds):
            order = list(range(len(top)))[::1 if r % 2 == 0 else -1]
            for i, res in zip(order, self.measurer.measure([top[i].func for i in order], screen=False)):
                if res.ok:
                    costs[i] += res.costs
                else:
                    failed.add(i)          # (not seen in practice: each was measured before)
        # the heuristic start, when re-timed here, keeps its place unless a contender beats it by more
        # than START_MARGIN: smaller wins are the host's noise (ResNet-18 in a model: picks that beat
        # the start by 2-3% here ran 5-8% slower in the model; docs/decisions/036)
        start = self._start_decisions() if cfg.seed_heuristic and not self._resumed else None
        start_i = next((i for i, c in enumerate(top) if start is not None and i not in failed and costs[i]
                        and decision_key(c.decisions) == decision_key(start)), None)
        bar = statistics.median(costs[start_i]) * (1.0 - START_MARGIN) if start_i is not None else math.inf
        kept = [i == start_i or statistics.median(costs[i]) < bar for i in range(len(top))]
        # (one within the margin: a repeat measurement, logged as such: not a trial, not confirmed)
        records = [self.candidates.record(c, MeasureResult(costs=costs[i]), confirmed=kept[i], remeasured=not kept[i])
                   for i, c in enumerate(top) if i not in failed and costs[i]]
        if self.log is not None:
            for rec in records:
                self.log.append(rec)
        return sorted(records, key=lambda r: r.rank_key)

