"""Tests of the tuning-log layer: records, the append-only log, paths and lookup."""
from __future__ import annotations

import datetime
import json
import math
import multiprocessing
import os
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logs import (ERROR_KINDS, FORMAT_VERSION, LogError, LogWarning, RecordError,
                  RecordVersionError, TuningLog, TuningRecord, clear_cache,
                  default_log_path, default_log_paths, find_best, pretuned_dir, target_key)

ZEN2 = {"kind": "llvm", "cpu": "znver3", "features": "+avx2,+fma", "threads": 2}
ZEN1 = {"kind": "llvm", "cpu": "znver3", "features": "+avx2,+fma", "threads": 1}
SKX = {"kind": "llvm", "cpu": "skylake-avx512", "features": "+avx512f", "threads": 4}
MATMUL_KEY = "3fa2c1d09b7e44aa"


def make(cost=1e-3, key=MATMUL_KEY, target=ZEN2, tile=32, error=None, **kw):
    """A small valid record; ``error`` makes it a failed one."""
    fields = dict(
        workload_key=key, workload_name="matmul",
        workload_params={"M": 64, "N": 64, "K": 64}, target=dict(target),
        trace={"instructions": [["split", ["C.i"], {"factor": tile}, ["C.i.0", "C.i.1"]]],
               "decisions": {"tile": tile}},
        decisions={"tile": tile},
        costs=[] if error else [cost, cost * 1.1, cost * 0.9],
        error_kind=error, error_msg="boom" if error else None,
        compile_seconds=0.2, run_seconds=0.05, flops=2 * 64 ** 3,
        timestamp="2026-11-21T12:00:00.000Z", tensortune_version="0.1.0")
    fields.update(kw)
    return TuningRecord(**fields)


@pytest.fixture(autouse=True)
def _fresh_lookup_cache():
    clear_cache()
    yield
    clear_cache()


# --- records ------------------------------------------------------------------------
def test_record_round_trip_and_line_format():
    rec = make()
    line = rec.to_json_line()
    assert "\n" not in line
    obj = json.loads(line)
    assert list(obj)[:2] == ["version", "workload_key"]
    assert obj["version"] == FORMAT_VERSION
    assert TuningRecord.from_json(line) == rec
    assert TuningRecord.from_json(obj) == rec


def test_record_derived_values():
    rec = make(cost=1e-3)
    assert rec.ok
    assert rec.median_cost == pytest.approx(1e-3)
    assert rec.gflops == pytest.approx(2 * 64 ** 3 / 1e-3 / 1e9)
    assert rec.workload_label == "matmul(M=64, N=64, K=64)"
    bad = make(error="timeout")
    assert not bad.ok and bad.median_cost == math.inf and bad.gflops is None
    assert make(flops=None).gflops is None


def test_record_defaults_fill_timestamp_and_version():
    rec = TuningRecord(workload_key="k", workload_name="n", workload_params={},
                       target=ZEN2, trace={}, costs=[1.0])
    assert rec.timestamp.endswith("Z") and rec.tensortune_version
    assert rec.costs == (1.0,)


@pytest.mark.parametrize("change, field", [
    ({"costs": ["fast"]}, "costs"),
    ({"costs": [-1.0]}, "costs"),
    ({"costs": []}, "costs"),                 # success needs a cost
    ({"error_kind": "exploded"}, "error_kind"),
    ({"workload_key": ""}, "workload_key"),
    ({"workload_params": [1, 2]}, "workload_params"),
    ({"target": {"cpu": "znver3", "threads": 0}}, "target.threads"),
    ({"timestamp": "yesterday"}, "timestamp"),
    ({"timestamp": "2026-11-21T12:00:00"}, "timestamp"),  # no UTC offset
    ({"compile_seconds": float("nan")}, "compile_seconds"),
    ({"flops": 1.5}, "flops"),
    ({"confirmed": "yes"}, "confirmed"),
])
def test_record_validation_names_the_field(change, field):
    with pytest.raises(RecordError, match=f"field '{field}'"):
        make(**change)


