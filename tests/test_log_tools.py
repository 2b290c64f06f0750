"""Tests of the log tools (``logs.tools``, ``tensortune logs ...``) and ``tensortune bench``.

The logs are written record by record through ``logs.TuningRecord`` with real
schedules of small workloads, plus one corrupted line and one line of another
format version.
"""
from __future__ import annotations

import json
import re

import pytest

from logs import TuningLog, TuningRecord
from logs.tools import best_entries, dedupe, read_log, summarize
from schedules import Schedule
from tuner.cli import main
from tuner.spec import WorkloadSpec
from tuner.target import host_target

ZEN = {"kind": "llvm", "cpu": "znver3", "features": "+avx2,+fma", "threads": 2}
SKX = {"kind": "llvm", "cpu": "skylake-avx512", "features": "+avx2,+avx512f,+fma", "threads": 4}
SPEC = WorkloadSpec("matmul", {"M": 16, "N": 16, "K": 16})

# y[r] = sum_k v[r, k] with v[r, 0] = 1e8 x[r, 0], v[r, 2] = -1e8 x[r, 0], else x[r, k]: in float32 the
# two large terms cancel only if they are added before x[r, 1] is lost in them, so the sum's value depends
# on the order of its terms.  The unscheduled kernel adds in numpy's order (numpy sums fewer than 8 terms
# one after another); a schedule that reassociates the sum (rfactor) gives another answer.
CANCEL = '''from tensorir import te

def cancel(rows=4, cols=6):
    x = te.placeholder((rows, cols), "float32", "x")
    k = te.reduce_axis(cols, "k")
    v = lambda r: te.if_then_else(te.equal(k, 0), x[r, 0] * 1e8,
                                  te.if_then_else(te.equal(k, 2), x[r, 0] * -1e8, x[r, k]))
    return [x, te.compute((rows,), lambda r: te.sum(v(r), axis=k), "y")]
'''


def record(sch=None, spec=SPEC, cost=1e-5, target=ZEN, error=None, when="2026-11-20T10:00:00.000Z", **kw):
    """A record of ``sch`` (default: the unscheduled workload) measured at ``cost`` seconds."""
    sch = sch if sch is not None else Schedule(spec.tensors())
    fields = dict(workload_key=spec.key, workload_name=spec.name, workload_params=dict(spec.params),
                  target=dict(target), trace=sch.to_json(), decisions=dict(sch.decisions),
                  costs=[] if error else [cost, cost * 1.02, cost * 0.98], error_kind=error,
                  error_msg="boom" if error else None, flops=spec.flops, timestamp=when,
                  tensortune_version="0.1.0")
    fields.update(kw)
    return TuningRecord(**fields)


def split(factor, spec=SPEC, loop="C.i"):
    return Schedule(spec.tensors()).split(loop, factor=factor)


def write(path, records, bad_lines=()):
    """A log of ``records``, then the ``bad_lines`` appended as they are."""
    TuningLog(path).extend(records)
    with open(path, "a") as f:
        for line in bad_lines:
            f.write(line + "\n")
    return str(path)


FOREIGN = json.dumps({"version": 99, "workload_key": "abc", "anything": "from a later tensortune"})
CORRUPT = '{"version": 1, "workload_key": "3fa2c1d0", "workload_na'


@pytest.fixture
def log_a(tmp_path):
    """Three schedules on ZEN (one measured twice), a compile failure, one schedule on SKX, two bad lines."""
    return write(tmp_path / "a.jsonl", [
        record(split(4), cost=2e-5),
        record(split(8), cost=1e-5),
        record(split(8), cost=3e-5, when="2026-11-21T10:00:00.000Z", remeasured=True),   # line 3: a duplicate
        record(cost=9e-5),
        record(split(2), error="compile"),
        record(split(8), cost=5e-6, target=SKX),
    ], bad_lines=[CORRUPT, FOREIGN])


@pytest.fixture
def log_b(tmp_path):
    """One record also in log_a (same schedule, workload and target, faster) and one new schedule."""
    return write(tmp_path / "b.jsonl", [
        record(split(4), cost=1.5e-5, when="2026-11-22T10:00:00.000Z"),
        record(split(16), cost=4e-5),
    ])


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- reading ----------------------------------------------------------------------------
def test_read_log_keeps_line_numbers_and_counts_bad_lines(log_a):
    log = read_log(log_a)
    assert [e.line for e in log.entries] == [1, 2, 3, 4, 5, 6]
    assert log.read.lines == 8
    assert log.skipped == {"unparsable": 1, "version 99": 1}
    assert "from format version 99" in log.read.message and "1 unparsable" in log.read.message
    assert read_log(str(log_a) + ".missing").missing


