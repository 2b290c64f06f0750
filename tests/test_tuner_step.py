"""The tuner's structure: step() rounds, measure callbacks, interleaved tuners, module boundaries."""
from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys
import zlib

import pytest

from logs import TuningLog
from tuner.callbacks import DEFAULT_CALLBACKS, Round, add_to_log, remeasure_fastest
from tuner.measure import Measurer, MeasureResult
from tuner.search import TuneConfig, Tuner, drive
from tuner.spec import WorkloadSpec

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture
def fake_measurer(monkeypatch):
    """No worker processes; a fixed cost per loop nest (the same in every process)."""
    def measure(self, candidates, before_timing=None, screen=True):
        if before_timing is not None:
            before_timing()
        return [MeasureResult(costs=[1e-4 * (1 + zlib.crc32(str(f).encode()) % 97)] * 3, func=f)
                for f in candidates]
    monkeypatch.setattr(Measurer, "measure", measure)
    monkeypatch.setattr(Measurer, "start", lambda self: self)
    monkeypatch.setattr(Measurer, "close", lambda self: None)


def config(trials, **kw):
    return TuneConfig(trials=trials, batch_size=4, **kw)


def keys(records) -> list:
    return [json.dumps(r.decisions, sort_keys=True) for r in records]


def test_step_drives_one_round_and_returns_it(tmp_path, fake_measurer):
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=20", "K=9"])
    log = TuningLog(tmp_path / "l.jsonl")
    tuner = Tuner(spec, config(10, cost_model=False), log=log).start()
    rnd = tuner.step()
    assert isinstance(rnd, Round) and len(rnd.trials) == 4 and rnd.repeats == []
    assert tuner.state.measured == 4 and [m.record for m in rnd.trials] == log.records()
    assert all(m.gflops > 0 and m.candidate.trial is not None for m in rnd.trials)
    first = keys(m.record for m in rnd.trials)
    rnd = tuner.step()       # the second round: the first round's schedules again, and the default schedule
    assert len(rnd.trials) == 4 and [m.record.remeasured for m in rnd.repeats] == [True] * 4 + [False]
    assert sorted(keys(m.record for m in rnd.repeats[:4])) == sorted(first) and rnd.repeats[4].candidate.decisions == {}
    rnd = tuner.step()       # the last round measures what is left
    assert len(rnd.trials) == 2 and tuner.state.measured == 10
    assert tuner.step() is None and tuner.stop_reason is None
    res = tuner.finish()
    assert res.trials == 10 and res.best is not None
    trials = [r for r in log.records() if not r.remeasured and not r.confirmed and r.decisions]
    assert len(trials) == 10 and len(set(keys(trials))) == 10
    done = [t for t in tuner.study.trials if t.state.name == "COMPLETE"]
    assert len(done) == 10, "every measured trial is told to the study"


def test_callbacks_are_called_in_order_after_every_round(tmp_path, fake_measurer):
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=20", "K=9"])
    calls, rounds = [], []

    def first(tuner, rnd):
        calls.append(("first", len(rnd.trials)))
        rounds.append(rnd)

    def second(tuner, rnd):
        assert calls[-1][0] == "first" and rounds[-1] is rnd
        calls.append(("second", tuner.state.measured))

    tuner = Tuner(spec, config(8, cost_model=False), log=TuningLog(tmp_path / "l.jsonl"),
                  callbacks=[*DEFAULT_CALLBACKS, first, second]).start()
    returned = [tuner.step(), tuner.step()]
    assert tuner.step() is None
    tuner.finish()
    assert calls == [("first", 4), ("second", 4), ("first", 4), ("second", 8)]
    assert rounds == returned


def test_the_callback_list_decides_what_follows_a_round(tmp_path, fake_measurer):
    """Without ``add_to_log`` nothing measured reaches the log; without ``remeasure_fastest`` nothing
    is measured again; the search itself goes on the same."""
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=20", "K=9"])
    log = TuningLog(tmp_path / "l.jsonl")
    res = Tuner(spec, config(12, cost_model=False, finalists=0), log=log,
                callbacks=[c for c in DEFAULT_CALLBACKS if c not in (add_to_log, remeasure_fastest)]).run()
    assert res.trials == 12 and res.remeasured == 0 and log.records() == []
    full = Tuner(spec, config(12, cost_model=False, finalists=0), log=TuningLog(tmp_path / "m.jsonl")).run()
    assert full.remeasured > 0
    assert [h[2] for h in res.history] == [h[2] for h in full.history], "the same trials, in the same order"


