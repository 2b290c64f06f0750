"""Tuning with constant inputs (weights) packed outside the timed kernel, as model builds pack them."""
from __future__ import annotations

import json

import numpy as np
import pytest

from logs import TuningLog
from logs.apply import heuristic_schedule
from tuner import measure as measure_module
from tuner.cli import main
from tuner.measure import MeasureConfig, Measurer
from tuner.prepack import PackedKernel, constant_indices, packed_arrays, prepack
from tuner.search import Tuner
from tuner.spec import WorkloadSpec

from .test_tuner import small_config

CONFIG = MeasureConfig(repeat=2, min_repeat_ms=2, timeout_s=5.0, screen=None)


def _packed_kernel(spec, const):
    tensors = spec.tensors()
    pre = prepack(tensors, heuristic_schedule(tensors), constant_indices(tensors, const))
    assert pre is not None
    return PackedKernel(pre.schedule.lower(), pre)


@pytest.mark.parametrize("name, params, const", [
    ("dense", ["batch=20", "out_features=72", "in_features=50"], ["W"]),
    ("conv2d", ["C=20", "H=9", "W=11", "K=36", "stride=2"], ["Wt"]),
])
def test_a_packed_kernel_is_measured_and_checked(name, params, const):
    spec = WorkloadSpec.parse(name, params)
    with Measurer(spec, CONFIG) as m:
        res = m.measure([_packed_kernel(spec, const)])[0]
    assert res.ok, res.error_msg


def test_wrongly_packed_constants_are_caught(monkeypatch):
    spec = WorkloadSpec.parse("dense", ["batch=16", "out_features=40", "in_features=24"])
    real = packed_arrays
    monkeypatch.setattr(measure_module, "packed_arrays", lambda pre, ins, cache=None: [
        np.flip(a).copy() for a in real(pre, ins)])
    with Measurer(spec, CONFIG) as m:
        res = m.measure([_packed_kernel(spec, ["W"])])[0]
    assert res.error_kind == "wrong_answer"


def test_tuner_with_constants_logs_prepacked_records(tmp_path):
    spec = WorkloadSpec.parse("dense", ["batch=16", "out_features=64", "in_features=48"])
    log = TuningLog(tmp_path / "t.jsonl")
    result = Tuner(spec, small_config(6, constants=("W",)), log=log).run()
    assert result.best is not None and result.best.ok
    records = [json.loads(line) for line in open(tmp_path / "t.jsonl")]
    packing = [r for r in records if any(i[0] == "pack" and i[1][0] == "W" for i in r["trace"]["instructions"])]
    assert packing and all(r["meta"].get("prepacked") == ["W"] for r in packing)
    assert all("prepacked" not in r["meta"] for r in records if r not in packing)


def test_cli_const(tmp_path, capsys):
    log = str(tmp_path / "c.jsonl")
    assert main(["tune", "dense", "batch=8", "out_features=32", "in_features=16", "--trials", "4", "--const", "W", "--log", log,
                 "--threads", "1"]) == 0
    assert "constants     W: packed once" in capsys.readouterr().out
    assert main(["tune", "dense", "batch=8", "out_features=32", "in_features=16", "--const", "B", "--log", log]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "tensortune: error: --const: no input named 'B' (the workload's inputs: X, W, bias)"
