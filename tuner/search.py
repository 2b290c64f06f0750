"""The tuning loop: Optuna proposes, the cost model ranks, the best are measured.

Each round measures ``batch_size`` candidates:

1. ask trials from the Optuna study (``asks_per_measure`` per measured
   candidate once the cost model ranks, i.e. is trained on ``model_warmup``
   samples of this or, for transfer, other workloads; else one); each trial's
   decisions build a schedule through the search space and are lowered (an
   illegal combination is recorded as an invalid candidate).  From the second
   round on, this runs in a thread while the previous round compiles (it
   pauses while kernels are timed, and completes before the previous round's
   results are told, so each round's asks see the history up to two rounds
   back, whatever the timing);
2. the sampler's first asks, an ``epsilon`` share of the batch, are measured
   as the sampler ordered them (exploration the model cannot veto); the rest
   of the batch is the top of the XGBoost model's ranking of the other asks
   (before the model's warmup, the sampler's order is kept).  **The model
   screens the sampler's proposals; it does not replace them.**  With 3 asks
   per measured candidate and a quarter of the batch left to the sampler,
   every measured candidate is one of TPE's proposals and TPE learns from all
   of them.  Up to session 13 half of each batch was the model's picks among
   asks *and mutants* of the best schedules (``mutants_per_measure``, one or
   two decisions of one of the best changed, as MetaSchedule's evolutionary
   search does); the model then picked mostly mutants, near-copies of the best
   schedule, and TPE alone was level or ahead at up to 128 trials.  Screening
   asks only found faster schedules than TPE alone (benchmarks/RESULTS.md,
   session 14); mutants remain available (``mutants_per_measure > 0``) and
   always stand in for asks that repeat a measured schedule;
3. measured trials are told their GFLOP/s (0 for a failed candidate, so the
   sampler learns to avoid it); a measured mutant is added to the study as a
   completed trial.  **Unmeasured asks are told FAIL**: Optuna's samplers
   build their models from COMPLETE trials only, so a withdrawn ask never
   enters the sampler's density estimates with a made-up value, and (with
   TPE's constant liar) it still diversified the asks of its round;
   unmeasured mutants were never trials and are dropped;
4. every candidate is appended to the tuning log, and the cost model is updated.

**Estimates, not single measurements, rank schedules.**  On a shared machine
one measurement of a kernel is noisy (matmul 1024 here: 14% coefficient of
variation over two minutes, one measurement in ten more than 20% off the median),
so the fastest of many single measurements is mostly the luckiest.  The run's
``remeasure_top`` fastest schedules are therefore measured again in later
rounds (their objects are cached: no recompilation), next to the round's new
candidates, until each has ``remeasure`` measurements; a schedule's estimate
is the median of its measurements.  Mutation parents, finalists, the progress
figure and the cost model's labels use the estimate; Optuna keeps the first
measurement of each trial (a finished trial cannot be re-told).  The repeats
are logged as ``remeasured`` records and are not trials.

At the end, the ``finalists`` fastest schedules (with the log's best from an
earlier run) are re-timed side by side in ``final_rounds`` interleaved rounds
and logged as *confirmed* measurements, which lookups rank first: on a shared
machine the clock and the load drift during a run, and the single fastest of
64 measurements taken at different times is often a lucky one (a re-timing of
matmul 512's top 8 put the tuning-time #0 at 0.57x numpy and #2 at 0.73x).
"""
from __future__ import annotations

import json
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from logs import TuningLog, TuningRecord
from schedules.space import FixedDecisions, GeneratedSpace, MutatedDecisions, OptunaDecisions
from schedules.errors import ScheduleError

from .measure import MeasureConfig, MeasureResult, Measurer
from .spec import WorkloadSpec
from .study import SAMPLERS, StorageError, add_trial, make_sampler, open_study, write_back  # noqa: F401

