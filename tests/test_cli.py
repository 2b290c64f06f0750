"""The command line (`tensortune workloads`, `tune`, `report`): output, JSON, bad input, workload files."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from logs import TuningLog, build
from schedules import Schedule
from tensorir import te
from schedules.errors import ScheduleError
from tuner.cli import main
from tuner.search import Tuner
from tuner.spec import WorkloadSpec

from .test_tuner import STENCIL, small_config


def run_cli(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_workloads(capsys):
    code, out, _ = run_cli(capsys, "workloads")
    assert code == 0
    for name in ("matmul", "conv2d", "softmax", "layer_norm", "dense"):
        assert name in out


def _small_matmul(names):
    a, b, c, i, j, k = names
    A, B = te.placeholder((9, 7), "float32", a), te.placeholder((7, 12), "float32", b)
    r = te.reduce_axis(7, k)
    return [A, B, te.compute((9, 12), lambda *ij: te.sum(A[ij[0], r] * B[r, ij[1]], axis=r), c)]


def test_renamed_workload_shares_the_key_but_only_replayable_records_are_used(tmp_path):
    """The workload key is structural; traces name loops: records of another naming are skipped."""
    import dataclasses
    first, second = _small_matmul("ABCijk"), _small_matmul("XWYmnr")
    log = TuningLog(tmp_path / "log.jsonl")
    from tensorir.te.serialize import workload_key
    assert workload_key(first) == workload_key(second)
    spec_of = lambda path, fn: WorkloadSpec.parse(f"{path}:{fn}")  # noqa: E731
    path = tmp_path / "ops.py"
    path.write_text("from tests.test_cli import _small_matmul\n"
                    "def first():\n    return _small_matmul('ABCijk')\n"
                    "def second():\n    return _small_matmul('XWYmnr')\n")
    Tuner(spec_of(path, "first"), small_config(2, cost_model=False), log=log).run()
    res = Tuner(spec_of(path, "second"), small_config(2, cost_model=False), log=log).run()
    Schedule.from_json(second, res.best.trace)      # the reported best replays on this naming
    # a record of the first naming, faster than anything: skipped for the second naming
    def replays_on_second(rec):
        try:
            Schedule.from_json(second, rec.trace)
            return True
        except ScheduleError:
            return False
    fake = next(r for r in log.records() if r.ok and not replays_on_second(r))
    log.append(dataclasses.replace(fake, costs=(1e-9,), confirmed=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k2 = build(second, log=tmp_path / "log.jsonl")
        k1 = build(first, log=tmp_path / "log.jsonl")
    assert "do not replay on these tensors and were skipped" in k2.lookup.reason
    assert k1.lookup.record.median_cost == 1e-9
    x, w = np.ones((9, 7), np.float32), np.ones((7, 12), np.float32)
    y = np.zeros((9, 12), np.float32)
    k2.bind(x, w, y)()
    np.testing.assert_allclose(y, x @ w)


def test_cli_tune_json_and_report(tmp_path, capsys):
    log = str(tmp_path / "cli.jsonl")
    code, out, err = run_cli(capsys, "tune", "matmul", "M=32", "N=24", "K=20", "--trials", "3", "--log", log,
                             "--json", "--quiet", "--seed", "3")
    assert code == 0, err
    obj = json.loads(out.strip().splitlines()[-1])
    for key in ("workload", "params", "trials", "best_gflops", "best_latency_s", "default_gflops", "numpy_gflops",
                "errors", "tune_seconds", "log"):
        assert key in obj
    assert obj["workload"] == "matmul" and obj["params"]["M"] == 32 and obj["trials"] == 3
    assert obj["best_gflops"] > 0 and obj["numpy_gflops"] > 0 and obj["log"].endswith("cli.jsonl")
    assert sum(v["measured"] for v in obj["chosen_by"].values()) == obj["trials"]
    assert "s = Schedule(tensors)" in out and "chosen by     Optuna unscreened 3" in out
    code, out, err = run_cli(capsys, "report", "--log", log)
    assert code == 0 and "matmul(M=32, N=24, K=20" in out and "why it is fast" in out


def test_cli_tune_user_file_with_space(tmp_path, capsys):
    path = tmp_path / "ops.py"
    path.write_text(STENCIL + '''

def space(cfg, s):
    cfg.define_split("tile", s.extent("y.j"), num_outputs=2, policy="power2", max_factor=16)
    s, (jo, ji) = cfg["tile"].apply(s, "y.j")
    return s.vectorize(ji) if cfg.define_knob("vec", [True, False]) else s
''')
    code, out, err = run_cli(capsys, "tune", f"{path}:stencil", "n=30", "--trials", "3", "--log",
                             str(tmp_path / "u.jsonl"), "--space", f"{path}:space", "--json", "--quiet")
    assert code == 0, err
    obj = json.loads(out.strip().splitlines()[-1])
    assert obj["numpy_gflops"] is None and obj["best_gflops"] > 0


@pytest.mark.parametrize("seconds,text", [(2.5, "2.500 s"), (0.0123, "12.300 ms"), (1.37e-4, "0.137 ms"),
                                          (8.2e-5, "82.00 us"), (5.1e-7, "0.51 us")])
def test_latencies_print_in_a_unit_that_keeps_their_digits(seconds, text):
    from tuner.report import format_latency
    assert format_latency(seconds) == text


@pytest.mark.parametrize("args,pattern", [
    (["tune", "matmulx"], r"unknown workload"),
    (["tune", "matmul", "Q=3"], r"Q"),
    (["tune", "matmul", "M=-4"], r"M"),
    (["tune", "matmul", "M"], r"NAME=VALUE|M"),
    (["tune", "/no/such/file.py:f"], r"not found"),
    (["tune", "matmul", "--trials", "0"], r"--trials must be a positive integer"),
    (["tune", "matmul", "--log", "/proc/version/x.jsonl"], r"cannot"),
    (["tune", "matmul", "--space", "/no/such.py:s"], r"not found"),
    (["tune", "matmul", "--storage", "notaurl"], r"cannot open the Optuna storage 'notaurl'"),
    (["tune", "matmul", "--seed", "-5"], r"--seed must be an integer in \[0, 2\*\*32\)"),
    (["tune", "ops.py"], r"looks like a file: name the function.*ops\.py:function"),
    (["report", "--top", "-2"], r"--top must be a positive integer, got -2"),
    (["report", "--log", "/no/such/tuning.jsonl"], r"tuning log /no/such/tuning.jsonl not found"),
    (["report", "matmulx"], r"unknown workload"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, args, pattern):
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert "Traceback" not in err
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("tensortune: error:"), err
    import re
    assert re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("func,pattern", [("not_tensors", r"not_tensors"), ("raises", r"boom"),
                                          ("missing", r"no function named 'missing'"),
                                          ("outputs_first", r"input\(s\) 'x' listed after output 'y'"),
                                          ("exits", r"exits\(\) raised SystemExit: 3"),
                                          ("reads_past_end", r"reads x\[i \+ 1\] out of bounds")])
def test_cli_bad_user_function(tmp_path, capsys, func, pattern):
    path = tmp_path / "ops.py"
    path.write_text(STENCIL)
    code, _, err = run_cli(capsys, "tune", f"{path}:{func}", "--trials", "1", "--log", str(tmp_path / "x.jsonl"))
    assert code == 2 and "Traceback" not in err
    import re
    assert re.search(pattern, err), err


def test_workload_file_imports_a_module_next_to_it(tmp_path):
    (tmp_path / "helper_mod_for_test.py").write_text("FACTOR = 3.0\n")
    (tmp_path / "uses.py").write_text("from tensorir import te\nfrom helper_mod_for_test import FACTOR\n"
                                      "def f(n=8):\n    x = te.placeholder((n,), 'float32', 'x')\n"
                                      "    return [x, te.compute((n,), lambda i: x[i] * FACTOR, 'y')]\n")
    spec = WorkloadSpec.parse(f"{tmp_path / 'uses.py'}:f")
    x = spec.inputs(0)[0]
    np.testing.assert_allclose(spec.reference([x])[0], x * 3.0)


def test_cli_tunes_a_workload_whose_reference_has_nans(tmp_path, capsys):
    path = tmp_path / "ops.py"
    path.write_text(STENCIL)
    code, out, err = run_cli(capsys, "tune", f"{path}:log_of_signed", "--trials", "3", "--json", "--quiet",
                             "--log", str(tmp_path / "x.jsonl"))
    assert code == 0, err
    assert json.loads(out.strip().splitlines()[-1])["best_gflops"] > 0
