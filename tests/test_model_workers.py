"""Whole-model tuning by several workers sharing one PostgreSQL storage (``database`` fixture, tests/conftest.py).

A 3-task MLP (Gemm+Relu 256->512, Gemm+Relu 512->256, Gemm 256->128, batch 16), a few trials,
``tensortune tune-model --storage URL --workers 2`` as users run it.
"""
from __future__ import annotations

import json
import os
import signal
import time

import onnx
import pytest

from tests.onnx_models import mlp
from tests.test_workers import cli, finish, measured, pid_of, popen
from tuner.cli import main


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "mlp3.onnx"
    onnx.save(mlp(batch=16, sizes=(256, 512, 256, 128)), path)
    return str(path)


def studies(url) -> list:
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return [optuna.load_study(study_name=s.study_name, storage=url)
            for s in optuna.get_all_study_summaries(url, include_best_trial=False)]


def tune_model(model, url, log, *extra):
    return popen(cli("tune-model", model, "--trials", "12", "--storage", url, "--workers", "2", "--threads", "1",
                     "--log", str(log), "--rounds", "1", "--json", *extra))


def test_two_workers_tune_different_tasks_of_one_model(model, database, tmp_path):
    from tuner.lease import CLAIM
    log = tmp_path / "l.jsonl"
    proc = tune_model(model, database, log, "--lease", "20")
    code, out, err = finish(proc, timeout=240)
    assert code == 0, err[-3000:]
    res = json.loads(out)
    assert res["trials"] == 12 == sum(t["trials"] for t in res["tasks"])
    assert res["outputs_match_untuned"] and res["mismatch"] is None
    # every task's study: its measured trials are its rounds' trials; together the budget, none twice
    per_study, who = {}, {}
    for study in studies(database):
        done = measured(study)
        assert len({json.dumps(t.params, sort_keys=True) for t in done}) == len(done)
        assert not [t for t in study.get_trials(deepcopy=False) if t.state.name in ("RUNNING", "WAITING")]
        per_study[study.study_name] = len(done)
        who[study.study_name] = {pid_of(t, CLAIM) for t in done}
    assert len(per_study) == 3 and sum(per_study.values()) == 12
    assert sorted(per_study.values()) == sorted(t["trials"] for t in res["tasks"])
    workers = set().union(*who.values())
    assert len(workers) == 2 and proc.pid not in workers        # both workers measured; the coordinator did not
    # at least two tasks measured by different workers
    assert any(wa != wb for a in who for b in who if a != b for wa in who[a] for wb in who[b]), who
    # the workers' records landed in the run's log, each saying which task and which worker
    records = [json.loads(line) for line in log.read_text().splitlines()]
    trials = [r for r in records if not r.get("remeasured") and not r.get("confirmed") and not r.get("model_choice")
              and r["meta"].get("origin") not in ("default", "ask")]
    assert len(trials) == 12
    assert {int(r["meta"]["worker"].split(":")[1]) for r in trials} == workers
    assert {r["meta"]["task"] for r in trials} == {0, 1, 2} and all(r["meta"]["model"] == "mlp3.onnx" for r in trials)
    assert any(r.get("confirmed") for r in records)       # the workers re-timed their finalists
    # the tuned kernels of the log compute what numpy computes
    import numpy as np

    from tuner.model_api import compile_model
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 256)).astype(np.float32)
    got = compile_model(model, log=str(log), threads=1).run({"input": x})["output"]
    ref = _numpy_mlp(model, x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def _numpy_mlp(path, x):
    import numpy as np
    from onnx import numpy_helper
    m = onnx.load(path)
    w = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "Gemm":
            x = x @ w[node.input[1]].T + w[node.input[2]]
        elif node.op_type == "Relu":
            x = np.maximum(x, 0)
    return x


def test_a_killed_worker_does_not_stop_the_model_run(model, database, tmp_path):
    import optuna

    from tuner.lease import CLAIM
    log = tmp_path / "l.jsonl"
    proc = tune_model(model, database, log, "--lease", "2", "--quiet")
    victim, deadline = None, time.monotonic() + 120
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        try:
            running = [t for s in studies(database)
                       for t in s.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))]
        except KeyError:
            running = []        # a study being created
        claimed = [t for t in running if t.user_attrs.get(CLAIM) is not None]
        if claimed:
            victim = pid_of(claimed[0], CLAIM)
            os.kill(victim, signal.SIGKILL)     # mid-trial: it holds a claimed, running trial
        time.sleep(0.05)
    assert victim is not None, "no worker ever held a claimed trial"
    code, out, err = finish(proc, timeout=240)
    assert code == 0, err[-3000:]
    res = json.loads(out)
    assert res["trials"] == 12 and res["outputs_match_untuned"]
    done = [t for s in studies(database) for t in measured(s)]
    assert len(done) == 12
    assert any(pid_of(t, CLAIM) != victim for t in done)


def test_bad_shared_model_runs_are_one_line(model, tmp_path, capsys):
    log = str(tmp_path / "l.jsonl")
    assert main(["tune-model", model, "--log", log, "--workers", "2"]) == 2
    assert main(["tune-model", model, "--log", log, "--workers", "2", "--storage", f"sqlite:///{tmp_path}/s.db"]) == 2
    assert main(["tune-model", model, "--log", log, "--storage", "postgresql://postgres@127.0.0.1:1/none"]) == 2
    assert main(["tune-model", model, "--log", log, "--workers", "0", "--storage", "postgresql://x@127.0.0.1:1/y"]) == 2
    assert main(["worker", "--storage", "postgresql://postgres@127.0.0.1:1/none", "--log", log, "--model-run", "r"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 5 and all(line.startswith("tensortune: error: ") for line in err), err
    assert "--workers needs" in err[0] and "--workers needs" in err[1] and "storage" in err[2]
    assert "--workers must be" in err[3] and "storage" in err[4]


def test_a_sqlite_storage_still_tunes_a_model_in_one_process(model, tmp_path, capsys):
    db = tmp_path / "s.db"
    args = ["tune-model", model, "--trials", "6", "--storage", f"sqlite:///{db}", "--log", str(tmp_path / "l.jsonl"),
            "--threads", "1", "--rounds", "1", "--json"]
    assert main(args) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["trials"] == 6 and res["outputs_match_untuned"] and res["by_worker"] is None
    import optuna
    assert len(optuna.get_all_study_summaries(f"sqlite:///{db}")) == 3      # a study per task, kept in the file


def test_a_worker_joins_a_model_run_that_measures_itself(model, database, tmp_path):
    from tuner.lease import CLAIM
    cpus = sorted(os.sched_getaffinity(0))
    # the coordinator measures too (no --workers); a plain `tensortune worker` joins the run's tasks
    worker = popen(cli("worker", "--storage", database, "--threads", "1", "--log", str(tmp_path / "w.jsonl"),
                       "--idle-exit", "15", "--lease", "20"), cores=[cpus[-1]])
    proc = popen(cli("tune-model", model, "--trials", "10", "--storage", database, "--threads", "1", "--log",
                     str(tmp_path / "l.jsonl"), "--rounds", "1", "--json", "--lease", "20"), cores=[cpus[0]])
    code, out, err = finish(proc, timeout=240)
    assert code == 0, err[-3000:]
    res = json.loads(out)
    code, _, werr = finish(worker, timeout=60)
    assert code == 0, werr[-2000:]
    done = [t for s in studies(database) for t in measured(s)]
    assert len(done) == 10 == res["trials"]
    assert {pid_of(t, CLAIM) for t in done} == {proc.pid, worker.pid}       # both measured
    assert sum(res["by_worker"].values()) == 10