def test_summary_per_workload_and_target(log_a):
    by_target = {s.target["cpu"]: s for s in summarize([read_log(log_a)])}
    zen, skx = by_target["znver3"], by_target["skylake-avx512"]
    assert (zen.records, zen.trials, dict(zen.errors)) == (5, 4, {"compile": 1})
    assert zen.best.line == 2 and zen.best.record.median_cost == pytest.approx(1e-5)
    assert zen.newest.isoformat().startswith("2026-11-21T10:00")
    assert (skx.records, skx.best.line) == (1, 6)


def test_cli_show_text_and_json(log_a, log_b, capsys):
    code, out, _ = run_cli(capsys, "logs", "show", log_a, log_b)
    assert code == 0
    assert "matmul(M=16, N=16, K=16, dtype=float32)" in out
    assert "znver3, 2 threads" in out and "skylake-avx512, 4 threads" in out
    assert "compile 1" in out
    assert re.search(r"skipped 2 of 8 lines in .*a\.jsonl: 1 unparsable, 1 from format version 99", out)
    code, out, _ = run_cli(capsys, "logs", "show", log_a, log_b, "--json")
    data = json.loads(out)
    assert [log["skipped"] for log in data["logs"]] == [{"unparsable": 1, "version 99": 1}, {}]
    zen = next(w for w in data["workloads"] if w["target"]["cpu"] == "znver3")
    assert (zen["records"], zen["trials"], zen["errors"]) == (7, 6, {"compile": 1})
    assert zen["best_latency_s"] == pytest.approx(1e-5)
    assert zen["best_gflops"] == pytest.approx(SPEC.flops / 1e-5 / 1e9)
    assert zen["best_at"].endswith("a.jsonl:2") and zen["age_s"] > 0


# --- merge ------------------------------------------------------------------------------
def _lines(path):
    return open(path).read().splitlines()


def test_merge_drops_duplicates_keeps_targets_and_the_better_measurement(log_a, log_b, tmp_path, capsys):
    out = tmp_path / "merged.jsonl"
    code, text, _ = run_cli(capsys, "logs", "merge", out, log_a, log_b)
    assert code == 0
    assert "dropped 2 duplicates" in text and "wrote 6 records" in text
    assert "1 unparsable" in text      # the bad lines of the inputs are reported, not fatal
    records = [TuningRecord.from_json(line) for line in _lines(out)]
    assert {r.target["cpu"] for r in records} == {"znver3", "skylake-avx512"}
    split4 = [r for r in records if r.trace == split(4).to_json() and r.target == ZEN]
    assert len(split4) == 1 and split4[0].median_cost == pytest.approx(1.5e-5)   # the faster, from b
    split8 = [r for r in records if r.trace == split(8).to_json() and r.target == ZEN]
    assert len(split8) == 1 and not split8[0].remeasured


def test_merge_is_idempotent(log_a, log_b, tmp_path, capsys):
    once, twice, again = tmp_path / "once.jsonl", tmp_path / "twice.jsonl", tmp_path / "again.jsonl"
    assert run_cli(capsys, "logs", "merge", once, log_a, log_b)[0] == 0
    assert run_cli(capsys, "logs", "merge", twice, once)[0] == 0
    assert _lines(twice) == _lines(once)
    assert run_cli(capsys, "logs", "merge", again, log_a, log_b, log_a, once)[0] == 0
    assert _lines(again) == _lines(once)
    code, text, _ = run_cli(capsys, "logs", "merge", once, once, "--in-place")
    assert code == 0 and "dropped 0 duplicates" in text and _lines(once) == _lines(twice)


