"""`tensortune tune --storage postgresql://...` against a real PostgreSQL server.

The server: ``TENSORTUNE_TEST_POSTGRES`` (``.ci/run`` starts one and sets it), else a
throwaway one started here (:mod:`tests.pg_server`). Under CI a missing server fails
these tests; elsewhere they skip, saying why no server could be started.
"""
from __future__ import annotations

import json
import os
import tempfile
import uuid

import numpy as np
import pytest

from tests import pg_server


@pytest.fixture(scope="module")
def postgres_url():
    url = os.environ.get("TENSORTUNE_TEST_POSTGRES")
    if url:
        yield url
        return
    folder = tempfile.mkdtemp(prefix="tensortune-pg-")
    try:
        url = pg_server.start(folder)
    except pg_server.ServerUnavailable as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide a PostgreSQL server: {err}")
        pytest.skip(f"no PostgreSQL server: {err}")
    try:
        yield url
    finally:
        pg_server.stop(folder)


@pytest.fixture()
def database(postgres_url):
    """A fresh database of its own for each test (studies of one workload share a name)."""
    import psycopg
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + f"/{name}"


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
