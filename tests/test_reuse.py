"""Reusing tuning logs at compile time: untuned builds, apply_best scopes, target-aware lookup,
the fallback summary, and stale records."""
from __future__ import annotations

import contextvars
import threading
import warnings

import numpy as np
import pytest

import logs
import logs.apply
import logs.verify
from logs import (TuningFallbackWarning, TuningLog, TuningRecord, TuningRequiredError, apply_best, build,
                  clear_cache, current_target, find_best)
from logs.naming import describe, identify
from logs.record import missing_features, target_vector_bits
from logs.scope import search_paths
from logs.verify import check_schedule
from schedules import Schedule
from tensorir import ops, te
from tensorir.ops import registry
from tensorir.te.serialize import workload_key

# built-in workloads at shapes that no tile, vector width or thread count divides
ODD_SHAPES = {
    "matmul": dict(M=37, N=45, K=23),
    "batch_matmul": dict(B=3, M=17, N=29, K=13),
    "dense": dict(batch=7, in_features=45, out_features=33),
    "conv2d": dict(C=5, H=11, W=13, K=7),
    "depthwise_conv2d": dict(C=6, H=13, W=9),
    "max_pool2d": dict(C=5, H=15, W=17),
    "avg_pool2d": dict(C=3, H=10, W=14),
    "softmax": dict(rows=7, cols=33),
    "layer_norm": dict(rows=5, cols=37),
    "elementwise_chain": dict(n=1003),
}


@pytest.fixture(autouse=True)
def _fresh_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))     # no user log of this machine
    clear_cache()
    logs.verify.clear_verdicts()
    yield
    clear_cache()
    logs.verify.clear_verdicts()


def run_against_numpy(kernel, name, params):
    w = registry.get_workload(name)
    inputs = w.inputs(1, **params)
    refs = w.reference(inputs, **params)
    outs = [np.full(r.shape, np.nan, r.dtype) for r in refs]
    kernel(*inputs, *outs)
    for got, want in zip(outs, refs):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))


def record_of(tensors, schedule, cost, target=None, **kw):
    """A successful record of ``schedule`` (or of ``trace=...``), measured on this machine by default."""
    kw.setdefault("trace", schedule.to_json())
    return TuningRecord(workload_key=workload_key(tensors), workload_name="matmul",
                        workload_params={"M": 37, "N": 45, "K": 23}, target=dict(target or current_target()),
                        costs=[cost] * 3, flops=2 * 37 * 45 * 23, **kw)


# --- untuned builds -------------------------------------------------------------------

@pytest.mark.parametrize("name", list(ODD_SHAPES))
def test_untuned_build_uses_the_heuristic_start_and_is_right(tmp_path, name):
    params = ODD_SHAPES[name]
    tensors = registry.get_workload(name).make(**params)
    with pytest.warns(TuningFallbackWarning, match=rf"(?s){name}\(.*heuristic +no record +tensortune tune {name} "):
        kernel = build(tensors, log=tmp_path / "empty.jsonl")
    assert kernel.lookup.match == "heuristic" and kernel.lookup.record is None
    assert "using the heuristic schedule (the tuner's first trial)" in kernel.lookup.reason
    assert len(kernel.schedule.trace) > 0, "the heuristic start schedules the nest"
    run_against_numpy(kernel, name, params)


def test_naive_nest_only_on_request(tmp_path):
    tensors = ops.softmax(7, 33)
    with pytest.warns(TuningFallbackWarning, match=r"softmax\(rows=7, cols=33\) +naive +no record"):
        kernel = build(tensors, log=tmp_path / "empty.jsonl", fallback="naive")
    assert kernel.lookup.match == "naive" and len(kernel.schedule.trace) == 0
    assert kernel.lookup.reason.endswith("using the naive loop nest (asked for)")
    run_against_numpy(kernel, "softmax", ODD_SHAPES["softmax"])
    with pytest.raises(ValueError, match=r"^build\(\): fallback must be one of 'heuristic', 'naive', got 'fast'$"):
        build(tensors, log=tmp_path / "empty.jsonl", fallback="fast")