def test_two_tuners_interleaved_by_one_driver_both_finish_and_log(tmp_path, fake_measurer):
    """drive() steps two tuners in turn, one round each; each searches as it would alone."""
    a = WorkloadSpec.parse("matmul", ["M=24", "N=20", "K=9"])
    b = WorkloadSpec.parse("softmax", ["rows=9", "cols=70"])
    shared = TuningLog(tmp_path / "shared.jsonl")
    order = []

    def note(tuner, rnd):
        order.append(tuner.spec.name)

    cfg = {"cost_model": False, "finalists": 2, "final_rounds": 1}
    ta = Tuner(a, config(8, **cfg), log=shared, callbacks=[*DEFAULT_CALLBACKS, note])
    tb = Tuner(b, config(12, **cfg), log=shared, callbacks=[*DEFAULT_CALLBACKS, note])
    ra, rb = drive([ta, tb])
    assert (ra.trials, rb.trials) == (8, 12) and ra.best is not None and rb.best is not None
    # rounds alternate while both run; the softmax space may need an extra round when two asks of a
    # round build the same loop nest (a duplicate is not measured twice)
    assert order[:4] == ["matmul", "softmax", "matmul", "softmax"] and set(order[4:]) == {"softmax"}
    recs = shared.records()
    assert {r.workload_key for r in recs} == {a.key, b.key}
    # the rounds of the two workloads alternate in the shared log
    trial_keys = [r.workload_key for r in recs if not r.remeasured and not r.confirmed and r.decisions]
    assert trial_keys[:4] == [a.key] * 4 and trial_keys[4:8] == [b.key] * 4
    assert ra.best.confirmed and rb.best.confirmed
    for spec, res in ((a, ra), (b, rb)):
        alone = TuningLog(tmp_path / f"{spec.name}.jsonl")
        Tuner(spec, config(res.trials, **cfg), log=alone).run()
        mine = [r for r in recs if r.workload_key == spec.key]
        assert keys(mine) == keys(alone.records()), "interleaving changes neither tuner's search or log"


def test_drive_closes_every_started_tuner_when_one_fails(tmp_path, fake_measurer, monkeypatch):
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=20", "K=9"])
    closed = []

    def boom(tuner, rnd):
        if tuner.spec.params["M"] == 16:
            raise RuntimeError("boom")

    ta = Tuner(spec, config(8, cost_model=False), log=TuningLog(tmp_path / "a.jsonl"), callbacks=[boom])
    tb = Tuner(WorkloadSpec.parse("matmul", ["M=16", "N=20", "K=9"]), config(8, cost_model=False),
               log=TuningLog(tmp_path / "b.jsonl"), callbacks=[boom])
    real_close = Tuner.close
    monkeypatch.setattr(Tuner, "close", lambda self: closed.append(self) or real_close(self))
    with pytest.raises(RuntimeError, match="boom"):
        drive([ta, tb])
    assert closed == [ta, tb]
    assert not [t for t in ta.study.trials + tb.study.trials if t.state.name == "RUNNING"], \
        "the asks prepared ahead are withdrawn"


# ---------------------------------------------------------------- module boundaries

