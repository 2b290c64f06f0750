"""tensortune tune-model and bench-model on small ONNX models (numbers against onnxruntime)."""
import json

import onnx
import pytest

from tests.onnx_models import mlp
from tuner.cli import main


@pytest.fixture(scope="module")
def small_mlp(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    onnx.save(mlp(batch=16, sizes=(256, 512, 128, 8)), path)
    return str(path)


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_tune_model_spends_the_budget_checks_outputs_and_resumes(small_mlp, tmp_path, capsys):
    log = str(tmp_path / "log.jsonl")
    args = ["tune-model", small_mlp, "--trials", "8", "--log", log, "--threads", "1", "--json", "--rounds", "1"]
    assert main(args) == 0
    out = _json(capsys)
    tuned = [t for t in out["tasks"] if t["state"] != "heuristic"]
    assert out["trials"] == 8 == sum(t["trials"] for t in out["tasks"])
    assert len(tuned) == 2 and all(t["trials"] >= 2 for t in tuned)     # warm-up: a round each (half the budget)
    assert [t["state"] for t in out["tasks"]].count("heuristic") == 1    # the 128->8 Gemm: too small to tune
    assert out["outputs_match_untuned"] and out["latency_s"] > 0 and out["onnxruntime_latency_s"] > 0
    assert out["max_relative_error_vs_onnxruntime"] is not None and out["max_relative_error_vs_onnxruntime"] < 1e-4
    assert out["estimated_latency_s"] > 0
    # the same command again continues: 8 new trials, the log holds both runs
    assert main(args) == 0
    again = _json(capsys)
    assert again["trials"] == 8
    trials = [json.loads(line) for line in open(log)]
    assert len({r["workload_key"] for r in trials}) == 2
    # every record says which model task it belongs to (the report's model section reads this)
    assert {(r["meta"]["model"], r["meta"]["task"], r["meta"]["weight"]) for r in trials} == {("mlp.onnx", 0, 1),
                                                                                            ("mlp.onnx", 1, 1)}
    # the weights are constants: schedules that pack them were timed with the pack made once, as builds do
    assert any(r["meta"].get("prepacked") for r in trials)


def test_bench_model_matches_onnxruntime(small_mlp, capsys):
    assert main(["bench-model", small_mlp, "--threads", "1", "--rounds", "1", "--json"]) == 0
    out = _json(capsys)
    assert out["outputs_match_onnxruntime"] is True and out["ratio"] > 0


@pytest.mark.parametrize("extra, message", [
    (["--trials", "0"], "--trials must be >= 1"),
    (["--tasks", "7"], "--tasks: '7' is not a tuned task id (tuned tasks: 0, 1)"),
    (["--threads", "0"], "--threads must be >= 1"),
])
def test_tune_model_bad_arguments_are_one_line(small_mlp, tmp_path, capsys, extra, message):
    assert main(["tune-model", small_mlp, "--log", str(tmp_path / "l.jsonl")] + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tensortune: error: {message}") and len(err.splitlines()) == 1


def test_tune_model_refuses_a_log_that_is_not_a_log(small_mlp, tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("my notes\n")
    assert main(["tune-model", small_mlp, "--log", str(bad), "--trials", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not a tuning log" in err and len(err.splitlines()) == 1 and bad.read_text() == "my notes\n"


def test_tune_model_missing_file_is_one_line(tmp_path, capsys):
    assert main(["tune-model", str(tmp_path / "nope.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.onnx" in err[0]


def test_a_model_with_nothing_to_tune_says_so_and_writes_no_log(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    onnx.save(mlp(batch=2, sizes=(16, 8, 4)), path)      # every Gemm far below the tuning threshold
    log = tmp_path / "log.jsonl"
    assert main(["tune-model", str(path), "--trials", "4", "--log", str(log), "--threads", "1", "--rounds", "1"]) == 0
    out, err = capsys.readouterr()
    assert "nothing to tune" in err and "nothing to weigh" not in err
    assert "0 trials" in out and "log: none written" in out and not log.exists()


@pytest.mark.own_thread_choice
def test_a_model_too_small_for_two_threads_is_tuned_and_timed_on_one(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    onnx.save(mlp(batch=16, sizes=(128, 256, 128, 8)), path)     # ~75 us estimated on one thread
    log = str(tmp_path / "log.jsonl")
    assert main(["tune-model", str(path), "--trials", "4", "--log", log, "--threads", "2", "--json", "--rounds", "1"]) == 0
    out = _json(capsys)
    assert out["threads"] == 2 and out["kernel_threads"] == 1 and out["threads_note"].startswith("runs on 1 thread")
    assert out["trials"] == 4 and out["outputs_match_untuned"]
    records = [json.loads(line) for line in open(log)]
    assert records and {r["target"]["threads"] for r in records} == {1}
