"""Workloads carried as their tensor expression (a model's fused groups): JSON form round trip,
tuning, logging and replay under the same key."""
import json

import numpy as np
import pytest

from logs import TuningLog
from schedules import Schedule
from tensorir import ops, te
from tensorir.ops.registry import get_workload, list_workloads
from tensorir.te.deserialize import workload_from_json
from tensorir.te.evaluate import evaluate
from tensorir.te.serialize import SerializeError, workload_key, workload_to_json
from tuner.search import TuneConfig, Tuner
from tuner.spec import SpecError, WorkloadSpec


def _names(w):
    return w.name if hasattr(w, "name") else w


@pytest.mark.parametrize("name", [_names(w) for w in list_workloads()])
def test_json_form_rebuilds_the_same_workload(name):
    wl = get_workload(name)
    tensors = wl.make(**wl.bind())
    again = workload_from_json(json.loads(json.dumps(workload_to_json(tensors))))
    assert workload_key(again) == workload_key(tensors)
    assert str(Schedule(again).lower()) == str(Schedule(tensors).lower())   # same loop names: traces replay
    inputs = [np.random.default_rng(0).uniform(-1, 1, t.shape).astype(t.dtype) for t in tensors if t.is_placeholder]
    for a, b in zip(evaluate(again, inputs), evaluate(tensors, inputs)):
        np.testing.assert_array_equal(a, b)


def test_non_finite_constants_and_selects_round_trip():
    X = te.placeholder((4, 5), "float32", "X")
    Y = te.compute((4, 5), lambda i, j: te.if_then_else(X[i, j] > 0, X[i, j], te.const(float("-inf"), "float32")), "Y")
    again = workload_from_json(json.loads(json.dumps(workload_to_json([X, Y]))))
    assert workload_key(again) == workload_key([X, Y])


def test_malformed_forms_are_one_line_errors():
    with pytest.raises(SerializeError, match="not a workload in format"):
        workload_from_json({"format": "other"})
    form = workload_to_json(ops.matmul(8, 8, 8))
    form["stages"][2]["body"] = ["frobnicate", 1]
    with pytest.raises(SerializeError, match="unknown expression kind 'frobnicate'"):
        workload_from_json(form)
    with pytest.raises(SpecError, match="one parameter, 'workload'"):
        WorkloadSpec("expr:x", {"workload": 3})


def test_an_expression_workload_tunes_logs_and_replays(tmp_path):
    tensors = ops.conv2d(1, 4, 9, 9, 8, 3, 3, stride=1, pad=1)
    spec = WorkloadSpec.from_tensors(tensors, "conv_small")
    assert spec.label == "conv_small" and spec.key == workload_key(tensors)
    log = TuningLog(tmp_path / "log.jsonl")
    result = Tuner(spec, TuneConfig(trials=4, batch_size=4, finalists=0, cost_model=False), log=log).run()
    assert result.trials == 4 and result.best is not None
    rec = result.best
    assert rec.workload_label == "conv_small"
    again = WorkloadSpec(rec.workload_name, dict(rec.workload_params))    # as transfer and reports rebuild it
    assert again.key == spec.key
    kernel = Schedule.from_json(again.tensors(), rec.trace).build()
    inputs = spec.inputs(1)
    out = spec.empty_outputs()
    kernel(*inputs, *out)
    np.testing.assert_allclose(out[0], spec.reference(inputs)[0], rtol=1e-4, atol=1e-4)
