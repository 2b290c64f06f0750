"""Many tasks, one trial budget: which task gets the next round (Ansor's task scheduler).

A model is many kernels (tasks), each occurring ``weight`` times. The objective is the
estimated model latency, ``sum(weight_i * best_latency_i)``. After one warm-up round per task
(tasks that the log already tuned skip it; warm-up rounds spend at most half the budget), each
round goes to the task whose next round is
expected to lower the objective most: the gradient of Ansor (Zheng et al., OSDI 2020, section 6)

    grad_i = weight_i * (alpha * backward_i + (1 - alpha) * forward_i)

with ``backward_i`` the task's latency change per round over its last ``window`` rounds and
``forward_i`` an optimistic estimate of the next round: the latency would drop by
``1/rounds_i``, but not below what ``beta`` times the best throughput of similar tasks (same
``tag``) would give. A round measures ``min(64, budget // tasks)`` trials, so every task gets
rounds even at small budgets (MetaSchedule's fixed 64 leaves tasks untouched there). A task whose
space is exhausted, or that improved less than 1% over its last ``stall_rounds`` rounds, gets
no more rounds. ``strategy="round-robin"`` gives each live task a round in turn instead.

Each task is tuned by its own :class:`~tuner.search.Tuner` (its study, cost model and log
records); its measurement workers run only during its rounds. Tasks share the log, so a task
started later pretrains its cost model on the tasks tuned before it (transfer).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from .search import TuneConfig, Tuner, TuneResult
from .spec import WorkloadSpec

STRATEGIES = ("gradient", "round-robin")


@dataclass
class Task:
    """One kernel to tune: its workload, how often the model runs it, and a similarity tag."""
    spec: WorkloadSpec
    weight: int = 1
    tag: str = ""          # tasks with the same tag bound each other's expected speed ("" = none)
    name: str = ""         # shown in the progress table (default: the workload's label)
    meta: dict = field(default_factory=dict)   # added to every log record of the task (model, task id)
    constants: tuple = ()  # names of inputs fixed at build time (weights): packed outside the timed kernel

    @property
    def label(self) -> str:
        return self.name or self.spec.label


@dataclass
class SchedulerConfig:
    """How the budget is spread. ``trials`` counts new measured trials over all tasks."""
    trials: int = 256
    strategy: str = "gradient"
    alpha: float = 0.2             # weight of the backward (observed) gradient
    beta: float = 2.0              # similar tasks bound the forward estimate within this factor
    window: int = 3                # rounds the backward gradient looks back over
    max_round_trials: int = 64     # a round measures min(this, trials // tasks) trials
    warmup_share: float = 0.5      # warm-up spends at most this share (docs/decisions/025-task-scheduler-gradient-half-budget-warmup.md)
    stall_rounds: int = 3          # rounds without a 1% gain after which a task gets no more
    timeout_s: float | None = None  # no new round after this many seconds


@dataclass
class TaskState:
    task: Task
    tuner: Tuner | None = None
    rounds: int = 0
    trials: int = 0                 # measured in this run
    seconds: float = 0.0            # wall time of its rounds (and of its end: finalists)
    history: list = field(default_factory=list)   # best latency after each round
    dead: str | None = None         # why the task gets no more rounds
    result: TuneResult | None = None

    @property
    def latency(self) -> float:
        """Best latency (s) so far: the best estimate of this run, else the log's best; inf if none."""
        t = self.tuner
        if t is None or t.state is None:
            return math.inf
        gflops = t.state.best_estimate()
        if gflops > 0:
            return self.task.spec.flops / (gflops * 1e9)
        best = t.state.best
        return best.median_cost if best is not None and best.median_cost else math.inf


@dataclass
class SchedulerResult:
    tasks: list                     # TaskState per task, in the given order
    trials: int
    seconds: float
    history: list                   # (trials, seconds, estimated latency s) after each round
    order: list                     # task index of each round
    stop_reason: str | None = None

    @property
    def latency(self) -> float:
        return sum(s.task.weight * s.latency for s in self.tasks)


