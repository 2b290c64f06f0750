"""The tuner end to end on small workloads: search, spaces, knobs, measurement policy (the CLI: test_cli.py)."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from logs import TuningFallbackWarning, TuningLog, build
from schedules.knobs import KnobSpace, SplitEntity, _factorizations
from schedules import Schedule
from schedules.state import AttachKind
from schedules.space import FixedDecisions, GeneratedSpace, MutatedDecisions, RandomDecisions, SpaceOptions
from tensorir import ops
from tensorir import te
from schedules.errors import DecisionError, ScheduleError
from tuner.search import TuneConfig, Tuner
from tuner.spec import WorkloadSpec

STENCIL = '''
from tensorir import te

def stencil(n=40, m=37):
    x = te.placeholder((n, m), "float32", "x")
    y = te.compute((n - 2, m - 2), lambda i, j: (x[i, j + 1] + x[i + 2, j + 1] + x[i + 1, j] + x[i + 1, j + 2])
                   * 0.25 - x[i + 1, j + 1], "y")
    k = te.reduce_axis(m - 2, "k")
    z = te.compute((n - 2,), lambda i: te.max(y[i, k], axis=k), "z")
    return [x, z]

def not_tensors(n=3):
    return 42

def raises(n=3):
    raise RuntimeError("boom")

def exits(n=3):
    raise SystemExit(3)

def outputs_first(n=5):
    x = te.placeholder((n,), "float32", "x")
    return [te.compute((n,), lambda i: x[i] * 2.0, "y"), x]

def reads_past_end(n=8):
    x = te.placeholder((n,), "float32", "x")
    return [x, te.compute((n,), lambda i: x[i + 1], "y")]

def log_of_signed(n=64):
    x = te.placeholder((n,), "float32", "x")      # inputs in [-1, 1): half the outputs are NaN
    return [x, te.compute((n,), lambda i: te.log(x[i]), "y")]
'''


def small_config(trials=4, **kw):
    cfg = TuneConfig(trials=trials, batch_size=4, **kw)
    cfg.measure.repeat, cfg.measure.min_repeat_ms = 2, 2.0
    return cfg


# ------------------------------------------------------------------ the loop

def test_tune_resume_and_build_with_log(tmp_path):
    spec = WorkloadSpec.parse("matmul", ["M=48", "N=40", "K=33"])
    log = TuningLog(tmp_path / "t.jsonl")
    r1 = Tuner(spec, small_config(6), log=log).run()
    assert r1.trials == 6 and r1.best is not None and r1.best.ok
    recs = log.records()
    assert len(recs) >= 6 and all(r.workload_key == spec.key for r in recs)
    first = {json.dumps(r.decisions, sort_keys=True) for r in recs}
    r2 = Tuner(spec, small_config(4, seed=1), log=log).run()
    assert r2.resumed == len(recs)
    new = [json.dumps(r.decisions, sort_keys=True) for r in log.records()[len(recs):]
           if r.error_kind is None and not r.confirmed and not r.remeasured]        # (the final re-timing re-measures on purpose)
    assert new and not (set(new) & first), "a resumed run must not re-measure what the log holds"
    # a build with the log reuses the best schedule and computes the right numbers
    tensors = spec.tensors()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TuningFallbackWarning)
        kernel = build(tensors, log=str(tmp_path / "t.jsonl"))
    assert kernel.lookup.match == "exact"
    a, b = spec.inputs(0)
    c = np.empty((48, 40), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_a_sqlite_study_is_written_back_at_the_end_and_completed_from_the_log(tmp_path, monkeypatch):
    """With a SQLite storage the run searches on an in-memory copy of the study and writes its
    measured trials back when it ends; measurements the copy lacks (a run killed before writing
    back) are added from the log when the next run loads it."""
    import optuna
    import tuner.search as S
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=20", "K=9"])
    log, url = TuningLog(tmp_path / "t.jsonl"), f"sqlite:///{tmp_path}/t.db"
    studies = []
    real_study = S.Tuner._study
    monkeypatch.setattr(S.Tuner, "_study", lambda self, prev: studies.append(real_study(self, prev)) or studies[-1])

    def stored():
        (summary,) = optuna.get_all_study_summaries(url)
        study = optuna.load_study(study_name=summary.study_name, storage=url)
        return study.get_trials(deepcopy=False)

    r1 = Tuner(spec, small_config(5), log=log, storage=url).run()
    assert studies[0]._storage.__class__.__name__ == "InMemoryStorage"
    complete = [t for t in stored() if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(complete) >= r1.trials and all(t.state == optuna.trial.TrialState.COMPLETE for t in stored())
    # a "killed" run: measured and logged, never written back
    monkeypatch.setattr(S, "write_back", lambda study, mirror, synced: mirror)
    Tuner(spec, small_config(4, seed=1), log=log, storage=url).run()
    assert len(stored()) == len(complete)
    monkeypatch.undo()
    monkeypatch.setattr(S.Tuner, "_study", lambda self, prev: studies.append(real_study(self, prev)) or studies[-1])
    Tuner(spec, small_config(1, seed=2), log=log, storage=url).run()
    params = {tuple(sorted(t.params.items())) for t in studies[-1].trials}
    measured = {json.dumps(r.decisions, sort_keys=True) for r in log.records() if r.ok and r.decisions}
    assert len(params) >= len(measured), "the third run's study holds every logged schedule"


def test_build_without_record_falls_back_with_one_clear_warning(tmp_path):
    tensors = ops.matmul(8, 8, 8)
    with pytest.warns(TuningFallbackWarning, match=r"1 build used no tuned schedule \(searched .*empty.jsonl\):\n"
                      r".*\n  matmul\(M=8, N=8, K=8\) +heuristic +no record +tensortune tune matmul M=8 N=8 K=8$"):
        kernel = build(tensors, log=str(tmp_path / "empty.jsonl"))
    a = np.ones((8, 8), np.float32)
    c = np.empty((8, 8), np.float32)
    kernel(a, a, c)
    np.testing.assert_allclose(c, a @ a)


def test_cost_model_transfer_from_other_workloads_in_the_log(tmp_path):
    from cost_model import CostModel
    from tuner.search import pretrain_from_log
    log = TuningLog(tmp_path / "t.jsonl")
    Tuner(WorkloadSpec.parse("matmul", ["M=24", "N=32", "K=16"]), small_config(8), log=log).run()
    other = WorkloadSpec.parse("matmul", ["M=40", "N=16", "K=24"])
    model = CostModel()
    n = pretrain_from_log(model, log, other.key, Tuner(other, small_config(1)).target)
    assert n >= 8 and model.is_trained
    assert pretrain_from_log(CostModel(), log, other.key, {"kind": "llvm", "cpu": "other", "threads": 2}) == 0


def test_transfer_takes_every_other_workload_in_turn(tmp_path):
    from cost_model import CostModel
    from tuner.search import pretrain_from_log
    log = TuningLog(tmp_path / "t.jsonl")
    many = WorkloadSpec.parse("matmul", ["M=24", "N=32", "K=16"])
    few = WorkloadSpec.parse("softmax", ["rows=9", "cols=70"])
    Tuner(few, small_config(3), log=log).run()
    Tuner(many, small_config(10), log=log).run()       # the newest records are all this one's
    target = Tuner(many, small_config(1)).target
    model = CostModel()
    assert pretrain_from_log(model, log, "some-other-key", target, limit=6) == 6
    groups = list(model._groups)
    assert groups.count(few.key) == 3 and groups.count(many.key) == 3


def test_random_search_without_cost_model(tmp_path):
    spec = WorkloadSpec.parse("softmax", ["rows=9", "cols=70"])
    res = Tuner(spec, small_config(4, sampler="random", cost_model=False), log=TuningLog(tmp_path / "l")).run()
    assert res.trials == 4 and res.best is not None


def test_no_kernel_is_timed_while_xgboost_is_still_being_imported(tmp_path, monkeypatch):
    """The background import of xgboost (seconds of CPU) ends before the first kernel's clock starts."""
    import threading
    import time

    import tuner.search as S
    from tuner.measure import Measurer
    done, timed_during_import = threading.Event(), []

    def slow_import():
        time.sleep(2.5)      # longer than the first round's compilation
        done.set()

    def send_run(self, *args, _orig=Measurer._send_run):
        timed_during_import.append(not done.is_set())
        return _orig(self, *args)
    monkeypatch.setattr(S, "_import_xgboost", slow_import)
    monkeypatch.setattr(Measurer, "_send_run", send_run)
    spec = WorkloadSpec.parse("matmul", ["M=16", "N=32", "K=8"])
    res = Tuner(spec, small_config(4), log=TuningLog(tmp_path / "l")).run()
    assert res.trials == 4 and timed_during_import and not any(timed_during_import)


