"""A worker of whole-model runs: measures the tasks a shared model run wants, one round at a time.

A model run (:mod:`tuner.model_coordinator`) registers one shared study per task and gives a task
trials a round at a time (it raises the study's budget).  A :class:`ModelWorker` keeps one
:class:`TaskTuner` per task it has measured (its study, cost model and finalists, like the task
scheduler's tuner per task) and, before every batch, picks the task to measure:

1. a task with trials left (budget minus measured minus other processes' admitted claims);
2. of those, first one that no other worker measures now (``tensortune.on:<owner>`` markers,
   :mod:`tuner.registry`); two workers on one task settle it by owner id, the later one moves
   (a worker with nothing to do marks the open studies ``tensortune.waiting:<owner>``, so that the
   run counts it and gives it a round);
3. then the task it is on already (switching restarts measuring processes), then the run's
   priority (the task scheduler's gradient).

So two workers measure different tasks whenever two tasks have trials left, and share the last
one's trials otherwise; the claims of :mod:`tuner.lease` keep any candidate from being measured
twice.  A task the worker leaves is parked: the trials it asked ahead are withdrawn; the measuring
processes of the last :data:`KEEP_MEASURING` tasks stay up, idle, since starting them takes seconds.  When the run closes a task's study, the worker re-times that task's
finalists (:meth:`tuner.search.Tuner.finish`) and logs them, as a one-process run does.
"""
from __future__ import annotations

import os
import time

from . import registry
from .distributed import SharedTuner
from .lease import CLAIM_GRACE_S, owner_id, tally

POLL_S = 0.3    # between looks for work when there is none
WAITING_S = 5.0     # a waiting worker's mark lasts this long
KEEP_MEASURING = 3  # parked tasks whose measuring processes stay up (idle): starting them takes seconds


class TaskTuner(SharedTuner):
    """A joined task's tuner that never waits: a round with no trials left returns None at once
    (the worker then looks at other tasks), and it may be parked and resumed."""

    def _wait_for_work(self) -> int:
        study = self.study.raw
        self.leases.sweep()
        if not registry.is_open(study):
            return 0
        self.goal = registry.budget(study)
        t = tally(study, self.goal)
        return max(self.goal - t.measured - t.others(self.leases.owner), 0)

    def park(self, stop_measuring: bool) -> None:
        """Withdraw the trials asked ahead (another task goes on); stop the measuring processes too
        if ``stop_measuring``."""
        self._stop_asking()
        if stop_measuring:
            self.measurer.close()

    def resume(self) -> None:
        if not self.measurer.running:
            self.measurer.start()


