"""Tuning one study from several processes or machines through a shared Optuna storage (PostgreSQL).

A :class:`SharedTuner` is a :class:`tuner.search.Tuner` whose study lives in the database: each
process asks, measures on its own CPU, and tells.  The run that registers the study (``tensortune
tune --storage URL``) sets its budget: its ``--trials`` on top of the trials measured before; a
worker (``tensortune worker``, :mod:`tuner.cmd_worker`) joins a registered study of its own target
(:mod:`tuner.registry`).  Every round the candidates are claimed first (:mod:`tuner.lease`), so no
candidate is measured twice and the budget counts every process's trials; a process whose lease
runs out loses its trials to the others.  Mutants (variants that are no Optuna trial) are not
made: another process could not see that one is being measured.

:class:`LocalWorkers` starts ``tensortune worker`` processes on this machine, each pinned to
cores of its own, for ``tune --workers N``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from . import registry
from .lease import CLAIM, CLAIM_GRACE_S, REASK, LeasedStudy, Leases, claim, measured_by, params_key, tally, unclaim
from .search import Tuner
from .state import RunState, decision_key
from .study import make_sampler, open_study

STALE_ROUNDS = 12          # rounds in a row with nothing new to measure before a shared space counts as exhausted
DEFAULT_LEASE_FACTOR = 10   # the lease: this many times the per-candidate timeout (MeasureConfig.timeout_s)


def default_lease(config) -> float:
    """The default lease of a run with TuneConfig ``config``: 10 times its per-candidate timeout."""
    return DEFAULT_LEASE_FACTOR * config.measure.timeout_s


class SharedTuner(Tuner):
    """A tuner whose study is shared with other processes (see the module).

    ``join`` is the name of a registered study to join as a worker; without it the run registers
    its study and ``config.trials`` is its budget.  ``space_ref`` is the ``file.py:function`` of a
    hand-written space, for workers to load.
    """

    def __init__(self, spec, config=None, *, storage: str, lease_s: float | None = None, join: str | None = None,
                 space_ref: str | None = None, run: str | None = None, meta: dict | None = None,
                 owner: str | None = None, **kwargs):
        super().__init__(spec, config, storage=storage, **kwargs)
        self.run_id, self.task_meta = run, meta     # a model run's task (tuner.model_coordinator)
        self.owner = owner          # the process's owner id in the leases (default: one of its own)
        self.lease_s = lease_s if lease_s is not None else default_lease(self.config)
        self.join = join
        self.space_ref = space_ref
        self.leases = None
        self.goal = None            # measured trials the study holds when this run is over
        self.first = 0              # measured trials it held when this run started
        self.poll_s = min(1.0, max(0.05, self.lease_s / 8))
        self._left = 0
        self._refused_rounds = 0    # consecutive rounds whose every candidate another process had measured
        self.shared = None          # once finished (the registering run): what the study's processes measured

    # --------------------------------------------------------------- setup
    def study_name(self) -> str:
        return self.join or super().study_name()

    def _study(self, previous: list):
        self._since = time.time()
        if self.join:       # a worker: the study as registered, no warm start from this worker's log
            import optuna
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            study, _ = open_study(self.storage, self.join, make_sampler(self.config.sampler, self.config.seed))
        else:
            study = super()._study(previous)
        from .snapshot_sampler import SnapshotSampler
        study.sampler = SnapshotSampler(study.sampler)     # one read of the shared trials per ask
        self.leases = Leases(study, self.lease_s, self.owner)
        if self.join:
            self.goal = registry.budget(study)
            self.first = tally(study, self.goal).measured
        else:
            self.first = tally(study, 0).measured
            self.goal = self.first + self.config.trials
            registry.register(study, spec=self.spec, target=self.target, config=self.config, space=self.space_ref,
                              lease_s=self.lease_s, budget=self.goal, run=self.run_id, meta=self.task_meta)
        self.leases.start()
        return LeasedStudy(study, self.leases)

    def open(self) -> SharedTuner:
        """Open and register the study without measuring (``tune --workers``: the workers measure)."""
        previous = self.log.for_workload(self.spec.key, self.target) if self.log is not None else []
        previous = [r for r in previous if not r.model_choice]     # (timed in a model: not a trial)
        self.state = RunState(seen={decision_key(r.decisions) for r in previous})
        self.started = time.perf_counter()
        self.study = self._study(previous)
        return self

    def _asker(self, want: int):
        asker = super()._asker(want)
        asker.parents, asker.n_mutants = [], 0      # no mutants (see the module)
        return asker

    # ------------------------------------------------------------ the run
    def progress_of_study(self) -> tuple:
        """(trials measured in the study since this run started, its budget for this run)."""
        t = tally(self.study.raw, self.goal)
        return t.measured - self.first, self.goal - self.first

    def status(self, best_gflops: float | None = None) -> dict:
        event = super().status(best_gflops)
        event["measured"], event["trials"] = self.progress_of_study()     # every process's trials
        return event

    def step(self):
        self._left = self._wait_for_work()
        return super().step()

    def remaining(self) -> int:
        return self._left

    def _wait_for_work(self) -> int:
        """Trials this process may start now; waits while other processes measure the last ones
        (a lost lease gives their candidates back).  0 once the budget is measured or, for a
        worker, once the registering run is over."""
        study = self.study.raw
        while True:
            self.leases.sweep()
            if self.join:
                if not registry.is_open(study):
                    return 0
                self.goal = registry.budget(study)
            t = tally(study, self.goal)
            left = self.goal - t.measured - t.others(self.leases.owner)
            if left > 0 or t.measured >= self.goal:
                return max(left, 0)
            if self.config.timeout_s is not None and time.perf_counter() - self.started > self.config.timeout_s:
                return 0
            time.sleep(self.poll_s)

    def admit(self, picked: list, rest: list) -> tuple:
        """Claim the round's candidates and keep those the claims admit (re-asked candidates first)."""
        study = self.study.raw
        t = tally(study, self.goal)
        slots = min(len(picked), self.goal - t.measured - len(t.admitted))
        reasked = [c for c in picked + rest if c.trial is not None and c.trial.user_attrs.get(REASK) is not None]
        rest = [c for c in rest if c not in reasked]
        popped = self._pop_waiting(slots - len(reasked))
        cands = popped + reasked + [c for c in picked if c not in reasked]
        chosen, keys = [], set()
        for c in cands:
            key = params_key(c.trial.params) if c.trial is not None else None
            if key is None or key in t.taken or key in keys or len(chosen) >= slots:
                continue
            keys.add(key)
            chosen.append(c)
        keep = []
        if chosen:
            self._refused_rounds = 0
            claim([c.trial for c in chosen], self.leases.owner)
            time.sleep(CLAIM_GRACE_S)
            admitted = tally(study, self.goal).admitted
            keep = [c for c in chosen if c.trial.number in admitted]
            unclaim([c.trial for c in chosen if c.trial.number not in admitted])
        elif slots > 0 and cands:
            self._refused_rounds += 1
            if self._refused_rounds >= STALE_ROUNDS:
                self.stop_reason = (f"search space exhausted: {STALE_ROUNDS} rounds of proposals all "
                                    "measured already by this study's processes")
        taken = t.taken | {params_key(c.trial.params) for c in keep}
        for c in popped + reasked:      # enqueued candidates this round could not take: enqueued again
            if c not in keep and params_key(c.trial.params) not in taken:
                taken.add(params_key(c.trial.params))
                again = c.trial.user_attrs.get(REASK)
                study.enqueue_trial(c.trial.params, user_attrs={REASK: again} if again is not None else None)
        return keep, rest + [c for c in cands if c not in keep]

    def _pop_waiting(self, limit: int) -> list:
        """Candidates of up to ``limit`` enqueued trials (expired ones asked again, the heuristic start)."""
        import optuna
        waiting = self.study.raw.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        out = []
        for _ in waiting[:max(0, limit)]:
            cand = self.candidates.prepare(self.study.ask())
            if cand.error is not None:
                self.study.tell(cand.trial, state=optuna.trial.TrialState.FAIL)
            else:
                cand.origin = "reasked"
                out.append(cand)
        return out

    # ---------------------------------------------------------- the end
    def finish(self):
        try:
            if not self.join:
                self._stop_asking()
                self.close_study()
                by = measured_by(self.study.raw, self._since)
                self.shared = {"study": self.study_name(), "measured": sum(by.values()), "processes": len(by),
                               "late_reports": self.leases.late}
            return super().finish()
        finally:
            self.leases.stop()

    def close(self) -> None:
        try:
            super().close()
            if self.leases is not None and not self.join:
                self.close_study(wait_s=min(self.lease_s, 5.0))     # interrupted: do not keep the user waiting
        finally:
            if self.leases is not None:
                self.leases.stop()

    def close_study(self, wait_s: float | None = None) -> None:
        """Mark the study's run over, wait (at most a lease) for the other processes to withdraw what
        they asked, then fail what is still running: no trial of the study is left running."""
        import optuna
        study = self.study.raw
        registry.close(study)
        running = optuna.trial.TrialState.RUNNING
        deadline = time.monotonic() + (self.lease_s if wait_s is None else wait_s)
        while study.get_trials(deepcopy=False, states=(running,)) and time.monotonic() < deadline:
            self.leases.sweep()
            time.sleep(self.poll_s)
        for t in study.get_trials(deepcopy=False, states=(running,)):
            try:
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            except (ValueError, RuntimeError):
                pass        # told meanwhile