@dataclass
class TuneConfig:
    """How a tuning run searches.  Defaults suit a 64-trial run on a few cores."""
    trials: int = 64                 # measured candidates (invalid ones are not counted)
    batch_size: int = 8              # candidates measured per round
    asks_per_measure: int = 3        # sampler asks per measured candidate, once the model ranks them
    mutants_per_measure: int = 0     # variants of the best measured schedules per measured candidate
    epsilon: float = 0.25            # share of each batch measured in the sampler's order (exploration)
    sampler: str = "tpe"
    seed: int = 0
    cost_model: bool = True
    timeout_s: float | None = None   # stop starting new rounds after this many seconds
    seed_heuristic: bool = True      # first trial: the space's heuristic starting point
    # The model ranks candidates once trained on this many samples (own or transfer); before, the
    # sampler's asks alone are measured (benchmarks/RESULTS.md, session 7: ranking from the first
    # 8 samples searched worse than this warmup at 64-256 trials on matmul 1024 and at 64 and 128
    # trials on conv2d).
    model_warmup: int = 24
    finalists: int = 4               # fastest schedules re-timed side by side at the end (0: off)
    remeasure_top: int = 4           # the run's fastest schedules (by estimate) are measured again ...
    remeasure: int = 3               # ... until each has this many measurements (1: off)
    final_rounds: int = 3            # interleaved rounds of that re-timing
    threads: int | None = None       # kernel threads (None: all cores)
    # 3 repeats of >= 25 ms rank candidates reliably; reported figures are re-timed side by side
    measure: MeasureConfig = field(default_factory=lambda: MeasureConfig(repeat=3, min_repeat_ms=25.0))


@dataclass
class Candidate:
    trial: object
    decisions: dict
    schedule: object = None
    func: object = None
    features: object = None
    error: MeasureResult | None = None
    choices: dict = field(default_factory=dict)   # decision name -> the choices it was offered
    origin: str = "ask"      # "ask" (the sampler's) or "mutant"; once picked, the arm that chose it


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


STALE_ASKS = 96     # consecutive proposals with nothing new before a space counts as exhausted
PARENTS = 8         # mutants are made from this many of the best measured schedules


def host_target(threads: int | None) -> dict:
    from tensorir.target import Target
    return Target.host(threads or None).record()


