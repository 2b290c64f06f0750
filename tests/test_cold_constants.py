"""Weights evicted from the caches before each timed call, as a model runs its kernels (decision 031)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from logs import TuningLog
from tensorir.runtime import cacheflush
from tuner.measure import MeasureConfig, Measurer
from tuner.search import Tuner
from tuner.spec import WorkloadSpec
from tuner.worker import _Runner

from .test_prepack_measure import _packed_kernel
from .test_tuner import small_config


def test_evict_keeps_values_and_takes_any_view():
    a = np.arange(10_000, dtype=np.float32)
    before = a.copy()
    cacheflush.evict([a, a[::-7], a[::-1], a[:0], np.zeros((0, 3)), None])
    assert np.array_equal(a, before)
    assert cacheflush.method() in ("clflushopt", "clflush", "read-through")
    assert cacheflush.private_cache_bytes() >= 64 * 1024


@pytest.mark.parametrize("bad", ["all", 1, None, "yes"])
def test_flush_cache_values_are_checked(bad):
    with pytest.raises(ValueError, match="flush_cache"):
        MeasureConfig(flush_cache=bad)


def _runner(mode, constants):
    r = _Runner.__new__(_Runner)
    r.cfg = {"flush_cache": mode}
    r.inputs = [np.zeros(3), np.ones(4), np.ones(5)]
    r.outputs = [np.zeros(2)]
    r.constants = constants
    return r


def test_the_runner_evicts_constants_not_read_through_their_pack():
    packed = np.full(8, 2.0)
    r = _runner("constants", [1, 2])
    # input 1 is read only through its packed copy: the copy and input 2 are evicted
    assert [a.size for a in r._cold_arrays([packed], [1])] == [5, 8]
    assert [a.size for a in r._cold_arrays([], [])] == [4, 5]
    assert _runner("constants", [])._cold_arrays([], []) == []
    assert _runner(False, [1])._cold_arrays([packed], []) == []
    assert [a.size for a in _runner(True, [])._cold_arrays([packed], [])] == [3, 4, 5, 8, 2]


@pytest.mark.parametrize("mode", ["constants", True])
def test_cold_measurement_checks_and_times(mode):
    spec = WorkloadSpec.parse("dense", ["batch=12", "out_features=40", "in_features=36"])
    cfg = MeasureConfig(repeat=2, min_repeat_ms=2, timeout_s=5.0, screen=None, flush_cache=mode)
    with Measurer(spec, cfg, constants=[1]) as m:
        res = m.measure([_packed_kernel(spec, ["W"])])[0]
    assert res.ok, res.error_msg
    assert len(res.costs) == 2 and all(c > 0 for c in res.costs)


def test_tuning_with_constants_records_cold_timing(tmp_path):
    spec = WorkloadSpec.parse("dense", ["batch=16", "out_features=48", "in_features=40"])
    Tuner(spec, small_config(4, constants=("W",)), log=TuningLog(tmp_path / "t.jsonl")).run()
    records = [json.loads(line) for line in open(tmp_path / "t.jsonl")]
    assert records and all(r["meta"].get("cold") == "constants" for r in records)
    Tuner(spec, small_config(3), log=TuningLog(tmp_path / "w.jsonl")).run()
    assert all("cold" not in json.loads(line)["meta"] for line in open(tmp_path / "w.jsonl"))