def test_a_heuristic_start_that_fails_falls_back_to_the_naive_nest_and_says_why(tmp_path, monkeypatch):
    from schedules.errors import ScheduleError

    def broken(tensors):
        raise ScheduleError("split", "no loop named 'C.x'")
    monkeypatch.setattr(logs.apply, "heuristic_schedule", broken)
    with pytest.warns(TuningFallbackWarning) as caught:
        kernel = build(ops.matmul(37, 45, 23), log=tmp_path / "empty.jsonl")
    assert len(caught) == 1
    assert kernel.lookup.match == "naive"
    assert "the heuristic schedule failed (ScheduleError: " in kernel.lookup.reason
    assert "naive" in str(caught[0].message) and "heuristic failed: ScheduleError" in str(caught[0].message)
    run_against_numpy(kernel, "matmul", ODD_SHAPES["matmul"])


# --- scopes ---------------------------------------------------------------------------

def test_apply_best_searches_its_logs_first_and_nested_scopes_stack(tmp_path):
    tensors = ops.matmul(37, 45, 23)
    outer, inner = TuningLog(tmp_path / "outer.jsonl"), TuningLog(tmp_path / "inner.jsonl")
    outer.append(record_of(tensors, logs.apply.heuristic_schedule(tensors), 2e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningFallbackWarning)
        with apply_best(outer.path):
            with apply_best([inner.path]) as scope:
                assert search_paths()[:3] == [inner.path, outer.path, str(tmp_path / "cache/tensortune/tuning.jsonl")]
                kernel = build(tensors)
            assert search_paths()[0] == outer.path
    assert search_paths() is None
    assert kernel.lookup.match == "exact" and kernel.lookup.source == outer.path and kernel.lookup.line == 1
    assert kernel.lookup.searched[:2] == (inner.path, outer.path)
    assert scope.builds == 1 and scope.fallbacks == []
    run_against_numpy(kernel, "matmul", ODD_SHAPES["matmul"])


def test_fallbacks_are_reported_once_per_outermost_scope_as_a_table(tmp_path):
    empty = tmp_path / "empty.jsonl"
    with pytest.warns(TuningFallbackWarning) as caught:
        with apply_best(empty) as outer:
            build(ops.matmul(37, 45, 23))
            with apply_best(empty):
                build(ops.softmax(7, 33), fallback="naive")
                build(ops.matmul(37, 45, 23))     # the same workload again: one row
            build(ops.layer_norm(5, 37), log=empty)
    assert len(caught) == 1 and caught[0].filename == __file__
    text = str(caught[0].message)
    lines = text.splitlines()
    assert lines[0].startswith("4 of 4 builds used no tuned schedule (searched ") and "shipped log" in lines[0]
    assert lines[1].split() == ["workload", "built", "why", "to", "tune", "it"]
    assert [ln.split()[0] for ln in lines[2:]] == ["matmul(M=37,", "softmax(rows=7,", "layer_norm(rows=5,"]
    assert "tensortune tune softmax rows=7 cols=33" in lines[3] and " naive " in lines[3]
    assert "tensortune tune layer_norm rows=5 cols=37" in lines[4]
    assert len(outer.fallbacks) == 4 and outer.builds == 4


def test_strict_scope_raises_one_line_naming_the_workloads(tmp_path):
    with pytest.raises(TuningRequiredError) as info:
        with apply_best(tmp_path / "empty.jsonl", strict=True):
            build(ops.matmul(37, 45, 23))
            build(ops.softmax(7, 33), threads=1)
    assert str(info.value) == ("no tuned schedule for 2 workloads (strict): matmul(M=37, N=45, K=23), "
                               "softmax(rows=7, cols=33); tune with: tensortune tune matmul M=37 N=45 K=23; "
                               "tensortune tune softmax rows=7 cols=33 --threads 1")
    # an error raised inside the scope is not masked by the strict check
    with pytest.raises(KeyError), pytest.warns(TuningFallbackWarning):
        with apply_best(tmp_path / "empty.jsonl", strict=True):
            build(ops.matmul(37, 45, 23))
            raise KeyError("user code")


def test_scopes_are_per_thread_and_per_context(tmp_path):
    entered, checked = threading.Event(), threading.Event()
    seen = {}

    def inside():
        with apply_best(tmp_path / "a.jsonl"):
            entered.set()
            checked.wait(10)
            seen["inside"] = search_paths()[0]

    t = threading.Thread(target=inside)
    t.start()
    entered.wait(10)
    seen["other thread"] = search_paths()
    checked.set()
    t.join()
    with apply_best(tmp_path / "b.jsonl"):
        seen["copied"] = contextvars.copy_context().run(lambda: search_paths()[0])
    assert seen == {"inside": str(tmp_path / "a.jsonl"), "other thread": None, "copied": str(tmp_path / "b.jsonl")}


def test_apply_best_rejects_what_is_not_a_path():
    with pytest.raises(TypeError, match=r"^apply_best\(\): a log path must be a str or path-like, got int 3$"):
        apply_best(["a.jsonl", 3])


# --- target-aware lookup --------------------------------------------------------------

HOST = {"kind": "llvm", "cpu": "sapphirerapids", "threads": 2,
        "features": "+avx,+avx2,+fma,+avx512f,+avx512bw,+amx-tile,-avx512fp16,-rtm,-sse4a"}
SPR1 = dict(HOST, threads=1)
ICX = {"kind": "llvm", "cpu": "icelake-server", "threads": 4, "features": "+avx,+avx2,+fma,+avx512f,-amx-tile"}
ZEN4 = {"kind": "llvm", "cpu": "znver4", "threads": 2, "features": "+avx,+avx2,+fma,+avx512f,+sse4a"}
ZEN3 = {"kind": "llvm", "cpu": "znver3", "threads": 2, "features": "+avx,+avx2,+fma,-avx512f"}
SPR_NO_AVX512 = {"kind": "llvm", "cpu": "sapphirerapids", "threads": 2, "features": "+avx,+avx2,+avx512fp16"}
OLD = {"kind": "llvm", "cpu": "sapphirerapids", "threads": 2}       # an older log: no features recorded


def fake(target, cost, tile=8):
    return TuningRecord(workload_key="k" * 24, workload_name="matmul", workload_params={"M": 64},
                        target=dict(target), trace={"instructions": [], "decisions": {"tile": tile}},
                        decisions={"tile": tile}, costs=[cost])


def test_vector_width_and_missing_features_come_from_the_feature_string():
    assert [target_vector_bits(t) for t in (HOST, ZEN3, OLD)] == [512, 256, None]
    assert target_vector_bits({"features": "+sse4.2"}) == 128
    assert missing_features(ZEN4, HOST) == {"sse4a"}
    assert missing_features(ICX, HOST) == set()
    assert missing_features(SPR_NO_AVX512, HOST) == {"avx512fp16"}
    assert missing_features(OLD, HOST) == set() and missing_features(HOST, OLD) == set()
    # a host that lists only enabled features lacks everything else; an LLVM that does not name
    # a feature at all (renamed in another release) does not count it against a record
    assert missing_features({"features": "+avx2,+newthing"}, {"features": "+avx2"}) == {"newthing"}
    assert missing_features({"features": "+avx2,+newthing"}, {"features": "+avx2,-avx512f"}) == set()


@pytest.mark.parametrize("records, match, chosen", [
    ([(SPR1, 1e-3), (HOST, 2e-3), (ICX, 1e-4)], "exact", HOST),
    ([(SPR1, 1e-3), (ICX, 1e-4)], "same_cpu", SPR1),
    ([(ICX, 1e-3), (ZEN4, 1e-4), (ZEN3, 1e-5)], "compatible_cpu", ICX),     # ZEN4 had sse4a; ZEN3 256-bit
    ([(ZEN4, 1e-4), (ZEN3, 1e-5), (SPR_NO_AVX512, 1e-5)], "none", None),
    ([(OLD, 1e-3)], "exact", OLD),                                          # old logs keep loading and matching
])
def test_lookup_rules(tmp_path, records, match, chosen):
    log = TuningLog(tmp_path / "log.jsonl")
    log.extend([fake(t, c) for t, c in records])
    found = find_best("k" * 24, HOST, [log.path])
    assert found.match == match and (found.record.target if found.record else None) == chosen
    assert logs.MATCHES.index(match) >= 0
    if match == "compatible_cpu":
        assert "measured on icelake-server, 4 threads" in found.reason and "same 512-bit vectors" in found.reason
    if match == "none":
        assert found.why == "records only from sapphirerapids, znver3, znver4"
        assert ("fits sapphirerapids, 2 threads (sapphirerapids: has avx512fp16 (this CPU lacks); "
                "znver3: 256-bit vectors, not 512; znver4: has sse4a (this CPU lacks)); "
                "using the default schedule") in found.reason


# --- stale records --------------------------------------------------------------------

def test_stale_records_are_skipped_for_the_next_and_named_by_log_and_line(tmp_path, monkeypatch):
    tensors = ops.matmul(37, 45, 23)
    good = logs.apply.heuristic_schedule(tensors)
    other = Schedule(tensors).split("C.j", factor=8)       # replays; the check below calls it wrong
    log = TuningLog(tmp_path / "log.jsonl")
    log.extend([record_of(tensors, good, 3e-3),
                record_of(tensors, Schedule(tensors), 1e-4, trace={"instructions": [
                    ["split", ["C.nope"], {"factor": 4}, ["a", "b"]]], "decisions": {}}),
                record_of(tensors, other, 2e-3)])
    real_check, calls = check_schedule, []

    def check(tensors_, schedule):
        calls.append(schedule)
        return "wrong answer: output C: 5 of 1665 elements wrong" if schedule.trace == other.trace \
            else real_check(tensors_, schedule)
    monkeypatch.setattr(logs.verify, "check_schedule", check)
    with pytest.warns(TuningFallbackWarning) as caught:
        with apply_best(log.path):
            kernel = build(tensors)
            build(tensors)                          # checked once per process: no new check
    assert len(calls) == 2
    assert kernel.lookup.match == "exact" and kernel.lookup.line == 1
    assert [(s.line, s.why.split(":")[0]) for s in kernel.lookup.skipped] == [(2, "does not replay on these tensors"),
                                                                              (3, "wrong answer")]
    text = str(caught[0].message)
    assert text.startswith("skipped records (the next one was used instead):")
    assert f"{log.path}:2  matmul(M=37, N=45, K=23)  does not replay on these tensors" in text
    assert f"{log.path}:3  matmul(M=37, N=45, K=23)  wrong answer: output C: 5 of 1665" in text
    run_against_numpy(kernel, "matmul", ODD_SHAPES["matmul"])


def test_a_bare_build_whose_records_are_all_stale_warns_with_their_lines(tmp_path):
    tensors = ops.matmul(37, 45, 23)
    log = TuningLog(tmp_path / "log.jsonl")
    log.append(record_of(tensors, Schedule(tensors), 1e-4, trace={"instructions": [
        ["reorder", ["C.zz", "C.i"], {}, []]], "decisions": {}}))
    with pytest.warns(TuningFallbackWarning, match=r"(?s)heuristic +1 unusable record .*skipped records.*log.jsonl:1"):
        kernel = build(tensors, log=log.path)
    assert kernel.lookup.match == "heuristic"
    run_against_numpy(kernel, "matmul", ODD_SHAPES["matmul"])


def test_the_check_catches_a_kernel_that_computes_something_else():
    def wl(plus):
        A, B = te.placeholder((9, 7), "float32", "A"), te.placeholder((7, 5), "float32", "B")
        k = te.reduce_axis(7, "k")
        C = te.compute((9, 5), lambda i, j: te.sum(A[i, k] * B[k, j] + plus, axis=k), "C")
        return [A, B, C]
    right, wrong = wl(0.0), wl(1e-3)
    assert check_schedule(right, Schedule(right)) is None
    verdict = check_schedule(right, Schedule(wrong))
    assert verdict.startswith("wrong answer: output C: max abs error") and verdict.endswith("45 of 45 elements off"), verdict


# --- naming ---------------------------------------------------------------------------

def test_workloads_are_named_by_operator_and_shape_even_when_renamed():
    A, B = te.placeholder((37, 23), "float32", "X"), te.placeholder((23, 45), "float32", "Y")
    k = te.reduce_axis(23, "r")
    Z = te.compute((37, 45), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "Z")
    assert identify([A, B, Z]) == ("matmul", {"M": 37, "N": 45, "K": 23, "dtype": "float32"})
    conv = registry.get_workload("conv2d")
    strided = conv.make(**conv.bind(C=3, H=13, W=17, K=5, stride=2))        # stride shows in no input shape
    assert describe(strided) == ("Y(X=1x3x13x17, Wt=5x3x3x3)", "tensortune tune FILE.py:FUNCTION")
    assert describe(ops.matmul(8, 8, 8), threads=1) == ("matmul(M=8, N=8, K=8)",
                                                         "tensortune tune matmul M=8 N=8 K=8 --threads 1")
    assert describe([A, B, Z], "ops.py:mm", {"n": 3}) == ("ops.py:mm(n=3)", "tensortune tune ops.py:mm n=3")
