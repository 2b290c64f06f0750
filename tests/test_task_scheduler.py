"""The task scheduler: warm-up, Ansor's gradient, round-robin, dead tasks, the budget, resume."""
import math
import types

import pytest

from logs import TuningLog
from tensorir import ops
from tuner.search import TuneConfig
from tuner.spec import WorkloadSpec
from tuner.task_scheduler import SchedulerConfig, Task, TaskScheduler


class _State:
    def __init__(self):
        self.measured, self.best, self.gflops = 0, None, 0.0

    def best_estimate(self):
        return self.gflops


class _Measurer:
    running = True

    def start(self):
        self.running = True

    def close(self):
        self.running = False


class FakeTuner:
    """A tuner whose best GFLOP/s after n trials follows ``curve(n)``; ``space`` trials at most."""

    def __init__(self, curve, batch=4, space=10 ** 9):
        self.curve, self.batch, self.space = curve, batch, space
        self.state, self.measurer, self.stop_reason = _State(), _Measurer(), None
        self.config = types.SimpleNamespace(trials=10 ** 9)
        self.finished = False

    def start(self):
        return self

    def step(self):
        if self.state.measured >= self.config.trials:
            return None
        if self.state.measured >= self.space:
            self.stop_reason = "search space exhausted"
            return None
        self.state.measured += min(self.batch, self.config.trials - self.state.measured)
        self.state.gflops = self.curve(self.state.measured)
        return object()

    def finish(self):
        self.finished = True
        self.measurer.close()
        return None

    def close(self):
        pass


def _spec(n):
    return WorkloadSpec("matmul", {"M": n, "N": n, "K": n})


def _scheduler(curves, trials, weights=None, strategy="gradient", spaces=None, tags=None, **kw):
    tasks = [Task(_spec(16 * (i + 1)), weight=(weights or [1] * len(curves))[i], tag=(tags or [""] * len(curves))[i])
             for i in range(len(curves))]
    tuners = {}

    def make(task, budget):
        i = tasks.index(task)
        tuners[i] = FakeTuner(curves[i], space=(spaces or [10 ** 9] * len(curves))[i])
        return tuners[i]
    s = TaskScheduler(tasks, SchedulerConfig(trials=trials, strategy=strategy, **kw), make_tuner=make)
    return s, tuners


def test_warm_up_gives_every_task_a_round_then_the_budget_is_spent_exactly():
    s, tuners = _scheduler([lambda n: 10.0 + n] * 3, trials=60, max_round_trials=8)
    res = s.run()
    assert res.order[:3] == [0, 1, 2]
    assert res.trials == 60 == sum(st.trials for st in res.tasks)
    assert all(t.finished for t in tuners.values()) and all(not t.measurer.running for t in tuners.values())


def test_round_size_is_min_of_cap_and_budget_over_tasks():
    s, _ = _scheduler([lambda n: 1.0] * 4, trials=40)
    assert s.round_trials == 10
    s, _ = _scheduler([lambda n: 1.0] * 2, trials=1000)
    assert s.round_trials == 64


def test_gradient_favours_the_heavy_improving_task():
    # task 0 keeps improving and weighs 10x; task 1 is flat and light, and stops after 3 flat rounds
    s, _ = _scheduler([lambda n: 1.0 + n, lambda n: 50.0], trials=200, weights=[10, 1], max_round_trials=8)
    res = s.run()
    assert res.order.count(0) > 4 * res.order.count(1) and res.trials == 200


def test_gradient_is_ansors_formula():
    s, _ = _scheduler([lambda n: 10.0 * n] * 2, trials=400, weights=[3, 1], max_round_trials=8, stall_rounds=0)
    for _ in range(5):
        s.tune_round(0)
    s.tune_round(1)
    st = s.states[0]
    h, cost = st.history, st.latency
    backward = (h[-1] - h[-4]) / 3
    forward = (cost - cost / st.rounds) - cost
    assert s.gradients()[0] == pytest.approx(3 * (0.2 * backward + 0.8 * forward))
    st1 = s.states[1]
    assert s.gradients()[1] == pytest.approx(1 * 0.8 * ((st1.latency - st1.latency / 1) - st1.latency))


def test_round_robin_alternates():
    s, _ = _scheduler([lambda n: 1.0 + n] * 2, trials=64, strategy="round-robin", max_round_trials=8,
                      stall_rounds=0)
    res = s.run()
    assert res.order == [0, 1] * 4


def test_stalled_and_exhausted_tasks_get_no_more_rounds():
    s, _ = _scheduler([lambda n: 5.0, lambda n: 1.0 + n], trials=400, max_round_trials=8, stall_rounds=2,
                      spaces=[10 ** 9, 24])
    res = s.run()
    assert res.tasks[0].dead.startswith("no 1% gain") and res.tasks[0].rounds == 3
    assert "exhausted" in res.tasks[1].dead
    assert res.stop_reason == "every task is exhausted or has stopped improving" and res.trials < 400


def test_similar_tasks_bound_the_forward_estimate():
    s, _ = _scheduler([lambda n: 100.0, lambda n: 1.0], trials=64, tags=["conv", "conv"], max_round_trials=8)
    s.tune_round(0)
    s.tune_round(1)
    g = s.gradients()
    # task 1 runs at 1 GFLOP/s where its sibling reaches 100: its expected gain is large
    assert g[1] < g[0] < 0


def test_estimated_latency_is_the_weighted_sum():
    s, _ = _scheduler([lambda n: 2.0, lambda n: 4.0], trials=16, weights=[3, 1], max_round_trials=8)
    assert math.isinf(s.estimated_latency())
    s.run()
    f0, f1 = (st.task.spec.flops for st in s.states)
    assert s.estimated_latency() == pytest.approx(3 * f0 / 2e9 + f1 / 4e9)


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="strategy"):
        TaskScheduler([Task(_spec(16))], SchedulerConfig(strategy="lottery"))
    with pytest.raises(ValueError, match="at least one task"):
        TaskScheduler([], SchedulerConfig())


def test_real_tasks_share_a_log_and_resume(tmp_path):
    log = TuningLog(tmp_path / "model.jsonl")
    tasks = [Task(WorkloadSpec.from_tensors(ops.matmul(24, 24, 24), "mm24"), weight=2),
             Task(WorkloadSpec.from_tensors(ops.dense(8, 32, 16), "dense8"), weight=1)]
    cfg = TuneConfig(batch_size=4, finalists=0, cost_model=False, remeasure=1)
    res = TaskScheduler(tasks, SchedulerConfig(trials=16, max_round_trials=4), cfg, log=log).run()
    assert res.trials == 16 and all(st.trials >= 4 for st in res.tasks)
    labels = {r.workload_label for r in log.read().records}
    assert labels == {"mm24", "dense8"}
    assert math.isfinite(res.latency)
    # the same command again: both tasks start from their logged bests and skip warm-up
    again = TaskScheduler(tasks, SchedulerConfig(trials=8, max_round_trials=4), cfg, log=log)
    again.states[0].tuner = again.make_tuner(tasks[0], 8).start()
    again.states[0].history.append(again.states[0].latency)
    assert math.isfinite(again.states[0].latency)
    again.states[0].tuner.close()
    res2 = again.run()
    assert res2.trials == 8