def test_from_json_reports_missing_fields_and_versions():
    obj = json.loads(make().to_json_line())
    del obj["costs"], obj["target"]
    with pytest.raises(RecordError, match="missing fields 'target', 'costs'"):
        TuningRecord.from_json(obj)
    with pytest.raises(RecordVersionError, match="format version 2"):
        TuningRecord.from_json({"version": 2})
    with pytest.raises(RecordError, match="not valid JSON"):
        TuningRecord.from_json('{"version": 1,')
    with pytest.raises(RecordError, match="expected a JSON object"):
        TuningRecord.from_json("[1, 2]")


def test_from_json_ignores_unknown_fields_of_same_version():
    obj = json.loads(make().to_json_line())
    obj["added_later"] = {"x": 1}
    assert TuningRecord.from_json(obj) == make()


def test_to_json_line_names_a_non_json_field():
    with pytest.raises(RecordError, match="field 'trace'"):
        make(trace={"instructions": [object()]}).to_json_line()


def test_target_key_matches_cpu_and_threads_not_features():
    assert target_key(ZEN2) == ("llvm", "znver3", 2)
    assert target_key({**ZEN2, "features": "+avx2"}) == target_key(ZEN2)
    assert target_key(ZEN1) != target_key(ZEN2)


json_scalars = (st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)
seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def records(draw):
    error = draw(st.none() | st.sampled_from(ERROR_KINDS))
    costs = draw(st.lists(seconds, min_size=0 if error else 1, max_size=5))
    return TuningRecord(
        workload_key=draw(st.text(min_size=1, max_size=20)),
        workload_name=draw(st.text(max_size=20)),
        workload_params=draw(st.dictionaries(st.text(max_size=5), json_values, max_size=4)),
        target={"kind": "llvm", "cpu": draw(st.text(max_size=10)),
                "features": draw(st.text(max_size=10)),
                "threads": draw(st.integers(1, 256))},
        trace={"instructions": draw(st.lists(json_values, max_size=5)),
               "decisions": draw(st.dictionaries(st.text(max_size=5), json_values,
                                                 max_size=4))},
        decisions=draw(st.dictionaries(st.text(max_size=5), json_values, max_size=4)),
        costs=costs, error_kind=error,
        error_msg=draw(st.none() | st.text(max_size=30)),
        compile_seconds=draw(seconds), run_seconds=draw(seconds),
        timestamp=draw(st.datetimes(timezones=st.just(datetime.timezone.utc))
                       ).isoformat(),
        tensortune_version=draw(st.text(max_size=8)),
        flops=draw(st.none() | st.integers(0, 2 ** 62)), confirmed=draw(st.booleans()))


@settings(max_examples=100, deadline=None)
@given(records())
def test_random_records_round_trip_exactly(rec):
    line = rec.to_json_line()
    assert "\n" not in line
    back = TuningRecord.from_json(line)
    assert back == rec
    assert back.to_json_line() == line


# --- the log file -------------------------------------------------------------------
def test_append_and_read(tmp_path):
    path = tmp_path / "deep" / "er" / "tuning.jsonl"   # directories are created
    log = TuningLog(path)
    recs = [make(cost=c) for c in (3e-3, 1e-3, 2e-3)]
    for rec in recs:
        log.append(rec)
    text = path.read_text()
    assert text.endswith("\n") and text.count("\n") == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert log.records() == recs
        assert list(log) == recs


def test_append_is_one_write_and_fsynced(tmp_path, monkeypatch):
    log = TuningLog(tmp_path / "t.jsonl")
    calls = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(os, "write", lambda fd, b: calls.append("write") or real_write(fd, b))
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    log.append(make())
    assert calls == ["write", "fsync"]


