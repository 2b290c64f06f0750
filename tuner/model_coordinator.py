"""Whole-model tuning across processes: the task scheduler's rounds as budgets of shared studies.

``tensortune tune-model MODEL --storage postgresql://... [--workers N]`` runs a
:class:`SharedModelRun`.  Design:

* **One study per task.**  Each task's study is the one a single-workload run would use (workload
  key + target fingerprint + sampler + space, :func:`tuner.study.study_name`), registered for
  workers (:mod:`tuner.registry`) with the run's id and the task's log meta.  So a later run of the
  same model (or of the same kernel alone) continues it, and trials are claimed and leased as in
  any shared study (:mod:`tuner.lease`): no candidate is measured twice, and the trials of a killed
  worker are asked again once its lease runs out.
* **Rounds become budgets.**  The coordinator keeps the :class:`~tuner.task_scheduler.TaskScheduler`'s
  bookkeeping (warm-up rounds, Ansor's gradient, stalled tasks) but, instead of tuning a round
  itself, it raises the chosen task's study budget by the round's size.  It keeps as many rounds
  under way as there are workers, each on a different task (``next_task(busy=...)``), and writes
  each study's priority (minus the gradient) for the workers to order by.  A round is booked when
  its study holds its budget; ``--trials`` bounds the sum of the rounds, so every process's
  trials count against it.
* **Workers pick tasks** (:mod:`tuner.model_workers`): a task with trials left that no other
  worker measures first, so two workers end up on different tasks while two have trials left.
* **Who measures.**  With ``--workers N`` the coordinator only coordinates (a database poll every
  ``poll_s``) while N local workers, each pinned to cores of its own, measure: on a small machine
  a coordinator that measured too would time its kernels on the workers' cores.  Without
  ``--workers`` it measures itself between polls (one more worker, with no cores of its own to
  disturb), and ``tensortune worker`` processes elsewhere may join.
* **Logs.**  Local workers append to the run's log (appends are locked); the final rebuild reads
  it.  Workers on other machines log to their own logs: ``tensortune logs merge`` them first.
* **The end.**  Once the budget is measured (or no task can improve) the studies are closed;
  every worker re-times its tasks' finalists and logs them, as a one-process run does, and the
  coordinator waits for that (at most a lease) before the model is rebuilt.
"""
from __future__ import annotations

import math
import time
import uuid

from . import registry
from .distributed import LocalWorkers, SharedTuner
from .lease import tally
from .task_scheduler import SchedulerResult, TaskScheduler

FIRST = 1e30        # the priority of a task not measured yet (the gradient's -inf, JSON-safe)