def pretrain_from_log(model, log, exclude_key: str, target: dict, limit: int = 256) -> int:
    """Transfer: train ``model`` on other workloads' records in ``log`` (same CPU).

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
        if rec.workload_key != exclude_key and target_key(rec.target)[:2] == want and rec.trace.get("instructions"):
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


def _import_xgboost() -> None:
    try:
        import xgboost  # noqa: F401
    except ImportError:  # the model reports it when it first trains
        pass


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


class Tuner:
    """Tune one workload.  ``progress(event: dict)`` is called after every round."""

    def __init__(self, spec: WorkloadSpec, config: TuneConfig | None = None, log: TuningLog | None = None,
                 storage: str | None = None, model_path=None, progress=None, space=None):
        self.spec = spec
        self.config = config or TuneConfig()
        self.log = log
        self.storage = storage
        self.model_path = model_path
        self.progress = progress or (lambda event: None)
        if self.config.sampler not in SAMPLERS:
            raise ValueError(f"unknown sampler {self.config.sampler!r}; choose one of {', '.join(SAMPLERS)}")
        self.target = host_target(self.config.threads)
        # a hand-written KnobSpace, or the space generated from the tensor expression
        self.space = space if space is not None else GeneratedSpace(spec.tensors())
        self.mutation_rng = random.Random(self.config.seed)  # mutants (the asking thread, one at a time)
        self._importing = None    # the background import of xgboost, until the first timing
        self._mirror = None       # a SQLite study that the in-memory one is written back to
        self._synced = set()      # numbers of the in-memory trials it already holds

    # --------------------------------------------------------------- setup
    def _study(self, previous: list):
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        tag = "generated" if isinstance(self.space, GeneratedSpace) else \
            f"knobs-{getattr(getattr(self.space, 'fn', None), '__name__', 'custom')}"
        name = f"{self.spec.key}-{self.target['cpu']}-t{self.target['threads']}-{self.config.sampler}-{tag}"
        sampler = make_sampler(self.config.sampler, self.config.seed)
        study, self._mirror = open_study(self.storage, name, sampler)
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
        # compiles; ``run`` waits for it before the first kernel is timed (an import running beside
        # a 2-thread kernel had the heuristic start, always measured first, at a fifth of its speed)
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
            c = self._prepare(None, decisions)
            if c.func is not None:
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

    # ------------------------------------------------------------ candidates
    def _prepare(self, trial, decisions: dict | None = None, src=None) -> Candidate:
        from cost_model import extract_features
        from schedules.lowering import SCHEDULED
        if src is None:
            src = OptunaDecisions(trial) if trial is not None else FixedDecisions(decisions or {})
        cand = Candidate(trial, {})
        scheduled = None
        try:
            cand.schedule = self.space.apply(src)
            steps = cand.schedule.lower_steps()
            cand.func, scheduled = steps[-1][1], dict(steps)[SCHEDULED]
        except ScheduleError as err:
            kind = "lower" if cand.schedule is not None else "schedule"
            cand.error = MeasureResult(error_kind=kind, error_msg=str(err))
        except Exception as err:  # noqa: BLE001 - a bug sinks one candidate, never the run
            cand.error = MeasureResult(error_kind="schedule", error_msg=f"{type(err).__name__}: {err}")
        cand.decisions = dict(src.decisions)
        cand.choices = dict(src.choices)
        if cand.func is not None:     # features read the schedule's own nest, before codegen's passes
            cand.features = extract_features(scheduled)
        return cand

    def _default_candidate(self) -> Candidate | None:
        """The default schedule as a candidate (decisions ``{}``), or None if it does not lower."""
        from schedules import Schedule
        try:
            schedule = Schedule(self.spec.tensors())
            return Candidate(None, {}, schedule=schedule, func=schedule.lower())
        except Exception:  # noqa: BLE001 - the search goes on without it
            return None

    def _record(self, cand: Candidate, res: MeasureResult, confirmed: bool = False,
                remeasured: bool = False) -> TuningRecord:
        trace = cand.schedule.to_json() if cand.schedule is not None else {"instructions": [], "decisions": {}}
        trace["decisions"] = dict(cand.decisions)
        return TuningRecord(workload_key=self.spec.key, workload_name=self.spec.name,
                            workload_params=dict(self.spec.params), target=self.target, trace=trace,
                            decisions=dict(cand.decisions), costs=tuple(res.costs), error_kind=res.error_kind,
                            error_msg=res.error_msg, compile_seconds=res.compile_seconds,
                            run_seconds=res.run_seconds, flops=self.spec.flops, confirmed=confirmed,
                            remeasured=remeasured)

    def _confirm(self, measurer: Measurer, contenders: list, best):
        """Re-time ``contenders`` (fastest first) side by side; returns the confirmed records, fastest first."""
        cfg = self.config
        top = [c for _, c in contenders]
        if best is not None and all(decision_key(best.decisions) != decision_key(c.decisions) for c in top):
            earlier = self._prepare(None, best.decisions)     # the log's best: re-timed on equal terms
            if earlier.func is not None and earlier.decisions == best.decisions:
                top.append(earlier)
        if len(top) < 2:
            return []
        costs, failed = [[] for _ in top], set()
        for r in range(cfg.final_rounds):
            order = list(range(len(top)))[::1 if r % 2 == 0 else -1]
            for i, res in zip(order, measurer.measure([top[i].func for i in order], screen=False)):
                if res.ok:
                    costs[i] += res.costs
                else:
                    failed.add(i)          # (not seen in practice: each was measured before)
        records = [self._record(c, MeasureResult(costs=costs[i]), confirmed=True)
                   for i, c in enumerate(top) if i not in failed and costs[i]]
        if self.log is not None:
            for rec in records:
                self.log.append(rec)
        return sorted(records, key=lambda r: r.rank_key)

    # ------------------------------------------------------------------ run
    def run(self) -> TuneResult:
        import optuna
        cfg = self.config
        start = time.perf_counter()
        previous = self.log.for_workload(self.spec.key, self.target) if self.log is not None else []
        st = _RunState(seen={decision_key(r.decisions) for r in previous})
        for r in previous:
            if r.ok and r.gflops:
                st.add_score(r.gflops, r.decisions)
        study = self._study(previous)
        model = self._cost_model(previous)
        best = self._best_replayable(previous)
        earlier_best = best
        # The default schedule (the loop nest as written; scalar code gets LLVM's -O3 and its
        # auto-vectorizer) is measured once, beside the second round, as a contender that is not a
        # trial: a tuned result is never slower than the default (an int32 matrix-vector product's
        # generated space stayed at 0.8x of it).  When it is far slower, screening stops it and it
        # is forgotten.
        baseline = self._default_candidate() if decision_key({}) not in st.seen else None
        cands = {}         # decision key -> this run's successfully measured candidates
        rows = {}          # decision key -> its sample in the cost model
        finalists = []
        history = []
        measured = 0
        stop_reason = None
        mcfg = cfg.measure
        if cfg.threads is not None and mcfg.threads is None:
            mcfg.threads = cfg.threads
        fail = optuna.trial.TrialState.FAIL
        nxt = None       # the next round's asks, prepared while this round compiles
        ready = None     # their pool, once complete
        with Measurer(self.spec, mcfg) as measurer:
            try:
                while measured < cfg.trials:
                    if cfg.timeout_s is not None and time.perf_counter() - start > cfg.timeout_s:
                        stop_reason = f"timeout of {cfg.timeout_s:g} s reached"
                        break
                    want = min(cfg.batch_size, cfg.trials - measured)
                    if ready is None:
                        first = _Asker(self, study, st, *self._n_ask(want, model))
                        first.run()
                        ready = first.take()
                    pool, ready = ready, None
                    if not pool and st.stale >= max(STALE_ASKS, 4 * sum(self._n_ask(want, model))):
                        # A small space is used up (every proposal repeats a measured loop
                        # nest): stop rather than spin.
                        stop_reason = (f"search space exhausted: the last {st.stale} proposals all "
                                       "repeated schedules already measured")
                        break
                    picked, rest = self._pick(pool, want, model if self._ranks(model) else None)
                    for cand in rest:
                        if cand.trial is not None:
                            study.tell(cand.trial, state=fail)  # unmeasured: withdrawn
                        st.seen_funcs.discard(cand.func)
                        st.fresh.discard(decision_key(cand.decisions))
                    # The next round's asks (Optuna sampling, lowering, features) run in
                    # a thread while this round compiles, and pause before timing starts.
                    left = cfg.trials - measured - len(picked)
                    if left > 0:
                        nxt = _Asker(self, study, st, *self._n_ask(min(cfg.batch_size, left), model))
                        nxt.start()
                    again = self._again(st, cands)
                    # once, when a time to screen it against exists (or in a run's only round)
                    if baseline is not None and (cands or measured + len(picked) >= cfg.trials):
                        again, baseline = again + [baseline], None
                    results = measurer.measure([c.func for c in picked + again],
                                               before_timing=self._quiet_hook(nxt))
                    results, again_results = results[:len(picked)], results[len(picked):]
                    if nxt is not None:
                        # All of the next round's asks are made before this round's results
                        # are told, so the sampler sees the same history whatever the timing.
                        ready, nxt = nxt.take(), None
                    for cand, res in zip(again, again_results):
                        key = decision_key(cand.decisions)
                        first = key not in st.scores      # the default schedule's first measurement
                        if first and not res.ok:
                            continue    # far slower than the contenders (screened): not a candidate
                        rec = self._record(cand, res, remeasured=not first)
                        if self.log is not None:
                            self.log.append(rec)
                        if first:
                            cands[key] = cand
                            st.seen.add(key)
                        else:
                            st.remeasured += 1
                        st.add_score(rec.gflops if rec.ok and rec.gflops else 0.0, cand.decisions)
                        if rec.ok and (best is None or rec.rank_key < best.rank_key):
                            best = rec       # (what a lookup in the log would now pick)
                        if model is not None and key in rows:
                            model.relabel(rows[key], st.estimate(key))
                    feats, thr, keys = [], [], []
                    round_best = st.best_estimate()
                    for cand, res in zip(picked, results):
                        rec = self._record(cand, res)
                        if self.log is not None:
                            self.log.append(rec)
                        st.seen.add(decision_key(cand.decisions))
                        gf = rec.gflops if rec.ok and rec.gflops else 0.0
                        if cand.trial is not None:
                            study.tell(cand.trial, gf)
                        else:          # a measured mutant: the sampler learns from it as from its own
                            add_trial(study, cand.decisions, cand.choices, gf)
                            st.mutants += 1
                        if not rec.ok:
                            st.errors[rec.error_kind] += 1
                        else:
                            cands[st.add_score(gf, cand.decisions)] = cand
                            if best is None or rec.rank_key < best.rank_key:
                                best = rec
                        arm = st.arms.setdefault(cand.origin, [0, 0])
                        arm[0] += 1
                        arm[1] += gf > round_best
                        measured += 1
                        history.append((measured, time.perf_counter() - start, gf, st.best_estimate()))
                        feats.append(cand.features)
                        thr.append(gf)
                        keys.append(decision_key(cand.decisions))
                    if model is not None and feats:
                        rows.update((k, model.n_samples + i) for i, k in enumerate(keys))
                        model.update(np.stack(feats), np.array(thr), [self.spec.key] * len(feats))
                    self.progress({"measured": measured, "trials": cfg.trials, "best_gflops": st.best_estimate(),
                                   "errors": sum(st.errors.values()), "elapsed": time.perf_counter() - start})
            finally:
                ahead = (ready or []) + (nxt.take() if nxt is not None else [])
                for cand in ahead:       # stopped early: withdraw what was asked ahead
                    if cand.trial is not None:
                        study.tell(cand.trial, state=fail)
                self._mirror = write_back(study, self._mirror, self._synced)
            if cfg.finalists > 1:
                contenders = [(st.estimate(k), cands[k]) for k in st.ranked(cands)[:cfg.finalists]]
                tuned = {decision_key(c.decisions): g for g, c in contenders}
                if earlier_best is not None:
                    tuned.setdefault(decision_key(earlier_best.decisions), earlier_best.gflops or 0.0)
                confirmed = self._confirm(measurer, contenders, earlier_best)
                if not confirmed and best is not None and earlier_best is not None:
                    best = min(best, earlier_best, key=lambda r: r.rank_key)   # as a later lookup ranks them
                if confirmed:
                    best = confirmed[0]
                    finalists = [(tuned.get(decision_key(r.decisions), 0.0), r.gflops or 0.0) for r in confirmed]
                    self.progress({"measured": measured, "trials": cfg.trials, "best_gflops": best.gflops,
                                   "errors": sum(st.errors.values()), "elapsed": time.perf_counter() - start})
        if model is not None and self.model_path is not None and model.n_samples:
            try:
                model.save(self.model_path)
            except OSError:
                pass  # the model is a cache; the log holds the data
        return TuneResult(self.spec, best, measured, len(previous), st.errors, st.invalid, st.asked, history,
                          time.perf_counter() - start, str(self.log.path) if self.log is not None else None,
                          stop_reason, st.mutants, finalists, st.remeasured, st.arms)

    def _again(self, st, cands: dict) -> list:
        """This run's ``remeasure_top`` fastest schedules (by estimate) that have fewer than ``remeasure`` measurements."""
        top = st.ranked(cands)[:self.config.remeasure_top]
        return [cands[k] for k in top if len(st.scores[k][1]) < self.config.remeasure]

    def _ranks(self, model) -> bool:
        """Whether the model picks candidates this round (before that, the sampler's asks are measured)."""
        return model is not None and model.is_trained and model.n_samples >= self.config.model_warmup

    def _n_ask(self, want: int, model) -> tuple:
        """(sampler asks, mutants) to prepare for ``want`` measurements."""
        if not self._ranks(model):
            return want, 0
        cfg = self.config
        return max(want, want * cfg.asks_per_measure), want * cfg.mutants_per_measure

    def _pick(self, pool: list, want: int, model):
        """The sampler's first asks (an ``epsilon`` share, in its order) plus the top of the model's ranking.

        The exploration share is what the sampler alone would have measured, so
        the model can add to the search but never veto all of it.  Without a
        trained model, the sampler's order is kept.
        """
        if model is None or len(pool) <= want:
            for c in pool[:want]:
                c.origin = "unranked" if c.origin == "ask" else "stand-in"    # nothing for the model to screen
            return pool[:want], pool[want:]
        n_explore = min(want - 1, max(1, round(want * self.config.epsilon))) if want > 1 else 0
        explore = [i for i, c in enumerate(pool) if c.trial is not None][:n_explore]
        others = [i for i in range(len(pool)) if i not in set(explore)]
        scores = model.predict(np.stack([pool[i].features for i in others]))
        ranked = [others[j] for j in sorted(range(len(others)), key=lambda j: -scores[j])]
        chosen = explore + ranked[:want - len(explore)]
        for i in explore:
            pool[i].origin = "sampler"
        for i in ranked[:want - len(explore)]:
            pool[i].origin = "model:" + pool[i].origin
        taken = set(chosen)
        return [pool[i] for i in chosen], [pool[i] for i in range(len(pool)) if i not in taken]