def test_report_does_not_import_the_cli():
    code = ("import sys, tuner.report as r\n"
            "from tuner.spec import SpecError\n"
            "try:\n    r.report([], 'no_such_workload')\nexcept SpecError:\n    pass\n"
            "else:\n    raise SystemExit('no SpecError')\n"
            "assert 'tuner.cli' not in sys.modules, 'tuner.report imported tuner.cli'\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


def _tuner_imports():
    for path in sorted((ROOT / "tuner").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                yield path.stem, node


def test_no_tuner_module_imports_another_ones_private_names():
    private = [(mod, node.module, a.name) for mod, node in _tuner_imports() if node.level == 1 or
               (node.module or "").startswith("tuner.") for a in node.names if a.name.startswith("_")]
    assert private == []


def test_the_tuner_reads_the_host_target_in_one_place():
    """Only tuner/target.py reads the host (tensorir's Target); the rest import host_target from there."""
    readers = [mod for mod, node in _tuner_imports()
               if any(a.name in ("Target", "host_target") for a in node.names)
               and not (node.level == 1 and node.module == "target")]
    assert readers == ["target"]


def test_candidates_and_measurer_classify_replay_and_lowering_failures_alike():
    from schedules import Schedule
    from schedules.space import FixedDecisions
    from tensorir import ops
    from tuner.candidates import Candidates
    from tuner.measure import prepare

    tensors = ops.matmul(8, 8, 8)

    class Space:     # decisions -> a schedule, as a search space does
        def apply(self, src):
            src.decisions["how"] = how = src.fixed["how"]
            s = Schedule(tensors)
            return s.parallel("C.k") if how == "replay" else s.vectorize("C.j") if how == "lower" else s

    spec = WorkloadSpec.parse("matmul", ["M=8", "N=8", "K=8"])
    cands = Candidates(spec, Space(), {"kind": "llvm", "cpu": "x", "threads": 1})
    bad_trace = Schedule(tensors).vectorize("C.j").to_json()
    for how, kind in (("replay", "schedule"), ("lower", "lower"), ("none", None)):
        src = FixedDecisions({"how": how})
        src.fixed = {"how": how}
        c = cands.prepare(None, src=src)
        assert (c.error.error_kind if c.error else None) == kind and (c.func is None) == (kind is not None)
    assert prepare(tensors, bad_trace).error_kind == "lower"
    assert prepare(tensors, {"instructions": [{"op": "nope"}]}).error_kind == "schedule"


def test_code_generation_passes_run_only_when_a_candidate_is_measured(monkeypatch):
    """An ask stops at the schedule's own nest (features, telling asks apart); ``func`` runs the
    remaining passes on first use and gives what ``lower()`` gives; a failure there is a "lower"
    error that the tuner reports for that candidate without measuring it."""
    from types import SimpleNamespace

    import schedules.lowering as lowering
    from schedules.decisions import FixedDecisions
    from schedules.space import GeneratedSpace
    from tuner.candidates import Candidates
    from tuner.search import Tuner

    spec = WorkloadSpec.parse("matmul", ["M=64", "N=64", "K=64"])
    space = GeneratedSpace(spec.tensors())
    cands = Candidates(spec, space, {"kind": "llvm", "cpu": "x", "threads": 1})
    decisions = space.default_decisions()
    c = cands.prepare(None, decisions)
    assert c.error is None and c.features is not None and c.lowered is None
    assert c.nest == space.apply(FixedDecisions(decisions)).lower(until=lowering.SCHEDULED)
    assert c.func == space.apply(FixedDecisions(decisions)).lower() and c.lowered is c.func

    def broken(*args, **kw):
        raise RuntimeError("a pass failed")
    monkeypatch.setattr(lowering, "apply_passes", broken)
    bad = cands.prepare(None, decisions)
    assert bad.error is None and bad.func is None and bad.error.error_kind == "lower"
    assert "a pass failed" in bad.error.error_msg
    sent = []
    stub = SimpleNamespace(measurer=SimpleNamespace(measure=lambda funcs, **kw: sent.append(funcs) or ["ok"] * len(funcs)))
    assert Tuner._measure(stub, [c, bad]) == ["ok", bad.error] and sent == [[c.func]]


def test_asker_runs_the_code_generation_passes_only_when_every_ask_is_measured():
    import random

    import optuna

    from schedules.space import GeneratedSpace
    from tuner.candidates import Candidates
    from tuner.screening import Asker
    from tuner.state import RunState

    spec = WorkloadSpec.parse("matmul", ["M=64", "N=64", "K=64"])
    cands = Candidates(spec, GeneratedSpace(spec.tensors()), {"kind": "llvm", "cpu": "x", "threads": 1})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for finish in (False, True):
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
        asker = Asker(cands, study, RunState(seen=set()), random.Random(0), 4, finish=finish)
        asker.run()
        pool = asker.take()
        assert pool and all((c.lowered is not None) == finish for c in pool)
        assert all(c.func is not None and c.func == c.schedule.lower() for c in pool)