def test_exhausted_space_stops_with_a_reason(tmp_path):
    """An elementwise op on 6 elements has a handful of distinct loop nests: no spinning to 64."""
    import tuner.search as S
    path = tmp_path / "tiny.py"
    path.write_text("from tensorir import te\n\ndef tiny(n=6):\n    x = te.placeholder((n,), 'float32', 'x')\n"
                    "    return [x, te.compute((n,), lambda i: x[i] * 2.0, 'y')]\n")
    spec = WorkloadSpec.parse(f"{path}:tiny")
    res = Tuner(spec, small_config(64, cost_model=False), log=TuningLog(tmp_path / "l")).run()
    assert res.best is not None and 1 <= res.trials < 64
    assert res.stop_reason and "exhausted" in res.stop_reason
    assert res.asked < res.trials + 4 * S.STALE_ASKS


def test_a_sampler_that_repeats_itself_does_not_end_the_run(tmp_path, monkeypatch):
    """Repeated asks (a converged TPE) are replaced by mutants of the best schedules, not counted as exhaustion."""
    import warnings

    import optuna
    import tuner.search as S
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    probe = Tuner(spec, small_config(1))
    fixed = probe._as_params(probe.space.default_decisions())      # every ask: the same schedule
    monkeypatch.setattr(S, "make_sampler", lambda name, seed: optuna.samplers.PartialFixedSampler(
        fixed, optuna.samplers.RandomSampler(seed=seed)))
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    log = TuningLog(tmp_path / "l")
    res = Tuner(spec, small_config(20, cost_model=False, seed_heuristic=False, finalists=0), log=log).run()
    assert res.stop_reason is None and res.trials == 20
    assert res.mutants == 19, "one measured ask, then mutants in the repeats' place"
    recs = [r for r in log.records() if not r.confirmed and not r.remeasured and r.decisions]  # (not the default)
    assert len({json.dumps(r.decisions, sort_keys=True) for r in recs}) == len(recs) == 20


