"""`tensortune tune --storage postgresql://...` against a real PostgreSQL server.

The server and a fresh database per test: the ``postgres_url`` and ``database`` fixtures of
tests/conftest.py (under CI a missing server fails these tests; elsewhere they skip, saying why).
"""
from __future__ import annotations

import json

import numpy as np


def test_tune_keeps_its_study_in_postgresql_and_resumes_from_it(database, tmp_path, capsys):
    import optuna
    from tuner.cli import main
    args = ["tune", "matmul", "M=24", "N=20", "K=16", "--trials", "6", "--no-cost-model", "--quiet", "--json",
            "--storage", database, "--log", str(tmp_path / "l.jsonl"), "--threads", "1"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    studies = optuna.get_all_study_summaries(storage=database)
    assert len(studies) == 1
    done = [t for t in optuna.load_study(study_name=studies[0].study_name, storage=database).trials
            if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) >= 6 and all(t.value > 0 for t in done)
    # the same command continues the stored study: 6 more trials, none left running
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    trials = optuna.load_study(study_name=studies[0].study_name, storage=database).trials
    assert len([t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]) >= 12
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert second["best_gflops"] >= first["best_gflops"] * 0.5    # (timing noise; the log keeps the best)
    # the best schedule builds and computes the product
    from logs import build
    from tuner.spec import WorkloadSpec
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=20", "K=16"])
    k = build(spec.tensors(), log=str(tmp_path / "l.jsonl"), threads=1)
    a, b = (np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in ((24, 16), (16, 20)))
    c = np.zeros((24, 20), np.float32)
    k(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_an_unreachable_server_is_one_line(tmp_path, capsys):
    from tuner.cli import main
    code = main(["tune", "matmul", "M=8", "N=8", "K=8", "--trials", "2", "--quiet",
                 "--storage", "postgresql://postgres@127.0.0.1:1/none", "--log", str(tmp_path / "l.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "storage" in err.lower(), err


def test_losing_the_schema_race_in_any_of_its_forms_is_retried():
    """Processes opening a fresh database together lose the race to create Optuna's tables either on a
    unique index (IntegrityError) or, when the other committed between check and CREATE, as a
    ProgrammingError (DuplicateTable, DuplicateObject); both are retried, other errors are not."""
    import psycopg
    import pytest
    from sqlalchemy import exc
    from tuner.study import retry_schema_race
    for orig in (psycopg.errors.DuplicateObject('type "studydirection" already exists'),
                 psycopg.errors.DuplicateTable('relation "studies" already exists'),
                 psycopg.errors.UniqueViolation("duplicate key value")):
        wrapper = exc.IntegrityError if isinstance(orig, psycopg.errors.UniqueViolation) else exc.ProgrammingError
        calls = []

        def opens_second_time():
            calls.append(1)
            if len(calls) == 1:
                raise wrapper("CREATE ...", {}, orig)
            return "storage"
        assert retry_schema_race(opens_second_time) == "storage" and len(calls) == 2
    calls = []

    def bad_sql():
        calls.append(1)
        raise exc.ProgrammingError("SELECT", {}, psycopg.errors.UndefinedTable("no such table"))
    with pytest.raises(exc.ProgrammingError):
        retry_schema_race(bad_sql)
    assert len(calls) == 1


def _open_together(url, barrier, results):
    from tuner.study import connect
    barrier.wait()
    try:
        connect(url)
        results.put("ok")
    except Exception as err:  # noqa: BLE001 - reported to the test
        results.put(f"{type(err).__name__}: {err}")


def test_processes_opening_a_fresh_database_together_all_get_the_storage(database):
    # without the retry, 2 of 6 such processes fail on every try here (creating Optuna's enum type)
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(6), ctx.Queue()
    procs = [ctx.Process(target=_open_together, args=(database, barrier, results)) for _ in range(6)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert got == ["ok"] * 6, got