class ModelWorker:
    """Measures the tasks of the model runs in ``storage`` whose target is this machine's at
    ``threads`` (only run ``run``'s, if given), appending to ``log``: :meth:`step` until the run is
    over, then :meth:`finish_closed`."""

    def __init__(self, storage: str, log, threads: int | None = None, run: str | None = None,
                 lease_s: float | None = None, say=None):
        from .study import target_fingerprint
        from .target import host_target
        self.storage, self.log, self.run, self.lease_s = storage, log, run, lease_s
        self.fingerprint = target_fingerprint(host_target(threads))
        self.owner = owner_id()
        self.say = say or (lambda msg: None)
        self.tuners: dict = {}          # study name -> TaskTuner
        self.current: str | None = None
        self.measured: dict = {}        # study name -> trials this worker measured
        self.results: dict = {}         # study name -> TuneResult, once finished
        self._studies: dict = {}        # study name -> optuna Study (loaded once)
        self._seen: list = []           # (registration, user attrs) of the open studies, as last listed

    # ------------------------------------------------------------ choosing
    def _study(self, name: str):
        import optuna
        if name not in self._studies:
            self._studies[name] = optuna.load_study(study_name=name, storage=registry.connect(self.storage))
        return self._studies[name]

    def _left(self, reg) -> int:
        t = tally(self._study(reg.name), reg.budget)
        return reg.budget - t.measured - len(t.admitted)

    def choose(self):
        """The registration of the task to measure next (see the module), or None."""
        now = time.time()
        options = []
        self._seen = registry.model_studies(self.storage, self.fingerprint, self.run)
        for reg, attrs in self._seen:
            if attrs.get(registry.DEAD):
                continue
            others = [o for o in registry.occupants(attrs, now) if o != self.owner]
            here = reg.name == self.current
            ahead = sum(o < self.owner for o in others) if here else len(others)
            options.append(((ahead > 0, not here, -registry.priority(attrs), reg.name), reg))
        for _, reg in sorted(options, key=lambda o: o[0]):
            if self._left(reg) > 0:
                return reg
        return None

    def _mark(self, name: str, until: float) -> None:
        self._study(name).set_user_attr(registry.ON_PREFIX + self.owner, until)

    def _lease(self, reg) -> float:
        return self.lease_s or reg.lease_s

    # ------------------------------------------------------------ measuring
    def _tuner(self, reg) -> TaskTuner:
        tuner = self.tuners.get(reg.name)
        if tuner is not None:
            tuner.resume()
            return tuner
        from .search import TuneConfig
        from .spec import WorkloadSpec
        spec = WorkloadSpec.from_json(reg.spec)
        threads = reg.target["threads"]
        # a seed of its own: two workers with one seed would propose the same candidates
        cfg = TuneConfig(trials=reg.budget, sampler=reg.sampler, seed=(reg.seed + os.getpid()) % 2 ** 32,
                         cost_model=reg.cost_model, threads=threads, constants=reg.constants)
        cfg.measure.threads, cfg.measure.seed = threads, reg.seed
        model_path = os.path.abspath(self.log.path) + ".costmodel" if self.log is not None else None
        tuner = TaskTuner(spec, cfg, storage=self.storage, lease_s=self._lease(reg), join=reg.name, log=self.log,
                          model_path=model_path, owner=self.owner)
        tuner.candidates.meta.update(reg.meta or {})
        tuner.candidates.meta["worker"] = self.owner     # which process measured each record
        tuner.start()
        self.tuners[reg.name] = tuner
        return tuner

    def step(self) -> bool:
        """Measure one batch of the task :meth:`choose` picks; False if there was nothing to measure."""
        reg = self.choose()
        if reg is None:
            self.finish_closed()        # (before parking: the run sees this worker busy until the finalists are in)
            self._wait_here()
        if reg is not None and reg.name != self.current:
            reg = self._settle(reg)
        if reg is None or reg.name != self.current:
            self._park()
        if reg is None:
            return False
        self.current = reg.name
        self._mark(reg.name, time.time() + self._lease(reg))
        tuner = self._tuner(reg)
        before = tuner.state.measured
        rnd = tuner.step()
        self.measured[reg.name] = self.measured.get(reg.name, 0) + tuner.state.measured - before
        if rnd is None and tuner.stop_reason is not None and registry.is_open(tuner.study.raw):
            self._study(reg.name).set_user_attr(registry.DEAD, tuner.stop_reason)
            self.say(f"{reg.name}: {tuner.stop_reason}")
        return tuner.state.measured > before

    def _settle(self, reg):
        """Two workers that picked one new task at once: the later owner id picks again (a task that
        nobody measures, if one has trials left), rather than both starting its tuner."""
        self._mark(reg.name, time.time() + self._lease(reg))
        time.sleep(CLAIM_GRACE_S)
        first = [o for o in registry.occupants(self._study(reg.name).user_attrs, time.time()) if o < self.owner]
        if not first:
            return reg
        self._mark(reg.name, 0.0)
        return self.choose()

    def _wait_here(self) -> None:
        """Tell the open runs this worker waits for work (a run gives as many tasks a round at once
        as it has workers); refreshed before it runs out."""
        now, key = time.time(), registry.WAITING_PREFIX + self.owner
        for reg, attrs in self._seen:
            if attrs.get(key, 0.0) < now + WAITING_S / 2:
                self._study(reg.name).set_user_attr(key, now + WAITING_S)

    def _park(self) -> None:
        if self.current is None:
            return
        tuner = self.tuners.pop(self.current, None)
        if tuner is not None:
            tuner.park(stop_measuring=False)
            self.tuners[self.current] = tuner       # (the dict's order: least recently measured first)
            up = [t for t in self.tuners.values() if t.measurer.running]
            for old in up[:max(0, len(up) - KEEP_MEASURING)]:
                old.measurer.close()
        self._mark(self.current, 0.0)
        self.current = None

    # ------------------------------------------------------------ the end
    def finish_closed(self, everything: bool = False) -> list:
        """Finish (re-time the finalists of) the tasks whose study the run has closed (all, if
        ``everything``); returns their study names."""
        done = [name for name, tuner in self.tuners.items() if everything or not registry.is_open(tuner.study.raw)]
        for name in done:       # still busy: the run waits for the finalists
            self._mark(name, time.time() + self.tuners[name].lease_s)
        try:
            for name in done:
                tuner = self.tuners.pop(name)
                if name == self.current:
                    self.current = None
                tuner.resume()
                self.results[name] = tuner.finish()
        finally:
            for name in done:
                self._mark(name, 0.0)
        return done

    def close(self) -> None:
        """End after a failure or an interrupt: withdraw every task's asks, stop measuring."""
        for name, tuner in list(self.tuners.items()):
            try:
                tuner.close()
            finally:
                self._mark(name, 0.0)
        self.tuners.clear()

    def run_over(self) -> bool:
        """Whether run ``run`` has studies and none is open (so this worker may leave)."""
        studies = registry.model_studies(self.storage, self.fingerprint, self.run, closed=True)
        return bool(studies) and not any(reg.open for reg, _ in studies)


def serve(worker: ModelWorker, idle_exit_s: float) -> int:
    """The worker loop of ``tensortune worker --model-run RUN`` (or any model run): measure while
    there is work, finish the tasks whose run closed; return once the run is over (or after
    ``idle_exit_s`` with nothing to do).  Returns the trials measured."""
    idle_since = time.monotonic()
    try:
        while True:
            if worker.step():
                idle_since = time.monotonic()
                continue
            if worker.finish_closed():
                idle_since = time.monotonic()
            if worker.run is not None and worker.run_over():
                break
            if time.monotonic() - idle_since >= idle_exit_s:
                worker.say(f"idle for {idle_exit_s:g} s; exiting")
                break
            time.sleep(POLL_S)
        worker.finish_closed(everything=True)
    except BaseException:
        worker.close()
        raise
    return sum(worker.measured.values())