def test_merge_refuses_to_overwrite_unless_in_place(log_a, log_b, tmp_path, capsys):
    code, _, err = run_cli(capsys, "logs", "merge", log_a, log_a, log_b)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("tensortune: error: OUT") and "is also an input; add --in-place" in err
    code, _, err = run_cli(capsys, "logs", "merge", log_b, log_a)
    assert code == 2 and "exists; add --in-place" in err and err.count("\n") == 1
    before = len(read_log(log_b).entries)
    code, text, _ = run_cli(capsys, "logs", "merge", log_b, log_a, "--in-place")   # OUT's records take part
    assert code == 0 and len(read_log(log_b).entries) == before + len(read_log(log_a).entries) - 2
    code, _, err = run_cli(capsys, "logs", "merge", tmp_path / "x.jsonl", tmp_path / "nope.jsonl")
    assert code == 2 and "nope.jsonl not found" in err


def test_dedupe_counts_and_prefers_confirmed(tmp_path):
    path = write(tmp_path / "c.jsonl", [record(split(4), cost=1e-5), record(split(4), cost=2e-5, confirmed=True),
                                        record(split(4), cost=1e-6, target=SKX)])
    kept, dropped = dedupe([read_log(path)])
    assert dropped == 1 and [e.line for e in kept] == [2, 3]


# --- distill ----------------------------------------------------------------------------
@pytest.mark.parametrize("top, per_target", [(1, {"znver3": 1, "skylake-avx512": 1}),
                                             (2, {"znver3": 2, "skylake-avx512": 1}),
                                             (9, {"znver3": 4, "skylake-avx512": 1})])
def test_distill_keeps_the_best_k_per_workload_and_target(log_a, log_b, tmp_path, capsys, top, per_target):
    out = tmp_path / "best.jsonl"
    code, text, _ = run_cli(capsys, "logs", "distill", out, log_a, log_b, "--top", top)
    assert code == 0
    records = [TuningRecord.from_json(line) for line in _lines(out)]
    counts = {cpu: sum(r.target["cpu"] == cpu for r in records) for cpu in per_target}
    assert counts == per_target
    assert all(r.ok for r in records)
    zen = [r.median_cost for r in records if r.target == ZEN]
    assert zen == sorted(zen) and zen[0] == pytest.approx(1e-5)
    assert f"left out {8 - len(records)} records" in text
    assert [len(g) for g in best_entries([read_log(out)], top)] == list(per_target.values())


def test_distill_refuses_a_bad_top(log_a, tmp_path, capsys):
    code, _, err = run_cli(capsys, "logs", "distill", tmp_path / "o.jsonl", log_a, "--top", 0)
    assert code == 2 and "--top must be a positive integer" in err


# --- verify -----------------------------------------------------------------------------
def test_verify_reports_records_that_fail_with_file_and_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cancel.py").write_text(CANCEL)
    cancel = WorkloadSpec("cancel.py:cancel", {})
    other = WorkloadSpec("matmul", {"M": 17, "N": 16, "K": 16})
    stale = record(split(4), target=SKX).to_dict()     # a trace naming a loop this workload does not have
    stale["trace"]["instructions"][0][1] = ["C.q"]
    path = write(tmp_path / "v.jsonl", [
        record(split(8)),                                                      # 1: good
        TuningRecord.from_json(stale),                                         # 2: does not replay
        record(split(2, cancel, "y.r"), spec=cancel),                          # 3: good
        record(Schedule(cancel.tensors()).rfactor("y", 2), spec=cancel, cost=1e-6, target=SKX),  # 4: wrong
        record(split(4), workload_key=other.key, target=SKX, cost=1e-6, when="2026-11-20T11:00:00.000Z"),
    ], bad_lines=[CORRUPT, FOREIGN])                                           # 5: params do not match key
    code, out, _ = run_cli(capsys, "logs", "verify", path)
    assert code == 1
    lines = out.splitlines()
    assert any(line.startswith("note skipped 2 of 7 lines") for line in lines)

    def verdict(line_no):
        i = next(i for i, line in enumerate(lines) if line.endswith(f"v.jsonl:{line_no}"))
        return lines[i].split("  ")[0].strip(), lines[i + 1].strip() if i + 1 < len(lines) else ""
    assert verdict(1)[0] == "ok" and verdict(3)[0] == "ok"
    status, detail = verdict(2)
    assert status == "no longer replays" and "C.q" in detail
    status, detail = verdict(4)
    assert status == "wrong answer" and detail.startswith("output y: max abs error")
    status, detail = verdict(5)
    assert status == "workload mismatch" and other.key in detail
    assert lines[-1] == "verified 5 records: 2 ok, 1 workload mismatch, 1 no longer replays, 1 wrong answer"
    code, out, _ = run_cli(capsys, "logs", "verify", path, "--json")
    data = json.loads(out)
    assert code == 1 and data["counts"]["wrong"] == 1
    assert {r["line"]: r["status"] for r in data["records"]} == {1: "ok", 2: "replay", 3: "ok", 4: "wrong",
                                                                5: "mismatch"}


