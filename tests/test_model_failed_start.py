"""A kernel whose heuristic start fails to build runs the naive nest: correct, and reported."""
import warnings

import numpy as np

import logs.apply
from graph.interpret import run
from logs import TuningFallbackWarning
from tests.test_model_runtime import resnet_block
from tuner.model_api import compile_model


def _failed_start_warnings(record):
    return [w for w in record if issubclass(w.category, TuningFallbackWarning)
            and "heuristic start failed" in str(w.message)]


def test_a_failed_heuristic_start_is_named_in_one_warning_and_still_computes(monkeypatch, tmp_path):
    real = logs.apply.heuristic_schedule

    def start(tensors):      # the 3x3 convs' starts fail (a stand-in for a start that does not lower)
        if any(tuple(t.shape[2:4]) == (3, 3) for t in tensors):  # (K, C, 3, 3) or blocked (K/b, C/b, 3, 3, ...)
            raise RuntimeError("start broke here")
        return real(tensors)

    monkeypatch.setattr(logs.apply, "heuristic_schedule", start)
    graph = resnet_block()
    x = np.random.default_rng(3).standard_normal((1, 8, 10, 10)).astype("float32")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = compile_model(graph, log=[str(tmp_path / "empty.jsonl")], threads=1)
    found = _failed_start_warnings(record)
    assert len(found) == 1, [str(w.message) for w in record]
    message = str(found[0].message)
    assert message.startswith("resblock: ") and "start broke here" in message and "naive loop nest" in message
    naive = model.info["schedules"].get("naive", 0)
    assert naive >= 1 and f"{naive} kernel(s)" in message
    groups = {g.name for g in model.info["plan"].groups}
    assert any(name in message for name in groups)
    want = run(graph, {"x": x})
    got = model.run({"x": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def test_a_model_whose_starts_build_warns_about_none(tmp_path):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model = compile_model(resnet_block(), log=[str(tmp_path / "empty.jsonl")], threads=1)
    assert not _failed_start_warnings(record)
    assert "naive" not in model.info["schedules"]
