"""Workers sharing one study on a real PostgreSQL server (``database`` fixture, tests/conftest.py).

Each test tunes a tiny matmul with a few trials in separate processes, as users run them:
``tensortune tune --storage URL`` beside ``tensortune worker``, and ``tune --workers 2`` with
one worker killed mid-trial.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MATMUL = ["matmul", "M=32", "N=32", "K=32"]


def cli(*args) -> list:
    return [sys.executable, "-m", "tuner.cli", *args]


def popen(args, cores=None, **kw):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)
    if cores is not None:
        os.sched_setaffinity(proc.pid, cores)
    return proc


def finish(proc, timeout=90) -> tuple:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{proc.args[3:5]} did not finish in {timeout} s; stderr: {err[-2000:]}")
    return proc.returncode, out, err


def the_study(url):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    summaries = optuna.get_all_study_summaries(url, include_best_trial=False)
    assert len(summaries) == 1, [s.study_name for s in summaries]
    return optuna.load_study(study_name=summaries[0].study_name, storage=url)


def measured(study) -> list:
    """The study's trials measured by a claim (tuner.lease), COMPLETE."""
    from tuner.lease import CLAIM
    return [t for t in study.get_trials(deepcopy=False)
            if t.state.name == "COMPLETE" and t.user_attrs.get(CLAIM) is not None]


def pid_of(trial, attr) -> int:
    from tuner.lease import owner_pid
    value = trial.user_attrs[attr]
    return owner_pid(value[1] if isinstance(value, list) else value)


def trial_records(path) -> list:
    """The log's records of measured trials (not repeats, re-timings, the default schedule, or asks that
    gave no legal schedule: their origin stays "ask", see tuner.screening.Screening.pick)."""
    from logs import TuningLog
    if not os.path.exists(path):
        return []
    return [r for r in TuningLog(path, mode="r").records()
            if not r.remeasured and not r.confirmed and r.meta.get("origin") not in ("default", "ask")]


def test_two_processes_share_the_budget_and_another_target_stays_out(database, tmp_path):
    from tuner.lease import CLAIM, OWNER
    from tuner.spec import WorkloadSpec
    from tuner.study import study_name
    from tuner.target import host_target
    cpus = sorted(os.sched_getaffinity(0))
    first, second = [cpus[0]], [cpus[-1]]
    # a worker of this target (1 thread), and one of another (2 threads: another fingerprint); both
    # watch the run's study only, so that they leave when it closes however slowly the machine starts it
    name = study_name(WorkloadSpec.parse(MATMUL[0], MATMUL[1:]).key, host_target(1), "tpe", "generated")
    watch = ["--study", name, "--idle-exit", "120"]
    worker = popen(cli("worker", "--storage", database, "--threads", "1", "--log", str(tmp_path / "b.jsonl"),
                       "--lease", "10", *watch), cores=second)
    other = popen(cli("worker", "--storage", database, "--threads", "2", "--log", str(tmp_path / "c.jsonl"), *watch))
    tune = popen(cli("tune", *MATMUL, "--trials", "24", "--threads", "1", "--storage", database, "--log",
                     str(tmp_path / "a.jsonl"), "--no-cost-model", "--quiet", "--json", "--lease", "10"), cores=first)
    code, out, err = finish(tune)
    assert code == 0, err
    outputs = []
    for proc in (worker, other):
        code, out, err = finish(proc)
        assert code == 0, err
        outputs.append(out)
    study = the_study(database)
    done = measured(study)
    assert len(done) == 24                                   # the budget, counting both processes' trials
    keys = [json.dumps(t.params, sort_keys=True) for t in done]
    assert len(set(keys)) == len(keys)                       # no candidate measured twice
    assert not [t for t in study.get_trials(deepcopy=False) if t.state.name == "RUNNING"]
    by_pid = {pid: sum(pid_of(t, CLAIM) == pid for t in done) for pid in (tune.pid, worker.pid)}
    assert all(n > 0 for n in by_pid.values()) and sum(by_pid.values()) == 24, by_pid
    # the worker of another target asked nothing and logged nothing
    assert not [t for t in study.get_trials(deepcopy=False) if OWNER in t.user_attrs and pid_of(t, OWNER) == other.pid]
    assert trial_records(tmp_path / "c.jsonl") == []
    assert f"{study.study_name}: another target" in outputs[1] and "not joined" in outputs[1]
    # each log holds its process's trials: together the study's, whose best is the best of both logs
    a, b = trial_records(tmp_path / "a.jsonl"), trial_records(tmp_path / "b.jsonl")
    assert (len(a), len(b)) == (by_pid[tune.pid], by_pid[worker.pid])
    assert len({json.dumps(r.decisions, sort_keys=True) for r in a + b}) == 24
    assert max(r.gflops or 0.0 for r in a + b) == pytest.approx(study.best_value, rel=1e-12)