def test_generated_space_invalid_share_is_zero_on_user_stencil(tmp_path):
    path = tmp_path / "ops.py"
    path.write_text(STENCIL)
    spec = WorkloadSpec.parse(f"{path}:stencil", ["n=20", "m=19"])
    from schedules.space import GeneratedSpace
    space = GeneratedSpace(spec.tensors())
    for seed in range(30):
        space.apply(RandomDecisions(seed)).lower()  # never raises: every decision vector is legal


def two_products_plus(M=12, N=20, K=9):
    """Y = X @ W + H @ U: two reductions feed one elementwise output."""
    X, W = te.placeholder((M, K), "float32", "X"), te.placeholder((K, N), "float32", "W")
    H, U = te.placeholder((M, K), "float32", "H"), te.placeholder((K, N), "float32", "U")
    k1, k2 = te.reduce_axis(K, "k1"), te.reduce_axis(K, "k2")
    XW = te.compute((M, N), lambda i, j: te.sum(X[i, k1] * W[k1, j], axis=k1), "XW")
    HU = te.compute((M, N), lambda i, j: te.sum(H[i, k2] * U[k2, j], axis=k2), "HU")
    return [X, W, H, U, te.compute((M, N), lambda i, j: XW[i, j] + HU[i, j], "Y")]


def test_generated_space_with_two_reductions_feeding_one_output():
    from schedules.space import GeneratedSpace
    from tests.conftest import check_against_evaluator
    space = GeneratedSpace(two_products_plus())
    for src in [FixedDecisions(space.default_decisions())] + [RandomDecisions(seed) for seed in range(12)]:
        check_against_evaluator(space.apply(src))


@pytest.mark.parametrize("epilogue", [False, True])
def test_outer_decision_puts_that_axis_first_in_the_parallel_loop(epilogue):
    """``outer`` picks which spatial axis's tiles the parallel loop walks first; results stay exact."""
    tensors, name = (ops.dense(24, 40, 64), "Y") if epilogue else (ops.matmul(24, 64, 40), "C")
    space = GeneratedSpace(tensors)
    base = {**space.default_decisions(), f"{name}.parallel": True}
    for k in list(base):    # register tile 2 x 16, two tiles per task: outer extents i 6, j 2
        tile = {"t3": 16 if ".j." in k else 2, "t2": 1, "t1": 2}.get(k.rsplit(".", 1)[-1])
        base[k] = base[k] if tile is None else tile
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in tensors[:-1]]
    want = None
    for first, axis in [(0, "i"), (1, "j")]:
        s = space.apply(FixedDecisions({**base, f"{name}.outer": first}))
        fused = s.loops(name)[0]
        assert fused.startswith(f"{name}.{axis}_"), fused        # the chosen axis leads the fused loop
        assert s.extent(fused) > 2
        out = np.empty(tensors[-1].shape, np.float32)
        s.build()(*inputs, out)
        want = out if want is None else want
        np.testing.assert_allclose(out, want, rtol=1e-5)
    ref = inputs[0] @ (inputs[1].T if epilogue else inputs[1])
    if epilogue:
        ref = np.maximum(ref + inputs[2], 0)
    np.testing.assert_allclose(want, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("which", ["matmul", "dense"])
def test_pack_in_task_packs_each_tasks_block_inside_the_parallel_loop(which):
    """``pack_in_task``: the parallel loop walks the vector axis's blocks and each task packs its own
    block of the panels (sizes no tile divides); results equal numpy either way, and a decision dict
    written before the choice existed replays as a pack at root."""
    tensors, name = (ops.dense(37, 29, 70), "Y") if which == "dense" else (ops.matmul(37, 70, 29), "C")
    space = GeneratedSpace(tensors, SpaceOptions(vector_bits=512, cores=2))
    base = {**space.default_decisions(), f"{name.replace('Y', 'D')}.j.t3": 16}
    for k in [k for k in base if k.rsplit(".", 1)[-1] in ("t2", "t1")]:
        base[k] = 1                                   # 5 tasks of 16 columns (the last one 6 wide)
    packed = "W_pack" if which == "dense" else "B_pack"
    anchor = "D" if which == "dense" else "C"
    rng = np.random.default_rng(1)
    inputs = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in tensors[:-1]]
    ref = inputs[0] @ (inputs[1].T if which == "dense" else inputs[1])
    if which == "dense":
        ref = np.maximum(ref + inputs[2], 0)
    for in_task in (True, False, None):
        d = {**base, f"{anchor}.pack_in_task": in_task, f"{name}.parallel": True}
        if in_task is None:
            del d[f"{anchor}.pack_in_task"]
        src = FixedDecisions(d)
        s = space.apply(src)
        assert src.decisions[f"{anchor}.pack_in_task"] is bool(in_task)
        stage = s.stage_graph().stage(packed)
        assert (stage.attach.kind is AttachKind.AT) is bool(in_task), stage.attach
        if in_task:
            assert f"{stage.attach.stage}.{stage.attach.loop}" == s.loops(name)[0], stage.attach
            assert s.loops(name)[0].startswith(f"{name}.j.")
        out = np.empty(tensors[-1].shape, np.float32)
        s.build()(*inputs, out)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("in_task", [True, False])