class LocalWorkers:
    """``n`` ``tensortune worker`` processes on this machine for one study (or a model run's), each pinned to
    ``threads`` cores of its own (``os.sched_setaffinity``), so that they do not disturb each
    other's timings."""

    def __init__(self, n: int, threads: int, storage: str, study: str | None, log: str | None, lease_s: float,
                 run: str | None = None):
        cpus = sorted(os.sched_getaffinity(0))
        if n * threads > len(cpus):
            raise ValueError(f"{n} workers of {threads} thread{'s' if threads != 1 else ''} need {n * threads} "
                             f"cores; this process may use {len(cpus)}")
        self.cores = [cpus[i * threads:(i + 1) * threads] for i in range(n)]
        which = ["--model-run", run] if run is not None else ["--study", study]   # a model run's studies, or one
        self.args = ["--storage", storage, "--threads", str(threads), *which, "--lease", f"{lease_s:g}",
                     "--idle-exit", f"{max(30.0, lease_s):g}", "--quiet"] + (["--log", log] if log else [])
        self.procs = []

    def start(self) -> LocalWorkers:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        for cores in self.cores:
            proc = subprocess.Popen([sys.executable, "-m", "tuner.cli", "worker", *self.args], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            os.sched_setaffinity(proc.pid, cores)     # (inherited by its measuring processes)
            self.procs.append(proc)
        return self

    @property
    def pids(self) -> list:
        return [p.pid for p in self.procs]

    def alive(self) -> int:
        return sum(p.poll() is None for p in self.procs)

    def stop(self, wait_s: float) -> list:
        """Wait up to ``wait_s`` for the workers to leave the closed study, then end the others;
        returns their exit statuses."""
        deadline = time.monotonic() + wait_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.terminate()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        return [p.returncode for p in self.procs]


def tune_with_workers(tuner: SharedTuner, workers: LocalWorkers, progress=None) -> dict:
    """Register ``tuner``'s study, let ``workers`` measure its budget, close it.  Returns
    ``{"measured", "budget", "by_worker", "seconds", "expired", "workers_exit"}``; raises
    RuntimeError when every worker ended before the budget was measured."""
    started, since = time.perf_counter(), time.time()
    tuner.open()
    study = tuner.study.raw
    first_number = len(study.get_trials(deepcopy=False))
    measured, stop_reason, timeout_s, quick = 0, None, tuner.config.timeout_s, True
    try:
        workers.start()
        while True:
            tuner.leases.sweep()
            measured, budget = tuner.progress_of_study()
            if progress is not None:
                best = max((t.value for t in _measured_trials(study)), default=0.0)
                progress({"measured": measured, "trials": budget, "best_gflops": best, "errors": 0,
                          "elapsed": time.perf_counter() - started})
            if measured >= budget:
                break
            if timeout_s is not None and time.perf_counter() - started > timeout_s:
                stop_reason = f"timeout of {timeout_s:g} s reached"
                break
            if not workers.alive():
                raise RuntimeError(f"every worker ended before the budget was measured ({measured} of {budget} "
                                   "trials); see their messages above")
            time.sleep(tuner.poll_s)
        quick = False
    finally:
        # (interrupted or failed: do not keep the user waiting a whole lease)
        tuner.close_study(wait_s=5.0 if quick else tuner.lease_s)
        codes = workers.stop(wait_s=5.0 if quick else tuner.lease_s + 30)
        tuner.leases.stop()
    return {"measured": measured, "budget": tuner.config.trials, "by_worker": measured_by(study, since),
            "seconds": time.perf_counter() - started, "workers_exit": codes, "stop_reason": stop_reason,
            "expired": sum(1 for t in study.get_trials(deepcopy=False)[first_number:] if REASK in t.user_attrs)}


def _measured_trials(study) -> list:
    import optuna
    return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.user_attrs.get(CLAIM) is not None]