def test_verify_passes_a_good_log_and_skips_what_cannot_be_rebuilt(tmp_path, capsys):
    gone = TuningRecord(**{**record(split(8)).to_dict(), "workload_name": "gone.py:f", "workload_params": {},
                           "target": SKX})
    path = write(tmp_path / "ok.jsonl", [record(split(8)), record(split(4), cost=9e-5), gone])
    code, out, _ = run_cli(capsys, "logs", "verify", path, "--top", 2)
    assert code == 0
    assert out.splitlines()[-1] == "verified 3 records: 2 ok, 1 not checked"
    assert "cannot rebuild the workload here" in out


# --- bench ------------------------------------------------------------------------------
def test_bench_prints_tuned_untuned_and_numpy_with_ratios(tmp_path, capsys):
    path = write(tmp_path / "host.jsonl", [record(split(8), target=host_target(1))])
    code, out, err = run_cli(capsys, "bench", "matmul", "M=16", "N=16", "K=16", "--log", path, "--threads", 1,
                             "--rounds", 1, "--json")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "workload  matmul(M=16, N=16, K=16)  (8,192 FLOP, threads=1)"
    assert [line.split()[0] for line in lines[1:6]] == ["tuned", "untuned", "numpy", "speed", "timed"]
    assert f"best record in {path} (exact match)" in lines[1]
    assert re.fullmatch(r"speed     tuned/untuned \d+\.\d\dx  tuned/numpy \d+\.\d\dx  untuned/numpy \d+\.\d\dx"
                        r"   \(>1: the first is faster\)", lines[4])
    data = json.loads(lines[-1])
    assert set(data["timings"]) == {"tuned", "untuned", "numpy"}
    assert data["record"]["log"] == path and data["record"]["match"] == "exact"
    assert set(data["ratios"]) == {"tuned/untuned", "tuned/numpy", "untuned/numpy"}


def test_bench_without_a_record_times_untuned_against_numpy(tmp_path, capsys):
    path = write(tmp_path / "empty.jsonl", [])
    code, out, err = run_cli(capsys, "bench", "matmul", "M=8", "N=8", "K=8", "--log", path, "--threads", 1,
                             "--rounds", 1)
    assert code == 0
    assert "no tuning record" in err and "timing the untuned build against numpy" in err
    assert [line.split()[0] for line in out.splitlines()] == ["workload", "untuned", "numpy", "speed", "timed"]
    code, out, err = run_cli(capsys, "bench", "matmul", "M=8", "N=8", "K=8", "--log", path, "--threads", 1,
                             "--require-tuned")
    assert code == 2 and err.count("\n") == 1 and out == "", err
    assert "no tuned schedule for matmul(M=8, N=8, K=8" in err and "tensortune tune matmul M=8 N=8 K=8" in err, err


@pytest.mark.parametrize("args, pattern", [
    (["bench", "matmul", "--log", "/nonexistent.jsonl"], r"tuning log /nonexistent.jsonl not found"),
    (["bench", "nosuch"], r"unknown workload|no workload"),
    (["bench", "matmul", "--rounds", "0"], r"--rounds must be a positive integer"),
    (["logs", "show", "/nonexistent.jsonl"], r"tuning log /nonexistent.jsonl not found"),
    (["logs"], r"logs: expected an action"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, pattern):
    code, _, err = run_cli(capsys, *args)
    assert code == 2 and err.count("\n") == 1
    assert re.match(r"tensortune: error: ", err) and re.search(pattern, err)


def test_rewrite_replaces_the_log_whole_and_leaves_no_temporary_file(log_a, tmp_path):
    from logs import LogError
    log = TuningLog(log_a)
    kept = [e.record for e in read_log(log_a).entries[:2]]
    assert log.rewrite(kept) == 2
    assert [TuningRecord.from_json(line) for line in _lines(log_a)] == kept   # the bad lines went too
    log.append(kept[0])
    assert len(read_log(log_a).entries) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "a.jsonl.lock"]
    with pytest.raises(LogError, match="opened read-only"):
        TuningLog(log_a, mode="r").rewrite(kept)
