"""A model too small to pay for waking a second thread runs on one (decision 078); others keep theirs."""
import dataclasses

import numpy as np
import pytest

from graph.interpret import run
from graph.onnx_import import load_onnx
from tests import onnx_models
from tuner import model_threads
from tuner.model_api import compile_model
from tuner.model_compile import plan_graph

pytestmark = pytest.mark.own_thread_choice


def _check(model, graph):
    x = np.random.default_rng(5).standard_normal(graph.types["input"].shape).astype("float32")
    want, got = run(graph, {"input": x}), model.run({"input": x})
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threads", [2, None])
def test_a_tiny_conv_model_runs_on_one_thread_and_says_why(threads, monkeypatch):
    real = model_threads.compile_target
    monkeypatch.setattr(model_threads, "compile_target", lambda: dataclasses.replace(real(), cores=2))   # 2 cores
    graph = load_onnx(onnx_models.grouped_conv(channels=16, size=10, groups=1, kernel=1))
    seconds = model_threads.serial_estimate(plan_graph(graph).lowered)
    assert 0 < seconds < model_threads.SERIAL_MODEL_SECONDS
    model = compile_model(graph, threads=threads)
    assert model.threads == 1
    assert model.info["serial"].startswith("runs on 1 thread") and f"{seconds * 1e6:.0f} us" in model.info["serial"]
    _check(model, graph)


def test_a_model_with_enough_work_keeps_the_threads_asked_for():
    graph = load_onnx(onnx_models.grouped_conv(channels=64, size=28, groups=1))
    assert model_threads.serial_estimate(plan_graph(graph).lowered) > model_threads.SERIAL_MODEL_SECONDS
    model = compile_model(graph, threads=2)
    assert model.threads == 2 and model.info["serial"] is None
    _check(model, graph)


def test_one_thread_asked_for_is_not_a_choice_to_report():
    model = compile_model(load_onnx(onnx_models.grouped_conv(channels=16, size=10, groups=1, kernel=1)), threads=1)
    assert model.threads == 1 and model.info["serial"] is None


def test_the_estimate_grows_with_the_work():
    small = model_threads.serial_estimate(plan_graph(load_onnx(onnx_models.grouped_conv(16, size=10, groups=1))).lowered)
    large = model_threads.serial_estimate(plan_graph(load_onnx(onnx_models.grouped_conv(16, size=20, groups=1))).lowered)
    assert 3.5 < large / small < 4.5      # four times the outputs, four times the work and bytes