class TaskScheduler:
    """Tune ``tasks`` within one budget: :meth:`run`.

    ``make_tuner(task, trials) -> Tuner`` builds each task's tuner (default: a :class:`Tuner`
    with ``tune_config``, the shared ``log`` and ``storage``); ``progress(scheduler, index)``
    is called after every round.
    """

    def __init__(self, tasks: list, config: SchedulerConfig | None = None, tune_config: TuneConfig | None = None,
                 log=None, storage: str | None = None, progress=None, make_tuner=None):
        if not tasks:
            raise ValueError("the task scheduler needs at least one task")
        self.config = config or SchedulerConfig()
        if self.config.strategy not in STRATEGIES:
            raise ValueError(f"unknown task scheduling strategy {self.config.strategy!r}; "
                             f"choose one of {', '.join(STRATEGIES)}")
        if self.config.trials < 1:
            raise ValueError(f"the trial budget must be positive, got {self.config.trials}")
        self.tune_config = tune_config or TuneConfig()
        self.log, self.storage = log, storage
        self.progress = progress or (lambda scheduler, index: None)
        self.make_tuner = make_tuner or self._default_tuner
        self.states = [TaskState(t) for t in tasks]
        self.round_trials = max(1, min(self.config.max_round_trials, self.config.trials // len(tasks)))
        # warm-up rounds of the full size would spend the whole budget whenever it is under
        # tasks x round size, leaving nothing for the gradient to place
        self.warmup_trials = max(1, min(self.round_trials,
                                        int(self.config.trials * self.config.warmup_share) // len(tasks)))
        self.trials = 0
        self.started = None
        self.history: list = []
        self.order: list = []
        self._next_rr = 0

    # ------------------------------------------------------------ tuners
    def _default_tuner(self, task: Task, trials: int) -> Tuner:
        cfg = TuneConfig(**{**self.tune_config.__dict__, "trials": trials, "constants": task.constants})
        return Tuner(task.spec, cfg, log=self.log, storage=self.storage)

    def _tuner(self, st: TaskState) -> Tuner:
        if st.tuner is None:
            # a task may take the whole budget; the scheduler stops it round by round
            st.tuner = self.make_tuner(st.task, self.config.trials)
            if st.task.meta and hasattr(st.tuner, "candidates"):
                st.tuner.candidates.meta.update(st.task.meta)
            st.tuner.start()
            if st.tuner.state.best is not None:      # tuned before (the log): no warm-up round needed
                st.history.append(st.latency)
        elif not st.tuner.measurer.running:
            st.tuner.measurer.start()
        return st.tuner

    # ------------------------------------------------------------ rounds
    def tune_round(self, index: int) -> int:
        """One round of task ``index``: up to ``round_trials`` measured trials; returns how many."""
        if self.started is None:
            self.started = time.perf_counter()
        st = self.states[index]
        t0 = time.perf_counter()
        tuner = self._tuner(st)
        size = self.round_trials if st.history else self.warmup_trials
        want = min(size, self.config.trials - self.trials)
        before = tuner.state.measured
        tuner.config.trials = before + want     # the tuner's batches stop at the round's end
        try:
            while tuner.state.measured - before < want:
                if tuner.step() is None:
                    st.dead = tuner.stop_reason or "its tuner stopped"
                    break
        finally:
            tuner.measurer.close()     # idle tasks keep no worker processes
        done = tuner.state.measured - before
        st.seconds += time.perf_counter() - t0
        st.trials += done
        st.rounds += 1
        st.history.append(st.latency)
        self.trials += done
        self.order.append(index)
        if done == 0 and st.dead is None:
            st.dead = "a round measured nothing"
        n = self.config.stall_rounds
        if st.dead is None and n and len(st.history) > n and st.history[-1] > 0.99 * st.history[-1 - n]:
            st.dead = f"no 1% gain in its last {n} rounds"
        self.history.append((self.trials, time.perf_counter() - self.started, self.estimated_latency()))
        return done

    def estimated_latency(self) -> float:
        """``sum(weight * best latency)`` over the tasks (inf while a task has no measurement)."""
        return sum(s.task.weight * s.latency for s in self.states)

    def gradients(self) -> list:
        """Each live task's expected change of the objective per round (negative: better); None if dead."""
        cfg = self.config
        best_speed: dict = {}
        for s in self.states:
            if s.task.tag and math.isfinite(s.latency):
                best_speed[s.task.tag] = max(best_speed.get(s.task.tag, 0.0), s.task.spec.flops / s.latency)
        grads = []
        for s in self.states:
            if s.dead is not None:
                grads.append(None)
                continue
            cost = s.latency
            if not math.isfinite(cost):
                grads.append(-math.inf)          # no measurement yet: first in line
                continue
            h = s.history
            backward = (h[-1] - h[-1 - cfg.window]) / cfg.window if len(h) > cfg.window else 0.0
            g_next = cost - cost / max(1, s.rounds)
            speed = best_speed.get(s.task.tag) if s.task.tag else None
            if speed:
                g_next = min(g_next, cfg.beta * s.task.spec.flops / speed)
            forward = g_next - cost
            grads.append(s.task.weight * (cfg.alpha * backward + (1 - cfg.alpha) * forward))
        return grads

    def next_task(self) -> int | None:
        """The task the next round goes to (None when every task is done)."""
        live = [i for i, s in enumerate(self.states) if s.dead is None]
        if not live:
            return None
        fresh = [i for i in live if not self.states[i].history]
        if fresh:                                  # warm-up: a round for every task first
            return fresh[0]
        if self.config.strategy == "round-robin":
            n = len(self.states)
            for k in range(n):
                i = (self._next_rr + k) % n
                if self.states[i].dead is None:
                    self._next_rr = i + 1
                    return i
        grads = self.gradients()
        return min(live, key=lambda i: (grads[i], i))

    # ------------------------------------------------------------ the run
    def run(self) -> SchedulerResult:
        """Spend the budget; then end every started task (its finalists re-timed)."""
        self.started = self.started or time.perf_counter()
        stop = None
        try:
            while self.trials < self.config.trials:
                if self.config.timeout_s is not None and time.perf_counter() - self.started > self.config.timeout_s:
                    stop = f"timeout of {self.config.timeout_s:g} s reached"
                    break
                index = self.next_task()
                if index is None:
                    stop = "every task is exhausted or has stopped improving"
                    break
                self.tune_round(index)
                self.progress(self, index)
        except BaseException:
            for s in self.states:
                if s.tuner is not None:
                    s.tuner.close()
            raise
        for s in self.states:
            if s.tuner is not None:
                t0 = time.perf_counter()
                if not s.tuner.measurer.running:
                    s.tuner.measurer.start()
                s.result = s.tuner.finish()
                s.seconds += time.perf_counter() - t0
        return SchedulerResult(self.states, self.trials, time.perf_counter() - self.started, self.history,
                               self.order, stop)
