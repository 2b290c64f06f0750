"""Shared fixtures: small workloads, a golden-text checker and a numerics checker."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from tensorir import te
from tensorir.target import Target

GOLDEN = pathlib.Path(__file__).parent / "golden"
# Golden loop nests are lowered for this fixed CPU (the vector_chunks pass cuts loops to its
# 8-lane float32 vectors), so that they do not depend on the machine running the tests.
GOLDEN_TARGET = Target("haswell", "+avx,+avx2,+fma", vector_bits=256, cores=2, threads=2)


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", help="rewrite tests/golden/*.txt from the output")


@pytest.fixture
def golden(request):
    """``golden(name, text)``: compare with tests/golden/<name>.txt (``--update-golden`` rewrites)."""
    update = request.config.getoption("--update-golden")

    def check(name: str, text: str):
        path = GOLDEN / f"{name}.txt"
        if update or not path.exists():
            if not update:
                pytest.fail(f"golden file {path} is missing; run pytest --update-golden and review the diff")
            path.write_text(text.rstrip() + "\n")
            return
        assert text.rstrip() == path.read_text().rstrip(), f"loop nest differs from {path}"
    return check


def matmul_wl(M=37, N=45, K=23, dtype="float32"):
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return [A, B, C]


def chain_wl(n=50, m=30):
    """x -> y = x * 2 + 1 -> z = exp(y) * x (two elementwise stages)."""
    x = te.placeholder((n, m), "float32", "x")
    y = te.compute((n, m), lambda i, j: x[i, j] * 2.0 + 1.0, "y")
    z = te.compute((n, m), lambda i, j: te.tanh(y[i, j]) * x[i, j], "z")
    return [x, z]


def conv_wl(N=1, C=3, H=11, W=9, K=5, R=3, S=3, pad=1):
    X = te.placeholder((N, C, H, W), "float32", "X")
    Wt = te.placeholder((K, C, R, S), "float32", "W")
    P = te.compute((N, C, H + 2 * pad, W + 2 * pad),
                   lambda n, c, h, w: te.if_then_else(
                       te.all(h >= pad, h < H + pad, w >= pad, w < W + pad), X[n, c, h - pad, w - pad], 0.0),
                   "pad")
    rc, rr, rs = te.reduce_axis(C, "rc"), te.reduce_axis(R, "rr"), te.reduce_axis(S, "rs")
    O = te.compute((N, K, H, W), lambda n, k, h, w: te.sum(P[n, rc, h + rr, w + rs] * Wt[k, rc, rr, rs],
                                                           axis=[rc, rr, rs]), "conv")
    return [X, Wt, O]


def random_inputs(tensors, seed=0):
    from tests.fuzz.workloads import make_inputs  # one input generator for the suite and the fuzzer
    return make_inputs(tensors, seed)


def run_schedule(sch, seed=0):
    """Build ``sch`` and run it on random inputs; returns (inputs, outputs)."""
    from tensorir.runtime import build
    ins = random_inputs(sch.tensors, seed)
    outs = [np.full(t.shape, np.nan if t.dtype != "int32" else -7, dtype=t.dtype)
            for t in sch.tensors if not t.is_placeholder]
    kernel = build(sch.lower())
    kernel(*ins, *outs)
    return ins, outs


def check_workload(sch, workload: str, params: dict, seed: int = 1):
    """Build schedule ``sch`` of registered workload ``workload`` and compare its outputs with the
    workload's numpy reference on seeded inputs."""
    from tensorir.ops.registry import get_workload
    w = get_workload(workload)
    ins = w.inputs(seed=seed, **params)
    outs = [np.full(t.shape, np.nan, t.dtype) for t in sch.tensors if not t.is_placeholder]
    sch.build()(*ins, *outs)
    for got, ref in zip(outs, w.reference(ins, **params)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def check_against_evaluator(sch, rtol=1e-4, atol=1e-4, seed=0):
    """The scheduled kernel computes what the numpy evaluator of the tensor expression computes."""
    from tensorir.te.evaluate import evaluate
    ins, outs = run_schedule(sch, seed)
    want = evaluate(list(sch.tensors), ins)
    for got, ref in zip(outs, want):
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server's URL: ``TENSORTUNE_TEST_POSTGRES`` (``.ci/run`` starts one), else one
    started here for the session (:mod:`tests.pg_server`).  Under CI a missing server fails the
    tests that need one; elsewhere they skip, saying why no server could be started."""
    import os
    import tempfile

    from tests import pg_server
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
    """The URL of a fresh database of its own on the test server (studies of one workload share a name)."""
    import uuid

    import psycopg
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(autouse=True)
def _models_run_on_the_threads_asked_for(request, monkeypatch):
    """Test models are small: without this they would run on one thread (decision 078) and the tests
    asking for 2 threads would no longer run parallel code. Tests marked ``own_thread_choice`` keep it."""
    if request.node.get_closest_marker("own_thread_choice") is None:
        monkeypatch.setattr("tuner.model_threads.SERIAL_MODEL_SECONDS", 0.0)