def test_a_transposing_pack_gathers_one_vector_of_rows_at_a_time(in_task):
    """dense packs W[j, k] into panels along j (not W's contiguous axis): each sweep over k gathers
    one vector's rows, not the whole panel's (64 rows 4 KiB apart thrash one L1 set); matmul's
    pack of B[k, j] along its contiguous axis keeps its order.  Results equal numpy (odd sizes)."""
    tensors = ops.dense(37, 70, 90)
    space = GeneratedSpace(tensors, SpaceOptions(vector_bits=512, cores=2))
    d = {**space.default_decisions({"D.j.t3": 64, "D.i.t3": 6}), "W_pack.vector": 16, "D.pack_in_task": in_task,
         "Y.parallel": True}
    for k in [k for k in d if k.rsplit(".", 1)[-1] in ("t2", "t1")]:
        d[k] = 1
    s = space.apply(FixedDecisions(d))
    loops = s.loops("W_pack")
    if in_task:
        assert loops == ["W_pack.d0.o", "W_pack.d0.i.0", "W_pack.d1", "W_pack.d0.i.1"], loops
    else:       # at root the outer loops are fused into one parallel loop, chunks before rows of k
        assert loops == ["W_pack.d0.o_d0.i_d1_fused", "W_pack.d0.i.1"], loops
    rng = np.random.default_rng(2)
    x, w, b = (rng.uniform(-1, 1, t.shape).astype(np.float32) for t in tensors[:-1])
    out = np.empty(tensors[-1].shape, np.float32)
    s.build()(x, w, b, out)
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)
    mm = GeneratedSpace(ops.matmul(37, 70, 29), SpaceOptions(vector_bits=512, cores=2))
    ms = mm.apply(FixedDecisions({**mm.default_decisions({"C.j.t3": 64, "C.i.t3": 6}), "B_pack.vector": 16,
                                  "C.pack_in_task": True}))
    assert ms.loops("B_pack")[-2:] == ["B_pack.d1.i.0", "B_pack.d1.i.1"], ms.loops("B_pack")


