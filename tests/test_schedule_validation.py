"""Every user-supplied name, factor and argument of every primitive goes through one check, from a
Python call or a replayed trace alike: a schedule never computes a wrong answer because of one, and
a bad one raises a one-line ``ScheduleError`` naming the primitive (findings of a fuzz run, 1-7)."""
from __future__ import annotations

import hashlib
import json
import pathlib
import random

import numpy as np
import pytest

from logs import TuningLog
from schedules import Schedule
from schedules.lowering import SCHEDULED
from schedules.knobs import ConfigSpace
from schedules.space import FixedDecisions, GeneratedSpace, SpaceOptions
from schedules import errors as E
from tensorir import ops, te
from tests.conftest import chain_wl, check_against_evaluator, conv_wl, matmul_wl
from tests.test_primitives import matvec_wl

DATA = pathlib.Path(__file__).parent / "data"
PRETUNED = pathlib.Path(__file__).parent.parent / "logs" / "pretuned"


def add_one(n=5, m=7):
    X = te.placeholder((n, m), "float32", "X")
    return [X, te.compute((n, m), lambda i, j: X[i, j] + 1.0, "Y")]


def producer_reduction():
    """e = X * 2 (elementwise), r = row sums of e."""
    X = te.placeholder((6, 9), "float32", "X")
    e = te.compute((6, 9), lambda i, j: X[i, j] * 2.0, "e")
    k = te.reduce_axis(9, "k")
    return [X, te.compute((6,), lambda i: te.sum(e[i, k], axis=k), "r")]


def raises_one_line(exc, pattern, make):
    with pytest.raises(exc, match=pattern) as info:
        make()
    assert isinstance(info.value, E.ScheduleError)
    assert "\n" not in str(info.value), str(info.value)
    return info.value


# ------------------------------------------------ 1. names of new loops and stages

def test_split_with_one_name_twice_is_refused_not_miscompiled():
    s = Schedule(add_one())
    raises_one_line(E.SplitError, r"split: the new loops need distinct names, got Y\.x twice",
                    lambda: s.split("Y.j", factor=3, names=("x", "x")))