def test_torn_last_line_is_skipped_and_next_append_starts_fresh(tmp_path):
    path = tmp_path / "t.jsonl"
    log = TuningLog(path)
    log.append(make(cost=1e-3))
    full = make(cost=2e-3).to_json_line()
    with open(path, "a") as f:
        f.write(full[: len(full) // 2])       # a writer killed mid-line
    with pytest.warns(LogWarning, match=r"skipped 1 of 2 lines .*1 incomplete last line"):
        assert log.records() == [make(cost=1e-3)]
    log.append(make(cost=3e-3))
    with pytest.warns(LogWarning, match=r"skipped 1 of 3 lines .*1 unparsable"):
        assert log.records() == [make(cost=1e-3), make(cost=3e-3)]
    assert path.read_text().endswith(make(cost=3e-3).to_json_line() + "\n")


def test_foreign_version_and_garbage_give_one_warning_with_counts(tmp_path):
    path = tmp_path / "t.jsonl"
    log = TuningLog(path)
    log.append(make(cost=1e-3))
    future = json.loads(make().to_json_line())
    future["version"] = 2
    with open(path, "a") as f:
        f.write("not json\n" + json.dumps(future) + "\n\n{\"version\": 1\n")
    log.append(make(cost=2e-3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = log.records()
    assert len(recs) == 2
    assert len(caught) == 1 and caught[0].category is LogWarning
    assert str(caught[0].message) == (
        f"skipped 3 of 5 lines in {path}: 2 unparsable, 1 from format version 2 "
        f"(this tensortune reads version {FORMAT_VERSION})")
    assert caught[0].filename == __file__     # points at the caller


def test_invalid_record_warning_names_line_and_field(tmp_path):
    path = tmp_path / "t.jsonl"
    bad = json.loads(make().to_json_line())
    bad["costs"] = "fast"
    path.write_text(make().to_json_line() + "\n" + json.dumps(bad) + "\n")
    with pytest.warns(LogWarning, match=r"1 invalid \(first: line 2: field 'costs'"):
        assert len(TuningLog(path, mode="r").records()) == 1


def _append_many(path, worker, count):
    log = TuningLog(path)
    big_trace = {"instructions": [["split", [f"l{i}"], {"factor": i}, [f"l{i}.0", f"l{i}.1"]]
                                  for i in range(300)], "decisions": {"w": worker}}
    for i in range(count):
        log.append(make(cost=1e-3 * (i + 1), trace=big_trace, decisions={"w": worker, "i": i}))


def test_concurrent_appends_from_several_processes(tmp_path):
    path = str(tmp_path / "t.jsonl")
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    ctx = multiprocessing.get_context(method)
    procs = [ctx.Process(target=_append_many, args=(path, w, 40)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with open(path) as f:
        lines = f.read().split("\n")
    assert lines[-1] == "" and len(lines) == 4 * 40 + 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recs = TuningLog(path, mode="r").records()
    assert sorted((r.decisions["w"], r.decisions["i"]) for r in recs) == \
        [(w, i) for w in range(4) for i in range(40)]


def test_unwritable_path_fails_at_open_with_clear_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    path = blocker / "logs" / "tuning.jsonl"      # parent is a regular file, even for root
    with pytest.raises(LogError, match=f"cannot write tuning log {path}: Not a directory"):
        TuningLog(path)
    assert TuningLog(path, mode="r").records() == []   # reading a missing log is fine


@pytest.mark.parametrize("content", [b"hello\n", b"\x08\x07\x12\x0bmodel bytes", b"[1, 2]\n"])
def test_a_file_that_is_not_a_log_is_not_appended_to(tmp_path, content):
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(LogError, match="is not a tuning log"):
        TuningLog(path).append(make())
    assert path.read_bytes() == content
    good = tmp_path / "t.jsonl"
    TuningLog(good).append(make())
    TuningLog(good).append(make())          # an existing log opens for appending as before
    assert len(TuningLog(good, mode="r").records()) == 2


def test_read_only_log_refuses_appends(tmp_path):
    with pytest.raises(LogError, match="opened read-only"):
        TuningLog(tmp_path / "t.jsonl", mode="r").append(make())


def test_best_orders_by_median_and_matches_target(tmp_path):
    log = TuningLog(tmp_path / "t.jsonl")
    log.extend([
        make(cost=3e-3, tile=8), make(cost=1e-3, tile=16), make(cost=2e-3, tile=32),
        make(cost=1.5e-3, tile=16),                       # same schedule, slower: ignored
        make(error="compile", tile=64),                   # failed: never best
        make(cost=1e-4, tile=4, target=ZEN1),             # other thread count
        make(cost=1e-4, tile=4, target=SKX),              # other cpu
        make(cost=1e-5, tile=4, key="otherworkload"),     # other workload
    ])
    best = log.best(MATMUL_KEY, ZEN2, k=5)
    assert [r.decisions["tile"] for r in best] == [16, 32, 8]
    assert best[0].median_cost == pytest.approx(1e-3)
    assert log.best(MATMUL_KEY, ZEN2) == [best[0]]
    assert log.best(MATMUL_KEY, {**ZEN2, "features": "+sse2"})[0] == best[0]
    assert log.best(MATMUL_KEY, {"cpu": "znver3", "threads": 3}) == []
    assert len(log.for_workload(MATMUL_KEY)) == 7
    assert len(log.for_workload(MATMUL_KEY, ZEN2)) == 5


def test_merge_keeps_targets_and_dedupes(tmp_path):
    a, b = TuningLog(tmp_path / "zen.jsonl"), TuningLog(tmp_path / "skx.jsonl")
    shared = make(cost=5e-3, tile=8)
    a.extend([make(cost=1e-3, target=ZEN2), shared])
    b.extend([make(cost=2e-3, target=SKX), shared])
    merged = TuningLog(tmp_path / "merged" / "all.jsonl")
    assert merged.merge([a.path, b.path, tmp_path / "missing.jsonl"]) == 3
    assert merged.merge([a.path, b.path]) == 0
    assert len(merged.records()) == 3
    assert merged.best(MATMUL_KEY, ZEN2)[0].target == ZEN2
    assert merged.best(MATMUL_KEY, SKX)[0].target == SKX


# --- paths --------------------------------------------------------------------------
def test_default_path_honors_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_log_path() == tmp_path / "cache" / "tensortune" / "tuning.jsonl"
    assert default_log_paths()[0] == default_log_path()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_log_path() == tmp_path / "home" / ".cache" / "tensortune" / "tuning.jsonl"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_log_path() == tmp_path / "home" / ".cache" / "tensortune" / "tuning.jsonl"


def test_pretuned_dir_is_shipped():
    assert pretuned_dir().is_dir() and (pretuned_dir() / "README.md").is_file()
    assert all(p.suffix == ".jsonl" for p in default_log_paths()[1:])


# --- lookup -------------------------------------------------------------------------
def test_confirmed_measurements_rank_first_in_best_lookup_and_report(tmp_path):
    """A side-by-side re-timing outranks single measurements taken at other times (maybe lucky)."""
    from tuner.report import report
    log = TuningLog(tmp_path / "t.jsonl")
    log.extend([make(cost=1e-3, tile=16), make(cost=2e-3, tile=32, confirmed=True),
                make(cost=3e-3, tile=8, confirmed=True), make(cost=2.5e-3, tile=16, confirmed=True)])
    assert [r.decisions["tile"] for r in log.best(MATMUL_KEY, ZEN2, k=5)] == [32, 16, 8]
    assert find_best(MATMUL_KEY, ZEN2, [log.path]).record.decisions["tile"] == 32
    assert not TuningRecord.from_json(make().to_json_line()).confirmed      # optional field, default false
    obj = json.loads(make().to_json_line())
    del obj["confirmed"]                                                    # a line written before the field
    assert TuningRecord.from_json(obj) == make()
    lines = [ln for ln in report([str(log.path)], top=5).splitlines() if ln.strip().startswith("#")]
    assert len(lines) == 3, "each schedule once, by its best-ranked measurement"
    assert "2.000 ms" in lines[0] and "confirmed" in lines[0] and "measured" not in "".join(lines)


def test_lookup_prefers_exact_then_same_cpu(tmp_path):
    user, shipped = TuningLog(tmp_path / "user.jsonl"), TuningLog(tmp_path / "shipped.jsonl")
    user.extend([make(cost=2e-3, target=ZEN2), make(cost=1e-4, target=SKX)])
    shipped.extend([make(cost=1e-3, target=ZEN2, tile=16), make(cost=5e-4, target=ZEN1)])
    paths = [user.path, shipped.path]

    exact = find_best(MATMUL_KEY, ZEN2, paths)
    assert exact.match == "exact" and exact.record.decisions["tile"] == 16
    assert exact.source == shipped.path and exact.searched == tuple(paths)
    assert "matmul(M=64, N=64, K=64)" in exact.reason

    same = find_best(MATMUL_KEY, {"kind": "llvm", "cpu": "znver3", "threads": 8}, paths)
    assert same.match == "same_cpu" and same.record.target == ZEN1
    assert same.reason == (f"no tuning record for matmul(M=64, N=64, K=64) on znver3, "
                           f"8 threads; using the best one measured on znver3, 1 thread "
                           f"from {shipped.path}")

    # another CPU only with the same vector width and none of the features this one lacks
    # (tests/test_reuse.py); a CPU that lists no features matches no other CPU's record
    other = find_best(MATMUL_KEY, {"cpu": "cortex-a72", "threads": 4}, paths)
    assert other.match == "none" and other.record is None


def test_lookup_none_message_is_one_clear_line(tmp_path):
    log = TuningLog(tmp_path / "user.jsonl")
    log.extend([make(key="a" * 16), make(key="a" * 16, tile=8), make(key="b" * 16)])
    missing = tmp_path / "shipped.jsonl"
    res = find_best("3fa2c1d09b7e44aa55", ZEN2, [log.path, missing],
                    name="matmul", params={"M": 64, "N": 64, "K": 64})
    assert res.match == "none" and res.record is None and not res.found
    assert res.reason == (
        f"no tuning record for workload matmul(M=64, N=64, K=64) key 3fa2c1d09b7e... "
        f"in {log.path}, {missing} (no such file) (3 records for 2 other workloads); "
        f"using the default schedule")
    assert "\n" not in res.reason and str(res) == res.reason


def test_lookup_explains_when_all_records_failed(tmp_path):
    log = TuningLog(tmp_path / "user.jsonl")
    log.extend([make(error="timeout"), make(error="timeout", tile=8), make(error="compile")])
    res = find_best(MATMUL_KEY, ZEN2, [log.path])
    assert res.match == "none"
    assert res.reason.startswith("all 3 tuning records for workload matmul(M=64, N=64, K=64) "
                                 "key 3fa2c1d09b7e... in ")
    assert "failed (2 timeout, 1 compile); using the default schedule" in res.reason


def test_lookup_default_paths_use_user_log(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    TuningLog(default_log_path()).append(make())
    res = find_best(MATMUL_KEY, ZEN2)
    assert res.match == "exact" and res.searched[0] == str(default_log_path())


def test_lookup_cache_refreshes_on_append_and_warns_once(tmp_path):
    path = tmp_path / "user.jsonl"
    log = TuningLog(path)
    log.append(make(cost=2e-3))
    with open(path, "a") as f:
        f.write("garbage\n")
    with pytest.warns(LogWarning, match="1 unparsable") as caught:
        assert find_best(MATMUL_KEY, ZEN2, path).record.median_cost == pytest.approx(2e-3)
    assert len(caught) == 1 and caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # cached: no second warning
        find_best(MATMUL_KEY, ZEN2, [path])
        find_best("otherkey", ZEN2, [path])       # keyless lines reported once per read
    log.append(make(cost=1e-3, tile=16))
    with pytest.warns(LogWarning):
        assert find_best(MATMUL_KEY, ZEN2, [path]).record.decisions["tile"] == 16


def test_keyed_read_matches_full_read(tmp_path):
    log = TuningLog(tmp_path / "t.jsonl")
    log.extend([make(key=k, cost=c) for k in ("x1", "x2", 'we"ird') for c in (1e-3, 2e-3)])
    full = log.records()
    for key in ("x1", "x2", 'we"ird', "none"):
        assert log.for_workload(key) == [r for r in full if r.workload_key == key]
