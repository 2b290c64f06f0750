"""tune-model's final check: a model's choice record (in-model times), how lookups rank it, and the check
itself on a small model: a tuned kernel weighed against its start inside the model, the verdict logged
and then used by builds."""
import json

import numpy as np
import onnx
import pytest

from logs import TuningLog, TuningRecord, build, clear_cache, find_best
from schedules.decisions import RandomDecisions
from schedules.space import GeneratedSpace
from tests.onnx_models import mlp
from tests.test_logs import ZEN2, make
from tuner.model_api import load
from tuner.model_choice import choice_records, choose, differing
from tuner.model_compile import assemble, build_kernels, plan_graph
from tuner.model_tasks import extract_tasks


@pytest.fixture(autouse=True)
def _fresh_lookup_cache():
    clear_cache()
    yield
    clear_cache()


def test_choice_field_is_optional_in_json_and_round_trips():
    plain = make()
    assert "model_choice" not in json.loads(plain.to_json_line())
    chosen = make(model_choice=True)
    assert json.loads(chosen.to_json_line())["model_choice"] is True
    assert TuningRecord.from_json(chosen.to_json_line()) == chosen


def test_latest_choice_ranks_first_unless_choices_are_ignored(tmp_path):
    log = TuningLog(tmp_path / "log.jsonl")
    fast = make(cost=1e-4, tile=8, confirmed=True)                       # fastest alone, confirmed
    old = make(cost=5e-3, tile=16, model_choice=True, timestamp="2026-11-21T12:00:00.000Z")
    new = make(cost=9e-3, tile=32, model_choice=True, timestamp="2026-11-22T12:00:00.000Z")
    for r in (fast, new, old):
        log.append(r)
    assert find_best(fast.workload_key, ZEN2, [log.path]).record.decisions == {"tile": 32}
    assert find_best(fast.workload_key, ZEN2, [log.path], choices=False).record.decisions == {"tile": 8}


def _other_point(space, start: dict):
    """A random point of ``space`` other than its start: ``(decision source, schedule)``."""
    for seed in range(50):
        src = RandomDecisions(seed)
        sch = space.apply(src)
        if src.decisions != start:
            return src, sch
    raise AssertionError("every random point was the start")


def test_check_keeps_the_faster_kernel_in_the_model_and_builds_use_it(tmp_path):
    model = mlp(batch=8, sizes=(128, 256, 64))
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    graph = load(str(path))
    plan = plan_graph(graph)
    tasks = extract_tasks(plan.graph, plan.groups, plan.lowered)
    lw = plan.lowered[0]
    # a logged "best" for the first task that is not its start (a random point of its space)
    space = GeneratedSpace(lw.tensors)
    start = space.default_decisions()
    src, sch = _other_point(space, start)
    trace = sch.to_json()
    log = TuningLog(tmp_path / "log.jsonl")
    from logs.apply import current_target
    log.append(TuningRecord(workload_key=lw.key, workload_name="group", workload_params={}, target=current_target(1),
                            trace=trace, decisions=dict(src.decisions), costs=(1e-6,), flops=1, confirmed=True))
    tuned = build_kernels(plan, log=log.path, threads=1, choices=False)
    starts = build_kernels(plan, log=[], threads=1)
    start_of = differing(plan, tuned, starts)
    assert list(start_of) == [lw.key] and start_of[lw.key][1] == start
    feeds = {"input": np.random.default_rng(0).standard_normal(graph.types["input"].shape).astype(np.float32)}
    (c,) = choose(plan, tuned, starts, [lw.key], feeds, 1, {lw.key: "task 0"}, rounds=3)
    assert c.kept in ("tuned", "start") and c.tuned_s > 0 and c.start_s > 0 and len(c.tuned_rounds) == 3
    assert (c.kept == "start") == (c.start_s < c.tuned_s * 0.97)
    by_key = {t.spec.key: t for t in tasks}
    (rec,) = choice_records(tuned, [c], start_of, by_key, 1, "m.onnx")
    assert rec.model_choice and rec.meta["origin"] == "model:check" and len(rec.costs) == 3
    log.append(rec)
    clear_cache()
    kernel = build(lw.tensors, log=log.path, threads=1, warn=False)
    assert kernel.lookup.record.model_choice
    assert kernel.lookup.record.decisions == (dict(src.decisions) if c.kept == "tuned" else start)
    # the model built from the log computes what the untuned one does
    got = assemble(plan, build_kernels(plan, log=log.path, threads=1)).run(feeds)
    want = assemble(plan, starts).run(feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)