@dataclass
class _RunState:
    """What a run has seen; shared by the main loop and the asking thread (one at a time)."""
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


class _Asker:
    """Asks and prepares one round's candidates, optionally in a background thread.

    ``pause()`` (called by the measurer just before it starts timing) blocks
    until the thread is between two candidates and holds it there, so no
    Python work competes with a timed kernel; ``resume()`` lets it finish.
    Invalid candidates are told to the study here and logged by ``take()``
    (in the caller's thread: the log is appended from one thread only).
    """

    def __init__(self, tuner: Tuner, study, st: _RunState, n_ask: int, n_mutants: int = 0):
        self.tuner, self.study, self.st, self.n_ask, self.n_mutants = tuner, study, st, n_ask, n_mutants
        # the parents of this round's mutants: the best measured when the round is asked
        self.parents = [d for _, d in st.parents]
        self.pool: list = []
        self.invalid_records: list = []
        self._cv = threading.Condition()
        self._paused = False
        self._busy = False
        self._thread = None
        self._error = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded, name="tensortune-asks", daemon=True)
        self._thread.start()

    def pause(self) -> None:
        with self._cv:
            self._paused = True
            while self._busy:
                self._cv.wait()

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._cv.notify_all()

    def take(self) -> list:
        """The pooled candidates (waits for the thread); logs the invalid ones."""
        self.resume()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.tuner.log is not None:
            for rec in self.invalid_records:
                self.tuner.log.append(rec)
        self.invalid_records = []
        if self._error is not None:
            raise self._error
        pool, self.pool = self.pool, []
        return pool

    def _guarded(self) -> None:
        try:
            self.run()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller by take()
            self._error = err
        finally:
            with self._cv:            # never leave pause() waiting on a dead thread
                self._busy = False
                self._cv.notify_all()

    def _wait_turn(self) -> None:
        with self._cv:
            self._busy = False
            self._cv.notify_all()
            while self._paused:
                self._cv.wait()
            self._busy = True

    def _is_new(self, cand: Candidate) -> bool:
        key = decision_key(cand.decisions)
        st = self.st
        if key in st.seen or key in st.fresh or cand.func in st.seen_funcs:
            return False   # the same decisions, or other decisions giving an identical loop nest
        st.fresh.add(key)
        st.seen_funcs.add(cand.func)
        self.pool.append(cand)
        return True

    def _mutant(self) -> bool:
        """Pool one new variant of a parent (the better ones more often); False if none was made.

        Waits for its turn first: each prepared candidate is one unit of work between pauses.
        """
        if not self.parents:
            return False
        self._wait_turn()
        rng = self.tuner.mutation_rng
        parent = rng.choices(self.parents, weights=[1 / (i + 1) for i in range(len(self.parents))])[0]
        names = sorted(parent)
        mutate = rng.sample(names, min(len(names), 1 if rng.random() < 0.7 else 2))
        cand = self.tuner._prepare(None, src=MutatedDecisions(parent, mutate, rng))
        cand.origin = "mutant"
        return cand.error is None and self._is_new(cand)

    def run(self) -> None:
        import optuna
        st, study = self.st, self.study
        for _ in range(self.n_ask):
            self._wait_turn()
            cand = self.tuner._prepare(study.ask())
            st.asked += 1
            if cand.error is not None:
                st.invalid += 1
                st.errors[cand.error.error_kind] += 1
                study.tell(cand.trial, 0.0)
                self.invalid_records.append(self.tuner._record(cand, cand.error))
            elif self._is_new(cand):
                st.stale = -1
            else:
                study.tell(cand.trial, state=optuna.trial.TrialState.FAIL)   # a repeat: withdrawn
                # A converged sampler (TPE after a few hundred trials) keeps proposing what
                # was measured: a variant of one of the best schedules takes the repeat's
                # place, so the run goes on searching; only when those repeat too does the
                # space count as exhausted.
                if any(self._mutant() for _ in range(3)):
                    st.stale = -1
            st.stale += 1
        # Local search around the best schedules for the model to screen.  A mutant
        # is no Optuna trial: an unmeasured one is dropped (the sampler never hears
        # of it), a measured one is added to the study as a completed trial.
        made = 0
        for _ in range(3 * self.n_mutants if self.parents else 0):
            if made >= self.n_mutants:
                break
            made += self._mutant()
        with self._cv:
            self._busy = False
            self._cv.notify_all()