class SharedModelRun:
    """Tune ``scheduler``'s tasks in shared studies in ``storage``: :meth:`run`.

    ``workers`` starts that many local worker processes (``threads`` each); with 0 this process
    measures (``log`` receives its records, and the local workers').
    """

    def __init__(self, scheduler: TaskScheduler, storage: str, log, threads: int, workers: int = 0,
                 lease_s: float | None = None, say=None, poll_s: float = 0.25):
        self.scheduler, self.storage, self.log, self.threads = scheduler, storage, log, threads
        self.n_workers, self.lease_s, self.poll_s = workers, lease_s, poll_s
        self.say = say or (lambda *a: None)
        self.run_id = uuid.uuid4().hex[:12]
        self.tuners: list = []           # a registering SharedTuner per task (opens, sweeps and closes its study)
        self.base: list = []             # measured trials each study held when the run started
        self.inflight: dict = {}         # task index -> (budget, measured at the round's start, start time)
        self.measured: list = []         # this run's measured trials per task, as last polled
        self.worker = None               # this process's ModelWorker (no --workers)
        self.local = None                # LocalWorkers
        self._priorities: dict = {}
        self.by_worker: dict = {}        # owner -> trials measured in this run (from the claims)

    # ------------------------------------------------------------ setup
    def open(self) -> None:
        from .search import TuneConfig
        sch = self.scheduler
        for st in sch.states:
            cfg = TuneConfig(**{**sch.tune_config.__dict__, "trials": 0, "threads": self.threads,
                                "constants": st.task.constants})
            cfg.measure.threads = self.threads
            tuner = SharedTuner(st.task.spec, cfg, storage=self.storage, lease_s=self.lease_s, log=self.log,
                                run=self.run_id, meta=st.task.meta or None)
            tuner.open()            # registered with a budget of what it holds: no work until a round
            self.tuners.append(tuner)
            self.base.append(tuner.first)
            self.measured.append(0)
        self.since = time.time()
        if self.n_workers:
            self.local = LocalWorkers(self.n_workers, self.threads, self.storage, None, self.log.path,
                                      self.tuners[0].lease_s, run=self.run_id)
        else:
            from .model_workers import ModelWorker
            self.worker = ModelWorker(self.storage, self.log, self.threads, run=self.run_id, lease_s=self.lease_s)

    # ------------------------------------------------------------ rounds
    def poll(self) -> int:
        """Read every study: book the finished rounds and dead tasks, update the tasks' best
        latencies; returns the number of other processes' workers measuring or waiting now."""
        import optuna
        sch, now = self.scheduler, time.time()
        busy = set()
        for i, (st, tuner) in enumerate(zip(sch.states, self.tuners)):
            study = tuner.study.raw
            attrs = study.user_attrs
            busy.update(registry.occupants(attrs, now))
            busy.update(registry.occupants(attrs, now, registry.WAITING_PREFIX))
            measured = tally(study, registry.budget(study)).measured - self.base[i]
            self.measured[i] = measured
            done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            best = max((t.value for t in done if t.value), default=0.0)
            if best > 0:
                st.best_s = st.task.spec.flops / (best * 1e9)
            dead = attrs.get(registry.DEAD)
            if dead and st.dead is None:
                st.dead = str(dead)
                registry.set_budget(study, self.base[i] + measured)
            if i in self.inflight:
                goal, start, t0 = self.inflight[i]
                if self.base[i] + measured >= goal or st.dead is not None:
                    del self.inflight[i]
                    sch.record_round(i, measured - start, time.perf_counter() - t0)
                    sch.progress(sch, i)
        busy.discard(self.worker.owner if self.worker is not None else None)
        return len(busy)

    def allocated(self) -> int:
        return self.scheduler.trials + sum(goal - self.base[i] - start for i, (goal, start, _) in self.inflight.items())

    def allocate(self, slots: int) -> None:
        """Start rounds on new tasks until ``slots`` rounds are under way or the budget is given out."""
        sch = self.scheduler
        while len(self.inflight) < slots and self.allocated() < sch.config.trials:
            i = sch.next_task(busy=set(self.inflight))
            if i is None:
                break
            size = min(sch.round_size(i), sch.config.trials - self.allocated())
            goal = self.base[i] + self.measured[i] + size
            self.inflight[i] = (goal, self.measured[i], time.perf_counter())
            registry.set_budget(self.tuners[i].study.raw, goal)
        grads = sch.gradients()
        for i in self.inflight:
            g = grads[i]
            prio = FIRST if g is None or not math.isfinite(g) else -g
            if self._priorities.get(i) != prio:
                self._priorities[i] = prio
                self.tuners[i].study.raw.set_user_attr(registry.PRIORITY, prio)

    # ------------------------------------------------------------ the run
    def run(self) -> SchedulerResult:
        """Spend the budget on the workers; then close the studies and wait for the finalists."""
        sch = self.scheduler
        sch.started = time.perf_counter()
        stop, quick = None, True
        self.open()
        self.say(f"shared run {self.run_id}: {len(self.tuners)} task studies; "
                 + (f"{self.n_workers} local workers x {self.threads} thread(s) measure" if self.n_workers
                    else "this process measures; `tensortune worker` processes may join"))
        try:
            if self.local is not None:
                self.local.start()
            while True:
                live = self.poll()
                slots = max(self.n_workers, live, 1) if self.worker is None else max(1, live + 1)
                timed_out = sch.config.timeout_s is not None and time.perf_counter() - sch.started > sch.config.timeout_s
                if timed_out:
                    stop = f"timeout of {sch.config.timeout_s:g} s reached"
                else:
                    self.allocate(slots)
                if not self.inflight:
                    if not timed_out and sch.trials < sch.config.trials:
                        stop = "every task is exhausted or has stopped improving"
                    break
                if timed_out:
                    for i in list(self.inflight):     # no new trials: the rounds end where they are
                        registry.set_budget(self.tuners[i].study.raw, self.base[i] + self.measured[i])
                    self.inflight_closed()
                    break
                if self.worker is not None and self.worker.step():
                    continue
                if self.local is not None and not self.local.alive():
                    raise RuntimeError(f"every worker ended before the budget was measured ({self.allocated()} of "
                                       f"{sch.config.trials} trials given out, {sum(self.measured)} measured)")
                time.sleep(self.poll_s)
            quick = False
        finally:
            self._close(quick)
        return SchedulerResult(sch.states, sch.trials, time.perf_counter() - sch.started, sch.history, sch.order,
                               stop)

    def inflight_closed(self) -> None:
        for i, (goal, start, t0) in list(self.inflight.items()):
            del self.inflight[i]
            self.scheduler.record_round(i, self.measured[i] - start, time.perf_counter() - t0)

    def _close(self, quick: bool) -> None:
        """Close the studies, let the workers re-time their finalists (not when interrupted), fail
        what is still running, stop."""
        from .lease import measured_by
        lease = self.tuners[0].lease_s if self.tuners else 0.0
        try:
            for tuner in self.tuners:
                registry.close(tuner.study.raw)
            if self.worker is not None:
                if quick:
                    self.worker.close()
                else:
                    self.worker.finish_closed(everything=True)
            if self.local is not None:
                self.local.stop(wait_s=5.0 if quick else lease + 30)
            elif not quick:
                self._wait_for_other_workers(lease)
            for tuner in self.tuners:
                tuner.close_study(wait_s=min(lease, 5.0))
                by = measured_by(tuner.study.raw, self.since)
                for owner, n in by.items():
                    self.by_worker[owner] = self.by_worker.get(owner, 0) + n
        finally:
            for tuner in self.tuners:
                tuner.leases.stop()

    def _wait_for_other_workers(self, wait_s: float) -> None:
        """Wait (at most ``wait_s``) until no worker marks a study of the run: they re-time finalists."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            now = time.time()
            if not any(registry.occupants(t.study.raw.user_attrs, now) for t in self.tuners):
                return
            time.sleep(self.poll_s)