@pytest.mark.parametrize("make, exc, pattern", [
    (lambda s: s.split("Y.j", factor=3, names=("i", "x")), E.SplitError, r"loop name Y\.i is already taken"),
    (lambda s: s.split("Y.j", factor=3, names=("j", "x")), E.SplitError, r"loop name Y\.j is already taken"),
    (lambda s: s.split("Y.j", factor=3, names=("x", "a b")), E.SplitError, r"loop name 'a b' is not valid"),
    (lambda s: s.split("Y.j", factor=3, names=("x", "")), E.SplitError, r"loop name '' is not valid"),
    (lambda s: s.split("Y.j", factor=3, names=("x", 5)), E.SplitError, r"expected a loop name \(a string\), got 5"),
    (lambda s: s.split("Y.j", factor=3, names="xy"), E.SplitError, r"as a list, got 'xy'"),
    (lambda s: s.split("Y.j", factor=3).split("Y.i", factor=2, names=("j.0", "q")), E.SplitError,
     r"loop name Y\.j\.0 is already taken"),        # a loop split away still owns its name
    (lambda s: s.fuse("Y.i", "Y.j", name="i"), E.FuseError, r"loop name Y\.i is already taken"),
    (lambda s: s.fuse("Y.i", "Y.j", name="x.y z"), E.FuseError, r"loop name 'x\.y z' is not valid"),
    (lambda s: s.fuse("Y.i", "Y.j", name=3), E.FuseError, r"expected a loop name \(a string\), got 3"),
    (lambda s: s.cache_write("Y", name="X"), E.CacheWriteError, r"name 'X' is already taken"),
    (lambda s: s.cache_write("Y", name="Y"), E.CacheWriteError, r"name 'Y' is already taken"),
    (lambda s: s.cache_write("Y", name="Y.z"), E.CacheWriteError, r"stage name 'Y\.z' is not valid"),
    (lambda s: s.cache_write("Y", name="1st"), E.CacheWriteError, r"stage name '1st' is not valid"),
    (lambda s: s.cache_write("Y", name=["a"]), E.CacheWriteError, r"expected a stage name \(a string\)"),
    (lambda s: s.pack("X", {1: 4}, name="Y"), E.PackError, r"name 'Y' is already taken"),
    (lambda s: s.pack("X", {1: 4}).pack("X", {0: 2}, name="X_pack"), E.PackError, r"name 'X_pack' is already taken"),
    (lambda s: s.pack("X", {1: 4}, name="a-b"), E.PackError, r"stage name 'a-b' is not valid"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_names_are_checked_against_the_stage_the_workload_and_each_other(make, exc, pattern):
    raises_one_line(exc, pattern, lambda: make(Schedule(add_one())))


@pytest.mark.parametrize("make, exc, pattern", [
    (lambda s: s.rfactor("y", 4, name="A"), E.RFactorError, r"name 'A' is already taken"),
    (lambda s: s.rfactor("y", 4, name="y"), E.RFactorError, r"name 'y' is already taken"),
    (lambda s: s.rfactor("y", 4, name="y.rf"), E.RFactorError, r"stage name 'y\.rf' is not valid"),
    (lambda s: s.rfactor("y", 4).cache_write("y_rf", name="y_rf_1").rfactor("y_rf_1", 2, name="y_rf"),
     E.RFactorError, r"name 'y_rf' is already taken"),
])
def test_rfactor_names_are_checked(make, exc, pattern):
    raises_one_line(exc, pattern, lambda: make(Schedule(matvec_wl())))


def test_custom_names_compute_the_right_answer():
    s = Schedule(add_one()).split("Y.j", factor=3, names=("x", "y")).split("Y.i", factor=2, names=("i_o", "i.in"))
    assert s.loops("Y") == ["Y.i_o", "Y.i.in", "Y.x", "Y.y"]
    check_against_evaluator(s.fuse("Y.i_o", "Y.i.in", name="rows").vectorize("Y.y"))
    s = Schedule(matmul_wl()).pack("B", {1: 8}, name="Bp").cache_write("C", name="acc")
    s = s.tile(["C.i", "C.j"], [4, 8]).compute_at("acc", "C.j.0")
    assert "Bp" in s.stages and "acc" in s.stages
    check_against_evaluator(s)
    s = Schedule(matvec_wl()).rfactor("y", 8, axis="y.k", name="partial")
    check_against_evaluator(s.reorder("partial.k_o", "partial.k_v").vectorize("partial.k_v"))


def test_default_names_step_aside_for_names_already_taken():
    # a user named a loop "a.0": the default outer loop of a split of "a" takes "a.0_1"
    s = Schedule(add_one(13, 7)).split("Y.i", factor=5, names=("a", "a.0")).split("Y.a", factor=2)
    assert s.loops("Y") == ["Y.a.0_1", "Y.a.1", "Y.a.0", "Y.j"]
    check_against_evaluator(s)
    # two fusions of the same root loops
    s = Schedule(add_one(13, 7)).tile(["Y.i", "Y.j"], [4, 2]).fuse("Y.i.0", "Y.j.0").fuse("Y.i.1", "Y.j.1")
    assert s.loops("Y") == ["Y.i_j_fused", "Y.i_j_fused_1"]
    check_against_evaluator(s)
    s = Schedule(add_one()).fuse("Y.i", "Y.j", name="i_j_fused_x").split("Y.i_j_fused_x", factor=4)
    assert s.loops("Y") == ["Y.i_j_fused_x.0", "Y.i_j_fused_x.1"]


def test_default_stage_names_step_aside_for_names_already_taken():
    X = te.placeholder((4, 6), "float32", "Y_local")      # an input already holds the default name
    Y = te.compute((4, 6), lambda i, j: X[i, j] * 3.0, "Y")
    s = Schedule([X, Y]).cache_write("Y")
    assert s.stages == ["Y_local_1", "Y"]
    check_against_evaluator(s)


# ------------------------------------------------------ 2. to_python prints every argument

def _schedules_to_print():
    """label -> a function making a schedule, for every primitive, with and without names chosen by the user."""
    mm, cv, ch, mv = matmul_wl, conv_wl, chain_wl, matvec_wl
    cases = {
        "split": lambda: Schedule(mm()).split("C.i", factor=8),
        "split nparts": lambda: Schedule(mm()).split("C.j", nparts=4),
        "split names": lambda: Schedule(add_one()).split("Y.j", factor=8, names=("o", "n")).vectorize("Y.n"),
        "split names like defaults": lambda: Schedule(mm()).split("C.i", factor=8, names=("i.1", "i.0")),
        "tile": lambda: Schedule(mm()).tile(["C.i", "C.j"], [8, 16]),
        "fuse": lambda: Schedule(mm()).fuse("C.i", "C.j").parallel("C.i_j_fused"),
        "fuse name": lambda: Schedule(mm()).fuse("C.i", "C.j", name="ij").parallel("C.ij"),
        "fuse name like old default": lambda: Schedule(mm()).fuse("C.i", "C.j", name="i.j.fused").split("C.i.j.fused", factor=4),
        "reorder": lambda: Schedule(mm()).reorder("C.k", "C.j", "C.i"),
        "unroll": lambda: Schedule(mm()).split("C.k", factor=4).unroll("C.k.1"),
        "vectorize": lambda: Schedule(mm()).split("C.j", factor=8).reorder("C.i", "C.j.0", "C.k", "C.j.1").vectorize("C.j.1"),
        "parallel": lambda: Schedule(mm()).parallel("C.i"),
        "compute_at": lambda: Schedule(cv()).split("conv.h", factor=4).compute_at("pad", "conv.h.0"),
        "compute_root": lambda: Schedule(ch()).compute_at("y", "z.i").compute_root("y"),
        "compute_inline": lambda: Schedule(cv()).compute_inline("pad"),
        "cache_write": lambda: Schedule(mm()).cache_write("C").split("C_local.i", factor=2),
        "cache_write name": lambda: Schedule(mm()).cache_write("C", name="acc").split("acc.i", factor=2),
        "pack": lambda: Schedule(mm()).pack("B", {1: 16}, order=["1.o", "0", "1.i"], consumers=["C"]),
        "pack name": lambda: Schedule(mm()).pack("B", {1: 16}, name="panels").split("panels.d0", factor=3),
        "rfactor": lambda: Schedule(mv()).rfactor("y", 8),
        "rfactor axis name": lambda: Schedule(mv()).rfactor("y", 4, axis="k", name="part").reorder("part.k_o", "part.k_v"),
        "everything named": lambda: (
            Schedule(mm()).pack("B", {1: 8}, name="P").cache_write("C", name="L")
            .split("C.i", factor=4, names=("io", "ii")).split("C.j", factor=8, names=("jo", "ji"))
            .reorder("C.io", "C.jo", "C.ii", "C.ji").fuse("C.io", "C.jo", name="task")
            .compute_at("L", "C.task").parallel("C.task").vectorize("C.ji")),
    }
    return cases


@pytest.mark.parametrize("label", sorted(_schedules_to_print()))
def test_to_python_replays_every_primitive(label):
    s = _schedules_to_print()[label]()
    text = s.to_python()
    env = {"Schedule": Schedule, "tensors": list(s.tensors)}
    exec(text, env)
    again = env["s"]
    assert again.to_json() == s.to_json(), text
    assert str(again.lower()) == str(s.lower())


def test_to_python_prints_names_only_where_they_differ_from_the_defaults():
    text = Schedule(add_one()).split("Y.i", factor=8, names=("o", "n")).vectorize("Y.n").to_python()
    assert "s = s.split('Y.i', factor=8, names=('o', 'n'))" in text
    text = Schedule(add_one()).split("Y.i", factor=8).fuse("Y.i.1", "Y.j").to_python()
    assert "names" not in text and "name=" not in text
    text = Schedule(matvec_wl()).rfactor("y", 4, axis="k", name="part").to_python()
    assert "s = s.rfactor('y', factor=4, axis='k', name='part')" in text
    text = Schedule(matmul_wl()).pack("B", {1: 16}, name="panels").to_python()
    assert "s = s.pack('B', {1: 16}, name='panels')" in text


# ---------------------------------------------------------- 3. pack's factors are clamped

def test_pack_clamps_a_factor_past_the_dimension_as_split_does():
    X = te.placeholder((2, 11), "float32", "X")
    Y = te.compute((2, 11), lambda i, j: X[i, j] * 2.0, "Y")
    s = Schedule([X, Y]).pack("X", {1: 10 ** 9})
    assert s.stage_graph().stage("X_pack").shape == (2, 1, 11)
    check_against_evaluator(s)
    s = Schedule([X, Y]).split("Y.j", factor=10 ** 30)
    assert s.extent("Y.j.1") == 11 and s.extent("Y.j.0") == 1
    check_against_evaluator(s)


# ---------------------------------------------------------- 4. numpy integers as arguments

@pytest.mark.parametrize("int_type", [np.int64, np.int32, np.uint8, int])
def test_numpy_integers_are_accepted_and_recorded_as_ints(int_type):
    n = int_type
    plain = (Schedule(matmul_wl()).pack("B", {1: 8}, order=["1.o", "0", "1.i"]).cache_write("C")
             .tile(["C.i", "C.j"], [4, 8]).split("C_local.k", nparts=3).compute_at("C_local", "C.j.0"))
    numpy = (Schedule(matmul_wl()).pack("B", {n(1): n(8)}, order=["1.o", n(0), "1.i"]).cache_write("C")
             .tile(["C.i", "C.j"], np.array([4, 8], dtype=np.int64 if n is int else n))
             .split("C_local.k", nparts=n(3)).compute_at("C_local", "C.j.0"))
    assert json.dumps(numpy.to_json()) == json.dumps(plain.to_json())
    assert Schedule.from_json(list(numpy.tensors), json.dumps(numpy.to_json())).lower() == plain.lower()
    s = Schedule(matvec_wl()).rfactor("y", n(4)).split("y_rf.k_o", factor=n(2))
    assert json.dumps(s.to_json()) == json.dumps(Schedule(matvec_wl()).rfactor("y", 4).split("y_rf.k_o", factor=2).to_json())
    # a trace built in Python with numpy numbers replays too
    trace = {"instructions": [["split", ["C.i"], {"factor": n(4)}, []]]}
    assert Schedule.from_json(matmul_wl(), trace).loops("C")[:2] == ["C.i.0", "C.i.1"]


@pytest.mark.parametrize("value", [True, np.bool_(True), 2.0, np.float64(2.0), "2", None, [2]])
def test_non_integers_are_refused_as_factors(value):
    s = Schedule(matmul_wl())
    raises_one_line(E.SplitError, r"split: (factor for loop C\.i must be a positive integer|give exactly one)",
                    lambda: s.split("C.i", factor=value))
    raises_one_line(E.PackError, r"pack: split factor of dimension 1 of B must be a positive integer",
                    lambda: s.pack("B", {1: value}) if value is not None else s.pack("B", {1: "x"}))
    raises_one_line(E.RFactorError, r"rfactor: (factor of stage C must be an integer|expected a factor)",
                    lambda: s.rfactor("C", value))


def test_knob_extents_accept_numpy_integers():
    cfg = ConfigSpace(FixedDecisions({}))
    entity = cfg.define_split("t", np.int64(12), num_outputs=np.int32(2), max_factor=np.int64(4))
    s, (_, i) = entity.apply(Schedule(matmul_wl(M=12)), "C.i")
    assert json.dumps(s.to_json()) and s.extent(i) <= 4
    with pytest.raises(E.DecisionError, match=r"extent must be an integer >= 1, got 2\.5"):
        cfg.define_split("u", 2.5)


# ------------------------------------------------ 5. ScheduleError, never a raw Python error

RAW_BEFORE = [   # each raised AttributeError / ValueError / TypeError before
    (lambda: Schedule(add_one()).pack("X", [4]), E.PackError, r"pack: splits of X must map a dimension to a block size"),
    (lambda: Schedule(add_one()).pack("X", {"a": 4}), E.PackError, r"got the key 'a'"),
    (lambda: Schedule(add_one()).pack("X", {1: 4, "1": 8}), E.PackError, r"give dimension 1 twice"),
    (lambda: Schedule(add_one()).pack("X", {1: 4}, order="10"), E.PackError, r"order of X must list dimension keys"),
    (lambda: Schedule(add_one()).pack("X", {1: 4}, order=["1.o", 0.5, "1.i"]), E.PackError, r"order of X must list"),
    (lambda: Schedule(add_one()).pack("X", {1: 4}, consumers="Y"), E.PackError, r"consumers of the packed X must be a list"),
    (lambda: Schedule(add_one()).split("Y.i", factor=2, names=("x",)), E.SplitError,
     r"split: expected 2 names \(outer, inner\) for the new loops, got 1"),
    (lambda: Schedule(add_one()).split(5, factor=2), E.SplitError, r"split: expected a loop handle like 'C\.i', got 5"),
    (lambda: Schedule(add_one()).vectorize(["Y.j"]), E.AnnotationError, r"vectorize: expected a loop handle"),
    (lambda: Schedule(add_one()).compute_at(None, "Y.i"), E.ComputeAtError, r"compute_at: expected a stage name, got None"),
    (lambda: Schedule(add_one()).reorder(), E.ReorderError, r"reorder: expected at least one loop handle"),
    (lambda: Schedule(add_one()).tile("Y.i", 3), E.ScheduleError, r"tile: expected a non-empty list of loops"),
    (lambda: Schedule(add_one()).tile(["Y.i", "Y.i"], [2, 2]), E.ScheduleError, r"tile: loop 'Y\.i' is listed twice"),
    (lambda: Schedule(matvec_wl()).rfactor("y", 4, axis=3), E.RFactorError, r"axis of stage y must be the name"),
    (lambda: Schedule(add_one()).loops(te.placeholder((2,), "float32", "Q")), E.UnknownHandleError,
     r"tensor 'Q' is not part of this workload"),
    (lambda: Schedule(5), E.WorkloadListError, r"a workload is a list of te.Tensor"),
]


@pytest.mark.parametrize("make, exc, pattern", RAW_BEFORE, ids=[p for _, _, p in RAW_BEFORE])
def test_bad_arguments_raise_schedule_errors(make, exc, pattern):
    raises_one_line(exc, pattern, make)


BAD_TRACES = [
    (["unroll", [], {}, []], E.AnnotationError, r"unroll: expected 1 input\(s\) \(a loop handle like 'C\.i'\), got 0"),
    (["compute_at", ["Y"], {}, []], E.ComputeAtError, r"compute_at: expected 2 input\(s\)"),
    (["compute_at", ["Y", "Y.i", "Y.j"], {}, []], E.ComputeAtError, r"expected 2 input\(s\)"),
    (["split", ["Y.i"], {"factor": "4"}, []], E.SplitError, r"factor for loop Y\.i must be a positive integer, got '4'"),
    (["split", ["Y.i"], {"factor": 4, "fator": 1}, []], E.SplitError, r"unexpected attribute\(s\) \['fator'\]"),
    (["split", ["Y.i"], {"factor": 4}, ["Y.a"]], E.SplitError, r"expected 2 names"),
    (["split", ["Y.i"], {"factor": 4}, ["Y.a", "Y.a"]], E.SplitError, r"need distinct names"),
    (["split", ["Y.i"], {"factor": 4}, ["Z.a", "Z.b"]], E.SplitError, r"new loop 'Z\.a' must be a loop of stage Y"),
    (["split", [["Y.i"]], {"factor": 2}, []], E.SplitError, r"expected a loop handle like 'C\.i', got \['Y\.i'\]"),
    (["fuse", ["Y.i", "Y.j"], {}, [5]], E.FuseError, r"expected a loop name \(a string\), got 5"),
    (["fuse", ["Y.i"], {}, []], E.FuseError, r"expected 2 input\(s\)"),
    (["reorder", ["Y.i"], {}, ["Y.q"]], E.ReorderError, r"reorder makes nothing to name"),
    (["parallel", ["Y.i"], {"lanes": 4}, []], E.AnnotationError, r"unexpected attribute\(s\) \['lanes'\]; it takes none"),
    (["pack", ["X"], {"splits": {"1": 4}, "order": [1, None]}, []], E.PackError, r"order of X must list"),
    (["pack", ["X"], {"splits": {"01": 4, "1": 4}}, []], E.PackError, r"give dimension 1 twice"),
    (["pack", ["X"], {"splits": {"-1": 4}}, []], E.PackError, r"got the key '-1'"),
    (["pack", ["X"], {"splits": {"1": 4}}, ["A", "B"]], E.PackError, r"expected 1 name for the new stage, got 2"),
    (["cache_write", ["Y"], {}, [None]], E.CacheWriteError, r"expected a stage name \(a string\), got None"),
    (["rfactor", ["Y"], {}, []], E.RFactorError, r"expected a factor"),
    (["split", ["Y.i"], {"factor": {"$decision": ["x"]}}, []], E.DecisionError, r"no value"),
    (["spilt", ["Y.i"], {"factor": 2}, []], E.ScheduleError, r"replay: unknown instruction 'spilt'"),
]


@pytest.mark.parametrize("inst, exc, pattern", BAD_TRACES, ids=[json.dumps(i) for i, _, _ in BAD_TRACES])
def test_bad_trace_instructions_raise_schedule_errors(inst, exc, pattern):
    err = raises_one_line(exc, pattern, lambda: Schedule.from_json(add_one(), {"instructions": [inst]}))
    assert str(err).endswith("(instruction 0 of the trace)")


def test_bad_trace_containers_raise_schedule_errors():
    ok = ["split", ["Y.i"], {"factor": 2}, []]
    for trace, pattern in [({"instructions": [ok], "decisions": [1]}, r"decisions must be a JSON object"),
                           ({"instructions": [ok], "decisions": {"a": 1, 2: 3}}, r"decisions must be a JSON object"),
                           ({"instructions": [["split", ["Y.i"], {"factor": object()}, []]]}, r"must be JSON data"),
                           ({"instructions": [["split", ["Y.i"], {(1, 2): 2}, []]]}, r"must be JSON data"),
                           ({"instructions": "split"}, r"'instructions' list"),
                           ([ok], r"'instructions' list")]:
        raises_one_line(E.ScheduleError, pattern, lambda t=trace: Schedule.from_json(add_one(), t))
    raises_one_line(E.ScheduleError, r"trace entry 0 is .*expected an Instruction",
                    lambda: Schedule(add_one(), [ok]))
    raises_one_line(E.ScheduleError, r"a trace is a sequence of Instructions, got 5", lambda: Schedule(add_one(), 5))
    from schedules import Instruction
    raises_one_line(E.ScheduleError, r"the attributes of 'split' are not JSON text",
                    lambda: Schedule(add_one(), [Instruction("split", ("Y.i",), "{factor: 2}")]))


JUNK = [None, True, 0, -1, 2.5, "", "Y", "Y.i", "Y.q", "C.i", "X", [], ["Y.i"], {}, {"1": 4}, {"$decision": "d"},
        10 ** 12, "Y.i.0", "x y"]


def _mutants(trace: dict, rng: random.Random, n: int):
    """``n`` copies of ``trace`` with one instruction field (input, attribute, output, kind) replaced by junk."""
    insts = trace["instructions"]
    for _ in range(n):
        t = json.loads(json.dumps(trace))
        inst = t["instructions"][rng.randrange(len(insts))]
        where = rng.choice(["input", "attr", "output", "kind", "arity", "drop"])
        junk = rng.choice(JUNK)
        if where == "input" and inst[1]:
            inst[1][rng.randrange(len(inst[1]))] = junk
        elif where == "attr" and inst[2]:
            inst[2][rng.choice(sorted(inst[2]))] = junk
        elif where == "output" and inst[3]:
            inst[3][rng.randrange(len(inst[3]))] = junk
        elif where == "kind":
            inst[0] = rng.choice(["split", "fuse", "reorder", "unroll", "compute_at", "cache_write", "pack", "rfactor"])
        elif where == "arity":
            inst[1] = inst[1] + [junk] if rng.random() < 0.5 else inst[1][:-1]
        else:
            t["instructions"].remove(inst)
        yield t


def test_mutated_traces_replay_or_raise_schedule_errors():
    """Fuzz: every shipped kind of instruction with one field replaced by junk values replays to a schedule
    that lowers, or raises a one-line ScheduleError (never another exception)."""
    from tests.test_primitives import CASES
    rng = random.Random(25)
    outcomes = {"ok": 0, "refused": 0}
    for name, make in sorted(CASES.items()):
        s = make()
        for t in _mutants(s.to_json(), rng, 40):
            t["decisions"] = {"d": 3}
            try:
                Schedule.from_json(list(s.tensors), t).lower()
                outcomes["ok"] += 1
            except E.ScheduleError as err:
                assert "\n" not in str(err), str(err)
                outcomes["refused"] += 1
    assert outcomes["refused"] > 100 and outcomes["ok"] > 10, outcomes


def test_report_of_a_log_whose_best_record_does_not_replay(tmp_path, capsys):
    from tuner.cli import main
    lines = (DATA / "log_v_before.jsonl").read_text().splitlines()
    rec = next(json.loads(ln) for ln in lines if '"matmul"' in ln and '"error_kind":null' in ln)
    log = tmp_path / "broken.jsonl"
    with open(log, "w") as f:
        f.write("\n".join(lines) + "\n")
        for n, inst in enumerate([["unroll", [], {}, []], ["compute_at", ["C"], {}, []]]):
            bad = {**rec, "trace": {"version": 1, "instructions": [inst], "decisions": {}},
                   "decisions": {"broken": n}, "costs": [1e-9], "confirmed": True}
            f.write(json.dumps(bad) + "\n")
    code = main(["report", "--log", str(log)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "best trace no longer replays: unroll: expected 1 input(s)" in out.out
    assert "Traceback" not in out.err


# ------------------------------------- 6. cache_write / rfactor of a stage that hosts another

@pytest.mark.parametrize("loop", ["r.k", "r.i"])
def test_cache_write_moves_the_stages_computed_in_its_loops_to_the_cache(loop):
    s = Schedule(producer_reduction()).compute_at("e", loop).cache_write("r")
    assert s.stage_graph().stage("e").attach.stage == "r_local"
    check_against_evaluator(s)
    check_against_evaluator(s.split("r_local.k", factor=4).split("r.i", factor=4))


@pytest.mark.parametrize("loop", ["r.k", "r.i"])
def test_rfactor_of_a_stage_hosting_another_is_refused_by_rfactor(loop):
    s = Schedule(producer_reduction()).compute_at("e", loop)
    raises_one_line(E.RFactorError, rf"rfactor: stage e is computed at loop {loop.replace('.', '[.]')}; expected no "
                    r"stage computed inside the loops of r", lambda: s.rfactor("r", 4))
    check_against_evaluator(s.compute_root("e").rfactor("r", 4))


# --------------------- 6b. compute_at's invariants, checked after every primitive (one place)

def stencil():
    """A zero-padding stage P and a 5-point stencil S reading it."""
    X = te.placeholder((13, 31), "float32", "X")
    P = te.compute((15, 33), lambda i, j: te.if_then_else(
        te.all(i >= 1, i < 14, j >= 1, j < 32), X[i - 1, j - 1], 0.0), "P")
    S = te.compute((13, 31), lambda i, j: P[i + 1, j + 1] * 0.5 + (P[i, j + 1] + P[i + 2, j + 1]
                                                                 + P[i + 1, j] + P[i + 1, j + 2]) * 0.125, "S")
    return [X, S]


def variance():
    """total -> mean -> sq -> var: a chain of three intermediates."""
    X = te.placeholder((6, 10), "float32", "X")
    k = te.reduce_axis(10, "k")
    total = te.compute((6,), lambda i: te.sum(X[i, k], axis=k), "total")
    mean = te.compute((6,), lambda i: total[i] * 0.1, "mean")
    c = te.reduce_axis(10, "c")
    sq = te.compute((6,), lambda i: te.sum((X[i, c] - mean[i]) * (X[i, c] - mean[i]), axis=c), "sq")
    return [X, te.compute((6,), lambda i: sq[i] * 0.1, "var")]


_PACK = (r"^pack: stage P is computed at S\.i, so its new consumer P_pack at root would not be inside that loop; "
         r"pack P before compute_at P \(then compute_at P_pack at S\.i too\), or compute_root P first$")
_ROOT = (r"^compute_root: stage P is computed at S\.i, so its consumer P_pack at root would not be inside that "
         r"loop; compute_root P first$")
_OTHER = (r"^compute_at: stage total is computed at var\.i\.1, so its consumer mean at var\.i\.0 would not be "
          r"inside that loop; compute_root total first, or compute mean at a loop inside var\.i\.1$")
_AT_VECTOR = (r"^compute_at: loop S\.j\.1 is vectorized; a vectorized loop must contain only its own statement "
              r"\(compute P at an outer loop\)$")
_VECTORIZE = (r"^vectorize: loop S\.j\.1 has stage P computed at it; a vectorized loop must contain only its own "
              r"statement \(compute_at P at an outer loop first\)$")


@pytest.mark.parametrize("make,exc,pattern", [
    (lambda: Schedule(stencil()).compute_at("P", "S.i").pack("P", {1: 3}), E.PackError, _PACK),
    (lambda: Schedule(stencil()).pack("P", {1: 3}).compute_at("P_pack", "S.i").compute_at("P", "S.i")
     .compute_root("P_pack"), E.ComputeAtError, _ROOT),
    (lambda: Schedule(variance()).split("var.i", factor=2).compute_at("sq", "var.i.1")
     .compute_at("mean", "var.i.1").compute_at("total", "var.i.1").compute_at("mean", "var.i.0"),
     E.ComputeAtError, _OTHER),
    (lambda: Schedule(stencil()).compute_at("P", "S.j"), None, None),   # S.j encloses S: accepted
    (lambda: Schedule(stencil()).split("S.j", factor=4).vectorize("S.j.1").compute_at("P", "S.j.1"),
     E.ComputeAtError, _AT_VECTOR),
    (lambda: Schedule(stencil()).split("S.j", factor=4).compute_at("P", "S.j.1").vectorize("S.j.1"),
     E.AnnotationError, _VECTORIZE),
], ids=["pack", "compute_root", "compute_at_other_stage", "accepted", "compute_at_vectorized",
        "vectorize_hosting"])
def test_the_primitive_that_breaks_compute_at_is_the_one_refused(make, exc, pattern):
    """A stage P computed at loop T.L needs every consumer inside L (and L not vectorized): a primitive
    that would break it is refused with its own one-line error, never accepted for ``lower()`` to fail
    later blaming compute_at."""
    if pattern is None:
        check_against_evaluator(make())
        return
    err = raises_one_line(exc, pattern, make)
    assert err.primitive in str(err).split(":", 1)[0]


def test_legal_orderings_of_the_refused_primitives_are_right():
    """What the errors above suggest instead: pack before compute_at, compute_root the producer first."""
    s = Schedule(stencil())
    check_against_evaluator(s.pack("P", {1: 3}).compute_at("P_pack", "S.i").compute_at("P", "S.i"))
    check_against_evaluator(s.pack("P", {1: 3}).compute_at("P_pack", "S.i").compute_at("P", "S.i")
                            .compute_root("P").compute_root("P_pack"))
    check_against_evaluator(s.compute_at("P", "S.i").compute_root("P").pack("P", {1: 3}))
    v = Schedule(variance()).split("var.i", factor=2).compute_at("sq", "var.i.1").compute_at("mean", "var.i.1")
    v = v.compute_at("total", "var.i.1")
    check_against_evaluator(v)
    check_against_evaluator(v.compute_root("total").compute_at("mean", "var.i.0"))
    check_against_evaluator(Schedule(stencil()).split("S.j", factor=4).compute_at("P", "S.j.0").vectorize("S.j.1"))


def test_replayed_traces_are_checked_the_same_way():
    s = Schedule(stencil()).compute_at("P", "S.i")
    trace = s.to_json()
    trace["instructions"].append(["pack", ["P"], {"splits": {"1": 3}}, []])
    raises_one_line(E.PackError, r"^pack: stage P is computed at S\.i, .* \(instruction 1 of the trace\)$",
                    lambda: Schedule.from_json(s.tensors, trace))


# ------------------------------------------------------------- 7. short fused loop names

def test_fused_names_stay_short_through_tiling_levels():
    X = te.placeholder((8, 8, 8, 8), "float32", "X")
    Y = te.compute((8, 8, 8, 8), lambda p, n, k, q: X[p, n, k, q] * 2.0, "Y")
    s = Schedule([X, Y])
    for lp in ("Y.p", "Y.n", "Y.k", "Y.q"):
        s = s.split(lp, factor=4).split(f"{lp}.0", factor=2)
    outer = ["Y.p.0.0", "Y.n.0.0", "Y.k.0.0", "Y.q.0.0"]
    s = s.reorder(*outer, *[lp for lp in s.loops("Y") if lp not in outer])
    s = s.fuse("Y.p.0.0", "Y.n.0.0").fuse("Y.p_n_fused", "Y.k.0.0").fuse("Y.p_n_k_fused", "Y.q.0.0")
    assert s.loops("Y")[0] == "Y.p_n_k_q_fused"
    check_against_evaluator(s.parallel("Y.p_n_k_q_fused"))


def test_generated_spaces_name_their_fused_loops_briefly():
    for tensors in (ops.matmul(64, 48, 40), ops.dense(16, 40, 36), ops.softmax(24, 70), ops.conv2d(1, 4, 10, 10, 8, 3, 3)):
        space = GeneratedSpace(tensors, SpaceOptions(vector_bits=256, cores=2))
        s = space.apply(FixedDecisions(space.default_decisions()))
        for stage in s.stages:
            for lp in s.loops(stage):
                assert lp.count("fused") <= 1 and len(lp) < 40, lp


def _records():
    for path in sorted(PRETUNED.glob("*.jsonl")) + [DATA / "log_v_before.jsonl"]:
        for rec in TuningLog(str(path), mode="r").records():
            yield path.name, rec


def _key(rec) -> str:
    return hashlib.sha256(json.dumps([rec.workload_name, rec.workload_params, rec.trace],
                                     sort_keys=True).encode()).hexdigest()[:20]


def test_logged_traces_replay_to_the_loop_nests_they_replayed_to_before():
    """Every record of every shipped log and of a log written before fused names got short (their
    traces name fused loops the old way, ``i.0.j.0.fused``) replays to the same loop nest as before
    the change (``tests/data/replay_before.json``: sha256 of ``lower()``, made with the old code), and
    its ``to_python()`` rebuilds that nest too."""
    from tuner.spec import WorkloadSpec
    before = json.loads((DATA / "replay_before.json").read_text())
    checked = {name: 0 for name in before}
    legacy = 0
    for name, rec in _records():
        tensors = WorkloadSpec(rec.workload_name, dict(rec.workload_params)).tensors()
        s = Schedule.from_json(tensors, rec.trace)
        text = str(s.lower(until=SCHEDULED))     # the schedule's own nest, as lower() returned it then
        want = before.get(name, {}).get(_key(rec))
        if want is not None:
            assert hashlib.sha256(text.encode()).hexdigest()[:20] == want, (name, rec.trace)
            checked[name] += 1
        env = {"Schedule": Schedule, "tensors": tensors}
        exec(s.to_python(), env)
        assert str(env["s"].lower(until=SCHEDULED)) == text
        legacy += any(".fused" in o for inst in rec.trace["instructions"] for o in inst[3])
    assert checked["log_v_before.jsonl"] >= 33 and legacy > 20, (checked, legacy)
    for name, rows in before.items():
        if (PRETUNED / name).exists():
            assert checked[name] >= len(rows), (name, checked[name], len(rows))