def test_a_killed_worker_loses_its_trials_to_the_other(database, tmp_path):
    import optuna

    from tuner.lease import CLAIM, REASK
    log = tmp_path / "l.jsonl"
    tune = popen(cli("tune", *MATMUL, "--trials", "16", "--storage", database, "--log", str(log), "--workers", "2",
                     "--lease", "2", "--no-cost-model", "--quiet", "--json"))
    victim, deadline = None, time.monotonic() + 60
    while victim is None and time.monotonic() < deadline and tune.poll() is None:
        try:
            running = the_study(database).get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        except (AssertionError, KeyError):
            running = []        # not registered yet
        claimed = [t for t in running if t.user_attrs.get(CLAIM) is not None]
        if claimed:
            victim = pid_of(claimed[0], CLAIM)
            os.kill(victim, signal.SIGKILL)     # mid-trial: it holds a claimed, running trial
        time.sleep(0.02)
    assert victim is not None, "no worker ever held a claimed trial"
    code, out, err = finish(tune)
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    study = the_study(database)
    trials = study.get_trials(deepcopy=False)
    lost = [t for t in trials if t.user_attrs.get(CLAIM) is not None and pid_of(t, CLAIM) == victim
            and t.state.name != "COMPLETE"]
    assert lost and all(t.state.name == "FAIL" for t in lost)           # failed once its lease ran out
    # ... and those its claims had admitted within the budget (all, unless it died while checking its
    # claims) asked again and measured by the other worker
    reasked = {t.user_attrs[REASK]: t for t in trials if REASK in t.user_attrs}
    lost_by_number = {t.number: t for t in lost}
    assert reasked and set(reasked) <= set(lost_by_number), (sorted(reasked), sorted(lost_by_number))
    for number, again in reasked.items():
        assert again.state.name == "COMPLETE" and again.params == lost_by_number[number].params
        assert pid_of(again, CLAIM) != victim
    done = measured(study)
    assert len(done) == 16 == summary["trials"] and summary["expired"] == len(reasked)
    assert len({json.dumps(t.params, sort_keys=True) for t in done}) == 16
    assert not [t for t in trials if t.state.name in ("RUNNING", "WAITING")]
    lines = log.read_text().splitlines(keepends=True)
    assert lines and all(line.endswith("\n") and json.loads(line) for line in lines)    # only whole lines


def test_a_late_report_of_an_expired_trial_is_ignored_with_a_warning(database):
    import optuna

    from tuner.lease import CLAIM, REASK, LeasedStudy, Leases, claim
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(storage=database, study_name="s", direction="maximize")
    study.set_user_attr("tensortune.budget", 1)      # (a claim within the budget is asked again)
    mine = Leases(study, lease_s=0.2)
    mine.renew()
    shared = LeasedStudy(study, mine)
    trial = shared.ask()
    trial.suggest_int("x", 0, 9)
    claim([trial], mine.owner)
    time.sleep(0.3)                           # no renewal: the lease runs out
    assert Leases(study, lease_s=0.2).sweep() == [trial.number]
    with pytest.warns(RuntimeWarning, match="failed by another process"):
        assert shared.tell(trial, 1.0) is None
    assert mine.late == 1
    trials = study.get_trials(deepcopy=False)
    assert trials[0].state.name == "FAIL" and trials[0].user_attrs.get(CLAIM)
    assert trials[1].state.name == "WAITING" and trials[1].user_attrs[REASK] == 0     # asked again
    assert study.ask().number == 1                                                     # and taken first


def test_workers_need_a_shared_storage(tmp_path, capsys):
    from tuner.cli import main
    log = str(tmp_path / "l.jsonl")
    assert main(["tune", *MATMUL, "--trials", "2", "--log", log, "--workers", "2"]) == 2
    assert main(["worker", "--storage", f"sqlite:///{tmp_path}/s.db", "--log", log]) == 2
    assert main(["worker", "--storage", "postgresql://postgres@127.0.0.1:1/none", "--log", log,
                 "--idle-exit", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("tensortune: error: ") for line in err), err
    assert "--workers needs" in err[0] and "--storage must be" in err[1] and "storage" in err[2]