@pytest.mark.parametrize("bits,registers", [(512, 32), (256, 16)])
def test_register_tile_leaves_room_for_operands(bits, registers):
    """Accumulators + one row of vector operands + a broadcast fit the vector registers."""
    from schedules.space import SpaceOptions
    space = GeneratedSpace(ops.matmul(1024, 1000, 64), SpaceOptions(vector_bits=bits, cores=2))
    lanes = bits // 32
    for seed in range(60):
        src = RandomDecisions(seed)
        space.apply(src)
        vectors = -(-src.decisions["C.j.t3"] // lanes)
        assert src.decisions["C.i.t3"] * vectors + vectors + 1 <= registers, src.decisions
    # the heuristic start: 6 rows (offered though 6 does not divide 1024: the edge tile is guarded)
    # x 4 vectors with 32 registers, x 2 with 16
    src = FixedDecisions(space.default_decisions())
    space.apply(src)
    assert src.decisions["C.i.t3"] == 6 and 6 in src.choices["C.i.t3"]
    assert src.decisions["C.j.t3"] == (4 if registers == 32 else 2) * lanes


# -------------------------------------------------------------------- knobs

def test_knob_space_define_split_reorder_knob(tmp_path):
    tensors = ops.matmul(24, 32, 16)

    def space_fn(cfg, s):
        cfg.define_split("tile_i", s.extent("C.i"), num_outputs=2)
        cfg.define_split("tile_j", s.extent("C.j"), num_outputs=3, policy="power2", max_factor=16)
        order = cfg.define_reorder("order", ["C.k", "C.i.1"])
        s, (io, ii) = cfg["tile_i"].apply(s, "C.i")
        s, (jo, jm, ji) = cfg["tile_j"].apply(s, "C.j")
        s = s.reorder(io, jo, jm, *order, ji)
        return s.vectorize(ji) if cfg.define_knob("vec", [True, False]) else s

    space = KnobSpace(tensors, space_fn)
    default = space.default_decisions()
    assert set(default) == {"tile_i", "tile_j", "order", "vec"}
    spec_in = [np.random.rand(24, 16).astype(np.float32), np.random.rand(16, 32).astype(np.float32)]
    for src in [FixedDecisions(default)] + [RandomDecisions(i) for i in range(5)]:
        k = space.apply(src).build()
        c = np.empty((24, 32), np.float32)
        k(*spec_in, c)
        np.testing.assert_allclose(c, spec_in[0] @ spec_in[1], rtol=1e-4)
    with pytest.raises(DecisionError, match="is not one of its choices"):
        space.apply(FixedDecisions({**default, "tile_i": [5, 5]}))


def test_mutated_decisions_change_the_named_decision_and_keep_the_rest():
    import random
    space = GeneratedSpace(ops.matmul(64, 48, 32))
    parent = space.default_decisions()
    rng = random.Random(0)
    moved = 0
    for name in parent:
        for _ in range(4):
            src = MutatedDecisions(parent, [name], rng)
            try:
                space.apply(src)
            except ScheduleError:
                continue
            if len(src.choices.get(name, [])) > 1:
                assert src.decisions[name] != parent[name]
                moved += 1
            for k in parent:
                if k != name and src.decisions.get(k, parent[k]) != parent[k]:
                    # only a decision whose old value is no longer offered may change
                    assert parent[k] not in src.choices[k]
    assert moved >= len(parent)


def test_split_factorizations():
    assert _factorizations(12, 2, "factors", None) == [[12, 1], [6, 2], [4, 3], [3, 4], [2, 6], [1, 12]]
    assert all(a * b == 12 for a, b in _factorizations(12, 2, "factors", None))
    assert [4, 2, 2] in _factorizations(16, 3, "factors", None)
    assert all(f[1] <= 8 for f in _factorizations(100, 2, "power2", 8))
    s, loops = SplitEntity((3, 4, 2)).apply(__import__("schedules").Schedule(ops.matmul(24, 8, 8)), "C.i")
    assert [s.extent(lp) for lp in loops] == [3, 4, 2]


def test_knob_errors():
    tensors = ops.matmul(8, 8, 8)
    with pytest.raises(ScheduleError, match="read before it is defined"):
        KnobSpace(tensors, lambda cfg, s: s.split("C.i", factor=cfg["x"].size[1])).default_decisions()
    with pytest.raises(ScheduleError, match="returned NoneType, expected the transformed Schedule"):
        KnobSpace(tensors, lambda cfg, s: None).default_decisions()


# ---------------------------------------------------------------------- CLI

def test_asks_prepared_ahead_pause_while_kernels_are_timed(tmp_path, monkeypatch):
    """The next round's asks run during compilation but never while the runner times a kernel."""
    import threading
    import time as _time
    from tuner.candidates import Candidates
    from tuner.measure import Measurer
    state = {"timing": False, "overlaps": 0, "threaded": 0}
    real_prepare, real_measure = Candidates.prepare, Measurer.measure

    def prepare(self, trial, decisions=None, src=None):
        if threading.current_thread() is not threading.main_thread():
            state["threaded"] += 1
        for _ in range(5):      # slow asks: the background thread is still busy when timing starts
            if state["timing"]:
                state["overlaps"] += 1
            _time.sleep(0.01)
        return real_prepare(self, trial, decisions, src)

    def measure(self, candidates, before_timing=None, screen=True):
        def hook():
            if before_timing is not None:
                before_timing()
            state["timing"] = True
        try:
            return real_measure(self, candidates, before_timing=hook, screen=screen)
        finally:
            state["timing"] = False

    monkeypatch.setattr(Candidates, "prepare", prepare)
    monkeypatch.setattr(Measurer, "measure", measure)
    spec = WorkloadSpec.parse("matmul", ["M=24", "N=40", "K=16"])
    res = Tuner(spec, small_config(12), log=TuningLog(tmp_path / "l")).run()
    assert res.trials == 12 and res.best is not None
    assert state["threaded"] > 0, "later rounds' asks should be prepared in the background"
    assert state["overlaps"] == 0
    recs = TuningLog(tmp_path / "l").records()
    default = [r for r in recs if not r.decisions and not r.remeasured and not r.confirmed]
    assert len(default) == 1 and not default[0].trace["instructions"]   # the default schedule, a contender
    assert len(recs) == res.trials + res.invalid + res.remeasured + len(res.finalists) + 1


def test_seeded_search_is_reproducible_with_asks_prepared_ahead(tmp_path, monkeypatch):
    """Same seed + same measurements -> the same candidates, whatever the thread timing."""
    import random as _random
    import time as _time
    from tuner.measure import MeasureResult, Measurer

    def fake_measure(self, candidates, before_timing=None, screen=True):
        _time.sleep(_random.random() * 0.05)          # timing jitter between the two runs
        if before_timing is not None:
            before_timing()
        return [MeasureResult(costs=[1e-3 * (1 + hash(str(f)) % 97)], func=f) for f in candidates]

    monkeypatch.setattr(Measurer, "measure", fake_measure)
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    runs = []
    for i in range(2):
        log = TuningLog(tmp_path / f"l{i}")
        Tuner(spec, small_config(16), log=log).run()
        runs.append([json.dumps(r.decisions, sort_keys=True) for r in log.records()])
    assert len(runs[0]) >= 16 and runs[0] == runs[1]


def _fake_timings(monkeypatch):
    """Measurements replaced by a fixed cost per loop nest (no compilation, no timing)."""
    from tuner.measure import MeasureResult, Measurer

    def fake_measure(self, candidates, before_timing=None, screen=True):
        if before_timing is not None:
            before_timing()
        return [MeasureResult(costs=[1e-3 * (1 + hash(str(f)) % 97)], func=f) for f in candidates]

    monkeypatch.setattr(Measurer, "measure", fake_measure)


def _keep_studies(monkeypatch) -> list:
    """The Optuna studies the tuner creates, appended to the returned list."""
    import tuner.search as S
    studies, real_study = [], S.Tuner._study

    def keep_study(self, previous):
        studies.append(real_study(self, previous))
        return studies[-1]

    monkeypatch.setattr(S.Tuner, "_study", keep_study)
    return studies


def test_model_picked_mutants_are_measured_told_to_the_study_and_replay(tmp_path, monkeypatch):
    """With ``mutants_per_measure``, variants of the best schedules compete with the sampler's asks."""
    import optuna

    studies = _keep_studies(monkeypatch)
    _fake_timings(monkeypatch)
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    log = TuningLog(tmp_path / "l")
    res = Tuner(spec, small_config(24, model_warmup=0, mutants_per_measure=4, epsilon=0.5), log=log).run()
    assert res.trials == 24 and 0 < res.mutants < 24 and res.arms["model:mutant"][0] > 0
    done = [t for t in studies[0].trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == res.trials + res.invalid, "every measurement, mutant or ask, is a completed trial"
    recs = [r for r in log.records() if r.ok and not r.confirmed and not r.remeasured and r.decisions]
    assert len({json.dumps(r.decisions, sort_keys=True) for r in recs}) == len(recs) == 24
    space = Tuner(spec, small_config(1)).space
    for r in recs:     # every logged decision vector (mutants included) replays exactly
        src = FixedDecisions(r.decisions, strict=True)
        space.apply(src)
        assert src.decisions == r.decisions
    # without the model nothing but the sampler's asks is measured (while it does not repeat itself)
    assert Tuner(spec, small_config(12, cost_model=False), log=TuningLog(tmp_path / "m")).run().mutants == 0


def test_model_ranks_only_after_its_warmup(tmp_path, monkeypatch):
    """``model_warmup``: until the model has that many samples, the sampler's asks alone are measured."""
    from tuner.screening import Screening

    ranked_at = []      # the model's sample count whenever it picked a round
    real_pick = Screening.pick

    def spy_pick(self, pool, want, model):
        if model is not None:
            ranked_at.append(model.n_samples)
        return real_pick(self, pool, want, model)

    _fake_timings(monkeypatch)
    monkeypatch.setattr(Screening, "pick", spy_pick)
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    res = Tuner(spec, small_config(24, model_warmup=12, finalists=0), log=TuningLog(tmp_path / "a")).run()
    assert ranked_at and min(ranked_at) >= 12 and res.arms["model:ask"][0] > 0
    ranked_at.clear()
    res = Tuner(spec, small_config(24, model_warmup=0, finalists=0), log=TuningLog(tmp_path / "b")).run()
    assert ranked_at and min(ranked_at) < 12, "without a warmup the model ranks from its first training"
    ranked_at.clear()
    res = Tuner(spec, small_config(16, model_warmup=10**6, finalists=0), log=TuningLog(tmp_path / "c")).run()
    assert ranked_at == [] and "model:ask" not in res.arms and res.trials == 16


def test_by_default_the_model_screens_the_samplers_asks(tmp_path, monkeypatch):
    """Default: once the model ranks, each batch is the sampler's first asks (an ``epsilon`` share)
    plus the model's top picks among the other asks; no mutants, every measurement is a trial."""
    import optuna
    from tuner.screening import Screening

    picks = []     # (pool size, measured, how many of them the sampler's first asks) per ranked round
    real_pick = Screening.pick

    def spy_pick(self, pool, want, model):
        picked, rest = real_pick(self, pool, want, model)
        if model is not None:
            assert self.n_ask(want, model) == (3 * want, 0), "3 asks per measured candidate, no mutants"
            picks.append((len(pool), len(picked), sum(c.origin == "sampler" for c in picked)))
        return picked, rest

    studies = _keep_studies(monkeypatch)
    _fake_timings(monkeypatch)
    monkeypatch.setattr(Screening, "pick", spy_pick)
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    cfg = TuneConfig(trials=40, batch_size=8, model_warmup=8, finalists=0, remeasure=1)
    cfg.measure.repeat, cfg.measure.min_repeat_ms = 2, 2.0
    res = Tuner(spec, cfg, log=TuningLog(tmp_path / "l")).run()
    assert res.trials == 40
    full = [p for p in picks if p[0] > p[1]]
    assert full, "the model ranked some rounds"
    for pool, measured, first_asks in full:
        assert pool > measured and first_asks == 2, (pool, measured, first_asks)   # 8 x 0.25
    assert res.arms["model:ask"][0] + res.arms.get("model:mutant", [0])[0] == sum(m - f for _, m, f in full)
    done = [t for t in studies[0].trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == res.trials + res.invalid, "every measured candidate is one of the sampler's trials"


@pytest.mark.parametrize("remeasure", [3, 1])
def test_fastest_schedules_are_measured_again_and_ranked_by_median(tmp_path, monkeypatch, remeasure):
    """A lucky first measurement does not make a schedule a finalist: the fastest are measured again."""
    import statistics
    import zlib
    from tuner.measure import MeasureResult, Measurer
    seen = {}

    def fake_measure(self, candidates, before_timing=None, screen=True):
        if before_timing is not None:
            before_timing()
        out = []
        for f in candidates:
            h = zlib.crc32(str(f).encode())
            cost = 1e-3 * (1 + h % 1000)
            if screen and h % 2 == 0 and str(f) not in seen:
                cost /= 20                      # half the schedules: one lucky first measurement
            seen[str(f)] = True
            out.append(MeasureResult(costs=[cost] * 3, func=f))
        return out

    monkeypatch.setattr(Measurer, "measure", fake_measure)
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    log = TuningLog(tmp_path / "l")
    res = Tuner(spec, small_config(24, cost_model=False, seed_heuristic=False, remeasure=remeasure), log=log).run()
    recs = log.records()
    key = lambda r: json.dumps(r.decisions, sort_keys=True)     # noqa: E731
    trials = [r for r in recs if r.ok and not r.confirmed and not r.remeasured and r.decisions]
    again = [r for r in recs if r.remeasured]
    assert res.trials == len(trials) == 24 and res.remeasured == len(again)
    tuning = {k: [r.median_cost for r in recs if key(r) == k and not r.confirmed] for k in map(key, trials)}
    confirmed = {key(r): r.median_cost for r in recs if r.confirmed}
    lucky = [k for k in confirmed if statistics.median(tuning[k]) < confirmed[k] / 5]
    if remeasure == 1:
        assert not again and lucky, "(the check below can fail: without repeats, lucky ones become finalists)"
        return
    default = json.dumps({})      # the default schedule is a contender measured before the trials
    assert again and {key(r) for r in again} <= set(tuning) | {default}, "repeats are of schedules measured before"
    assert all(len(tuning[k]) <= 3 for k in tuning)
    assert not lucky, "a finalist is ranked by the median of its measurements, the last round's included"


def test_fastest_schedules_are_confirmed_side_by_side_at_the_end(tmp_path, monkeypatch):
    """The run ends by re-timing its fastest few together; the confirmed order decides the best."""
    import zlib
    from tuner.measure import MeasureResult, Measurer
    calls = []

    def fake_measure(self, candidates, before_timing=None, screen=True):
        if before_timing is not None:
            before_timing()
        calls.append((len(candidates), screen))
        # while tuning, times are "lucky" in proportion to a hash; re-timed, the order reverses
        h = lambda f: 1 + zlib.crc32(str(f).encode()) % 100003     # noqa: E731 - distinct, same in every process
        cost = (lambda f: 1e-3 * h(f)) if screen else (lambda f: 1e-3 / h(f))
        return [MeasureResult(costs=[cost(f)] * 3, func=f) for f in candidates]

    monkeypatch.setattr(Measurer, "measure", fake_measure)
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    log = TuningLog(tmp_path / "l")
    # (no heuristic start: it would join the re-timing; test_the_heuristic_start_is_re_timed_with_the_finalists)
    res = Tuner(spec, small_config(12, finalists=3, final_rounds=2, seed_heuristic=False), log=log).run()
    assert [c for c in calls if not c[1]] == [(3, False), (3, False)], "3 finalists, 2 rounds, unscreened"
    confirmed = [r for r in log.records() if r.confirmed]
    assert len(confirmed) == 3 and all(len(r.costs) == 6 for r in confirmed)
    tuned = sorted((r for r in log.records() if r.ok and not r.confirmed and not r.remeasured), key=lambda r: r.median_cost)[:3]
    assert {json.dumps(r.decisions, sort_keys=True) for r in tuned} == \
        {json.dumps(r.decisions, sort_keys=True) for r in confirmed}
    assert res.best.confirmed and res.best == min(confirmed, key=lambda r: r.median_cost)
    assert res.best.decisions == tuned[-1].decisions, "the re-timing, not the tuning-time order, decides"
    assert [b for _, b in res.finalists] == sorted((b for _, b in res.finalists), reverse=True)
    assert log.best(spec.key, res.best.target)[0] == res.best      # and later builds use the same one
    # a resumed run re-times the earlier best with its own finalists
    calls.clear()
    Tuner(spec, small_config(4, finalists=2, final_rounds=1, seed=1), log=log).run()
    assert (3, False) in calls


def test_the_heuristic_start_is_re_timed_with_the_finalists(tmp_path, monkeypatch):
    """A start measured slow while tuning (a noisy core) is still re-timed at the end, and wins there."""
    from schedules.space import GeneratedSpace
    from tuner.measure import MeasureResult, Measurer
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    start = Tuner(spec, small_config(1)).candidates.prepare(None, GeneratedSpace(spec.tensors()).default_decisions()).func
    retimed = []

    def fake_measure(self, candidates, before_timing=None, screen=True):
        if not screen:
            retimed.append(start in candidates)
        slow, fast = (1.0, 1e-3) if screen else (1e-9, 1e-3)
        return [MeasureResult(costs=[slow if f == start else fast] * 3, func=f) for f in candidates]

    monkeypatch.setattr(Measurer, "measure", fake_measure)
    res = Tuner(spec, small_config(12, finalists=3, final_rounds=2), log=TuningLog(tmp_path / "l")).run()
    assert retimed == [True, True]
    assert res.best.confirmed and res.best.decisions == GeneratedSpace(spec.tensors()).default_decisions()


@pytest.mark.parametrize("faster, replaced", [(0.98, False), (0.90, True)])
def test_the_start_keeps_its_place_unless_beaten_by_more_than_noise(tmp_path, monkeypatch, faster, replaced):
    """In the final re-timing a contender must beat the heuristic start by more than START_MARGIN (3%)."""
    from schedules.space import GeneratedSpace
    from tuner.measure import MeasureResult, Measurer
    spec = WorkloadSpec.parse("matmul", ["M=64", "N=48", "K=32"])
    start = Tuner(spec, small_config(1)).candidates.prepare(None, GeneratedSpace(spec.tensors()).default_decisions()).func

    def fake_measure(self, candidates, before_timing=None, screen=True):
        # while tuning every contender looks twice as fast as the start; re-timed, `faster` times its time
        other = 0.5e-3 if screen else faster * 1e-3
        return [MeasureResult(costs=[1e-3 if f == start else other] * 3, func=f) for f in candidates]

    monkeypatch.setattr(Measurer, "measure", fake_measure)
    log = TuningLog(tmp_path / "l")
    res = Tuner(spec, small_config(12, finalists=3, final_rounds=2), log=log).run()
    is_start = res.best.decisions == GeneratedSpace(spec.tensors()).default_decisions()
    assert res.best.confirmed and is_start != replaced
    assert log.best(spec.key, res.best.target)[0] == res.best      # later builds use the same one
    retimed = [r for r in log.records() if len(r.costs) == 6]        # 2 final rounds x 3 costs
    assert len(retimed) == 4 and sum(r.confirmed for r in retimed) == (4 if replaced else 1)


@pytest.mark.parametrize("default_wins", [True, False])
def test_default_schedule_is_a_contender_never_a_trial(tmp_path, monkeypatch, default_wins):
    """The default schedule is measured once beside round 2: it wins where nothing tuned beats it;
    when screening stops it (far slower), nothing of it is logged."""
    from tuner.measure import MeasureResult, Measurer
    spec = WorkloadSpec.parse("matmul", ["M=40", "N=24", "K=16"])
    default_func = Schedule(spec.tensors()).lower()
    seen = []

    def fake_measure(self, candidates, before_timing=None, screen=True):
        seen.extend(f for f in candidates if f == default_func)
        if default_wins:
            return [MeasureResult(costs=[1e-6 if f == default_func else 2e-6] * 3, func=f) for f in candidates]
        return [MeasureResult(error_kind="timeout", error_msg="not a contender", func=f) if f == default_func
                else MeasureResult(costs=[2e-6] * 3, func=f) for f in candidates]

    monkeypatch.setattr(Measurer, "measure", fake_measure)
    log = TuningLog(tmp_path / "l")
    res = Tuner(spec, small_config(8, finalists=3, final_rounds=1), log=log).run()
    assert res.trials == 8 and not res.errors
    default = [r for r in log.records() if not r.decisions]
    if not default_wins:
        assert len(seen) == 1 and default == [] and res.best.decisions
        return
    assert [r.remeasured or r.confirmed for r in default][0] is False    # first: its own measurement
    assert res.best.decisions == {} and res.best.confirmed and res.best.trace["instructions"] == []
    monkeypatch.undo()
    kernel = build(spec.tensors(), log=tmp_path / "l")              # builds use the default schedule
    a, b = spec.inputs(0)
    c = np.empty((40, 24), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    # a resumed run does not measure it again as a new record
    monkeypatch.setattr(Measurer, "measure", fake_measure)
    n_default = len(default)
    Tuner(spec, small_config(4, finalists=0, remeasure=1, seed=1), log=log).run()
    assert len([r for r in log.records() if not r.decisions and not r.remeasured and not r.confirmed]) == 1
    assert len([r for r in log.records() if not r.decisions]) == n_default
