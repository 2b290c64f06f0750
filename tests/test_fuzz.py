"""Schedule fuzzing: random schedules on our own workloads either are refused or are right.

``test_random_schedules`` draws a workload of ``tests/fuzz/workloads.py`` and a seed; in a worker
process (so that a segfault or a hang fails the test instead of killing pytest) the seed
draws 3-12 primitives on the schedule as it is (custom names, numpy and huge factors, wrong
arguments and malformed traces on purpose now and then) and the result is checked: lowered,
replayed through ``to_json``/``from_json`` and ``to_python``, built and run on arrays fenced by
sentinels, against ``tensorir.evaluate``.  A failure prints a reproducer and a record line that
``benchmarks/fuzz_schedules.py --replay`` takes.  The long run is ``benchmarks/fuzz_schedules.py``.

The ``test_finding_*`` tests are the exact findings of the fuzzer (an earlier external run and
this one); each asserts the behaviour a fix must give, and fails until it is fixed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from schedules import Schedule, ScheduleError
from tests.fuzz.calls import call, call_to_python, decode
from tests.fuzz.cases import replay_calls
from tests.fuzz.check import IN_PROCESS_MAX_BYTES, allocated_bytes, check
from tests.fuzz.outcomes import ACCEPTABLE, worst
from tests.fuzz.pool import Pool
from tests.fuzz.reproducer import record_report, reproducer
from tests.fuzz.sentinels import Guarded
from tests.fuzz.workloads import NORMAL_WORKLOADS, WORKLOADS

ROOT = Path(__file__).resolve().parents[1]

# ~0.08 s a case in the worker (lower after every call, two replays, build, two calls): 300 cases take
# ~25 s on 2 shared cores, within the ~60 s this file may take.
EXAMPLES = int(os.environ.get("TENSORTUNE_FUZZ_EXAMPLES", "300"))


@pytest.fixture(scope="module")
def worker():
    """One worker process (spawned once): a kernel that segfaults or hangs fails the test, not pytest."""
    with Pool(1, timeout=120, mem_gb=4) as pool:
        yield pool


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],          # no shrinking: the report has its own reproducer
          suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(NORMAL_WORKLOADS), seed=st.integers(0, 2 ** 32 - 1))
def test_random_schedules(worker, name, seed):
    rec = worker.run([{"kind": "case", "workload": name, "seed": seed, "max_bytes": IN_PROCESS_MAX_BYTES}],
                     quiet=True)[0]
    assert rec["category"] in ACCEPTABLE, record_report(rec)


def test_workloads_default_schedules_are_right():
    """Every fuzz workload, unscheduled, builds and matches the evaluator (the fuzzer's baseline)."""
    for name in NORMAL_WORKLOADS:
        case = replay_calls(name, [])
        assert case.category == "ok", case.report()


def test_checker_catches_wrong_and_oob():
    """The checker itself: a guard overwrite is ``oob`` and a wrong value is ``wrong``."""
    g = Guarded((3, 5), "float32")
    g.buf[g.guard_elems + 15] = 1.0                       # one past the end
    assert not g.guards_intact()[0]
    g = Guarded((3, 5), "int32")
    assert g.guards_intact()[0]
    assert worst(["ok", "wrong", "replay_python"]) == "wrong"
    assert allocated_bytes("  X_pack = alloc_global([2, 1, 1000000000], float32)") == 8 * 10 ** 9


def test_call_encoding_round_trips():
    c = call("split", "Y.j", factor=np.int64(4), names=("x", "x"))
    again = json.loads(json.dumps(c))
    assert decode(again["kwargs"]) == {"factor": np.int64(4), "names": ("x", "x")}
    assert type(decode(again["kwargs"])["factor"]) is np.int64
    p = call("pack", "X", {1: 4}, order=["1.o", "0", "1.i"])
    assert decode(json.loads(json.dumps(p))["args"]) == ["X", {1: 4}]
    assert call_to_python(c) == "s = s.split('Y.j', factor=np.int64(4), names=('x', 'x'))"


def test_reproducer_rebuilds_the_case(capsys):
    """The Python a case report prints runs on its own and rebuilds the case's schedule and category."""
    Y = WORKLOADS["add1_5x7"].make()[1]
    calls = [call("cache_write", Y, name="Ybuf"), call("split", "Y.j", factor=np.int64(3)),
             call("vectorize", "nosuch.i"), {"op": "$revert"}, call("parallel", "Ybuf.i")]
    case = replay_calls("add1_5x7", calls)
    assert case.results == ["ok", "ok", "refused", "reverted", "ok"]
    text = reproducer(case.workload, case.calls, case.results, case.findings)
    assert "# s = s.vectorize('nosuch.i')  # refused" in text
    assert "tensor_named('Y')" in text
    ns: dict = {}
    exec(compile(text, "<reproducer>", "exec"), ns)  # noqa: S102 - that is the test
    assert json.loads(json.dumps(ns["s"].to_json(), default=repr)) == case.trace
    assert capsys.readouterr().out.split()[0] == case.category == "ok"


# ------------------------------------------------------------------ findings

def _add1():
    tensors = WORKLOADS["add1_5x7"].make()
    return WORKLOADS["add1_5x7"], tensors, Schedule(tensors)


def _acceptable(workload, make_schedule) -> str:
    """Apply ``make_schedule()``: a one-line ScheduleError, or a schedule that checks ``ok``."""
    try:
        s = make_schedule()
    except ScheduleError as err:
        assert "\n" not in str(err).strip(), f"multi-line ScheduleError: {err!r}"
        return "refused"
    out = check(workload, s)
    assert out.category in ACCEPTABLE, f"{out.category}: {out.message}"
    return out.category


def test_finding_1_split_duplicate_names():
    """split(names=("x", "x")) made two loops of one name: built, then wrote wrong / out of bounds."""
    wl, _, s = _add1()
    _acceptable(wl, lambda: s.split("Y.j", factor=3, names=("x", "x")))


def test_finding_2_to_python_keeps_custom_names():
    """to_python() dropped names=: the next line refers to a loop that the replay does not have."""
    wl, _, s = _add1()
    s = s.split("Y.i", factor=8, names=("o", "n")).vectorize("Y.n")   # lower() refuses it: Y.j is inside
    ns = {"Schedule": Schedule, "tensors": list(s.tensors)}
    exec(s.to_python(), ns)                    # UnknownHandleError: loop Y.n does not exist
    assert ns["s"].to_json() == s.to_json()
    assert check(wl, s).category == "refused", check(wl, s).message


@pytest.mark.parametrize("make", [
    lambda s: s.fuse("Y.i", "Y.j", name="ij"),
    lambda s: s.cache_write("Y", name="Ybuf").split("Y.i", factor=2),
    lambda s: s.pack("X", {1: 4}, name="Xp"),
], ids=["fuse_name", "cache_write_name", "pack_name"])
def test_finding_2b_to_python_keeps_every_custom_name(make):
    """Same for fuse(name=), cache_write(name=) and pack(name=)."""
    wl, _, s = _add1()
    out = check(wl, make(s))
    assert out.category == "ok", out.message


def test_finding_2c_to_python_keeps_rfactor_name():
    wl = WORKLOADS["exp_rowsum_5x7"]
    s = Schedule(wl.make()).rfactor("r", 2, name="part")
    out = check(wl, s)
    assert out.category == "ok", out.message


_HUGE = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import numpy as np
    from tensorir import te
    from schedules import Schedule, ScheduleError
    which = sys.argv[1]
    if which == "pack":
        X = te.placeholder((2, 11), "float32", "X")
        Y = te.compute((2, 11), lambda i, j: X[i, j] * 2.0, "Y")
        tensors, inputs = [X, Y], [np.ones((2, 11), np.float32)]
        make = lambda: Schedule(tensors).pack("X", {1: 10 ** 9})
        want = [inputs[0] * 2]
    else:
        X = te.placeholder((64,), "float32", "X")
        T = te.compute((64, 250_000_000), lambda i, j: X[i] + 0.5, "T")
        k = te.reduce_axis(250_000_000, "k")
        Z = te.compute((64,), lambda i: te.max(T[i, k], axis=k), "Z")
        tensors, inputs = [X, Z], [np.ones(64, np.float32)]
        make = lambda: Schedule(tensors)
        want = [inputs[0] + 0.5]
    try:
        kernel = make().build()
        outs = [np.zeros_like(w) for w in want]
        kernel(*inputs, *outs)
    except (ScheduleError, MemoryError) as err:
        assert "\\n" not in str(err).strip(), repr(err)
        print("refused:", err)
    else:
        assert all(np.array_equal(o, w) for o, w in zip(outs, want)), "wrong result"
        print("ok")
""")


@pytest.mark.parametrize("which", ["pack", "intermediate"])
def test_finding_3_huge_buffers_do_not_crash(which):
    """A buffer too big to allocate (pack to 8 GB; a 64 x 250M intermediate) must raise, not segfault.

    Runs in a child under RLIMIT_AS = 3 GB, so nothing here allocates gigabytes.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_WAIT_POLICY="passive")
    proc = subprocess.run([sys.executable, "-c", _HUGE, which], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=env, check=False)
    assert proc.returncode == 0, (f"child exited with {proc.returncode} (negative: killed by signal)\n"
                                  f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


@pytest.mark.parametrize("factor", [np.int64(4), np.int32(4)], ids=["int64", "int32"])
def test_finding_4_numpy_integer_factors(factor):
    """split(factor=np.int64(4)) raised TypeError (the trace's JSON); numpy ints are ints to users."""
    wl, _, s = _add1()
    assert _acceptable(wl, lambda: s.split("Y.i", factor=factor)) == "ok"
    assert _acceptable(wl, lambda: s.split("Y.i", nparts=factor)) == "ok"
    assert _acceptable(wl, lambda: s.pack("X", {1: factor})) == "ok"
    assert _acceptable(wl, lambda: s.tile(["Y.i", "Y.j"], [factor, 2])) == "ok"


@pytest.mark.parametrize("make", [
    lambda s: s.pack("X", [4]),
    lambda s: s.pack("X", {"a": 4}),
    lambda s: s.split("Y.j", factor=3, names=("x",)),
    lambda s: Schedule.from_json(s.tensors, {"version": 1, "instructions": [["unroll", [], {}, []]]}),
    lambda s: Schedule.from_json(s.tensors, {"version": 1, "instructions": [["compute_at", ["Y"], {}, []]]}),
], ids=["pack_list", "pack_str_key", "split_one_name", "json_unroll_no_input", "json_compute_at_one_input"])
def test_finding_5_wrong_arguments_raise_schedule_error(make):
    """Wrong arguments raised IndexError/ValueError/AttributeError instead of a ScheduleError."""
    wl, _, s = _add1()
    _acceptable(wl, lambda: make(s))


def test_finding_6_cache_write_after_compute_at():
    """compute_at("e", "r.k").cache_write("r") was accepted; lower() then failed blaming compute_at."""
    wl = WORKLOADS["exp_rowsum_5x7"]
    s = Schedule(wl.make()).compute_at("e", "r.k")
    try:
        s = s.cache_write("r")
    except ScheduleError as err:
        assert "\n" not in str(err).strip()
        return
    out = check(wl, s)             # accepted: then it must lower (and be right)
    assert out.category == "ok", f"{out.category}: {out.message}"


# ------------------------------------------------- findings of this fuzzer (not in the list above)

def _accepted_then_right(workload, make_schedule) -> None:
    """Refused with a one-line ScheduleError, or accepted and then lowers, builds and is right.

    Stricter than ``_acceptable``: a schedule that a primitive accepted and ``lower()`` then refuses
    is a failure here (the primitive broke an invariant of an earlier one instead of refusing).
    """
    try:
        s = make_schedule()
    except ScheduleError as err:
        assert "\n" not in str(err).strip(), f"multi-line ScheduleError: {err!r}"
        return
    out = check(workload, s)
    assert out.category == "ok", f"accepted, then {out.category}: {out.message}"


@pytest.mark.parametrize("names", ["lane", ("a", "b", "c"), (None, None), (1, 2), "ab"],
                         ids=["str", "three", "none_none", "ints", "two_char_str"])
def test_finding_7_split_names_must_be_two_distinct_strings(names):
    """names= is unpacked unchecked: a string or 3 names raise ValueError, (None, None) makes two loops
    named "None" (wrong results, as finding 1), ints and "ab" are accepted as loop names."""
    wl, _, s = _add1()
    _acceptable(wl, lambda: s.split("Y.i", factor=2, names=names))


@pytest.mark.parametrize("factor", [2 ** 31, 10 ** 30], ids=["2**31", "10**30"])
def test_finding_8_split_factor_beyond_int32(factor):
    """split accepts factors that do not fit the loop IR's int32; lower() then raises ExprError."""
    wl, _, s = _add1()
    _acceptable(wl, lambda: s.split("Y.i", factor=factor))


@pytest.mark.parametrize("loop", [3, ["Y.i"], None], ids=["int", "list", "none"])
def test_finding_9_split_bad_handle_with_names(loop):
    """split(<not a string>, names=...) raises AttributeError ('int' object has no attribute 'split')."""
    wl, _, s = _add1()
    _acceptable(wl, lambda: s.split(loop, factor=2, names=("a", "b")))


def test_finding_10_names_with_a_newline_make_multi_line_errors():
    """A loop or stage name with a newline is accepted, and every later error naming it spans lines."""
    wl, _, s = _add1()
    _acceptable(wl, lambda: s.fuse("Y.i", "Y.j", name="x\ny").parallel("Y.x\ny").split("Y.x\ny", factor=2))
    _acceptable(wl, lambda: s.pack("X", {1: 4}, name="p\nq").parallel("p\nq.d0").split("p\nq.d0", factor=2))


@pytest.mark.parametrize("make", [
    lambda s: s.parallel("Y.x\ny"),
    lambda s: s.split("Y.x\ny", factor=2),
    lambda s: s.compute_inline("Y\r"),
    lambda s: s.pack("X\n", {1: 4}),
    lambda s: s.pack("X", {1: 4}, consumers=["Y\n"]),
    lambda s: s.pack("X", {1: 4}, order=["0", "1.o", "1.i\n"]),
    lambda s: Schedule.from_json(s.tensors, {"version": 1, "instructions": [["unroll", ["Y.\ni"], {}, []]]}),
], ids=["parallel", "split", "compute_inline", "pack", "pack_consumers", "pack_order", "json"])
def test_finding_10b_handles_with_a_newline_are_refused_in_one_line(make):
    """The minimal case of finding 10 goes on from the last good schedule: parallel("Y.x\ny") then raised
    "loop Y.x<newline>y does not exist", two lines.  Every name a primitive is given is checked once
    (``check_instruction``): one with a control character is refused, shown as its repr."""
    _, _, s = _add1()
    with pytest.raises(ScheduleError, match="a name with a line break or another control character") as info:
        make(s)
    assert "\n" not in str(info.value)


def test_finding_11_stage_names_with_a_dot_are_unaddressable():
    """cache_write(name="a.b") is accepted, but "a.b.i" then parses as stage "a": its loops cannot be
    scheduled.  A name a stage cannot be addressed by must be refused (or its handles must work)."""
    _, _, s = _add1()
    try:
        s = s.cache_write("Y", name="a.b")
    except ScheduleError:
        return
    for loop in s.loops("a.b"):
        s.split(loop, factor=2)          # raises "no stage named 'a'" today


@pytest.mark.parametrize("workload,make", [
    ("stencil2d_13x31", lambda s: s.compute_at("P", "S.i").cache_write("S")),
    ("exp_rowsum_5x7", lambda s: s.compute_at("e", "r.i").pack("e", {1: 4})),
    ("exp_rowsum_5x7", lambda s: s.compute_at("e", "r.i").rfactor("r", 2)),
    ("exp_rowsum_5x7", lambda s: s.compute_at("e", "r.k").rfactor("r", 2)),
    ("exp_rowsum_5x7", lambda s: s.rfactor("r", 2).compute_at("r_rf", "r.i").rfactor("r", 2)),
    ("stencil2d_13x31",
     lambda s: s.pack("P", {1: 3}).compute_at("P_pack", "S.i").compute_at("P", "S.i").compute_root("P_pack")),
], ids=["cache_write_spatial", "pack_attached_stage", "rfactor_spatial", "rfactor_reduce", "rfactor_twice",
        "compute_root_consumer"])
def test_finding_12_new_stages_break_earlier_compute_at(workload, make):
    """Finding 6 has siblings: cache_write of a consumer attached at a *spatial* loop, pack of a stage
    that is computed at another stage (the pack at root reads it), rfactor of a stage that a
    producer is computed at, and compute_root of a consumer that a producer is computed inside of.
    Each is accepted; lower() then fails blaming compute_at."""
    wl = WORKLOADS[workload]
    _accepted_then_right(wl, lambda: make(Schedule(wl.make())))


@pytest.mark.parametrize("make", [
    lambda s: s.pack("X", None),
    lambda s: s.pack("X", {0.0: 2}),
], ids=["pack_none", "pack_float_key"])
def test_finding_13_more_wrong_pack_arguments(make):
    """pack(X, None) raises AttributeError, a float dimension key ValueError (siblings of finding 5)."""
    wl, _, s = _add1()
    _acceptable(wl, lambda: make(s))


@pytest.mark.parametrize("instructions,decisions", [
    ([["split", ["Y.i"], {"factor": 2}, ["a"]]], {}),
    ([["split", ["Y.i"], {"factor": 2}, []]], [1]),
    ([["pack", ["X"], {"splits": [4]}, []]], {}),
    ([["cache_write", ["Y"], {}, ["a", "b"]]], {}),
    ([["vectorize", ["Y.i", "Y.j"], {}, []]], {}),
], ids=["split_one_output", "decisions_list", "pack_splits_list", "cache_write_two_outputs",
        "vectorize_two_inputs"])
def test_finding_14_more_malformed_traces(instructions, decisions):
    """from_json checks an instruction's shape but not its arity or attribute types (siblings of
    finding 5): each of these raises ValueError/TypeError/AttributeError."""
    wl, tensors, _ = _add1()
    _acceptable(wl, lambda: Schedule.from_json(tensors, {"version": 1, "instructions": instructions,
                                                         "decisions": decisions}))


def test_finding_1c_from_json_duplicate_outputs():
    """Finding 1 through a trace: a split instruction whose outputs repeat a name replays unchecked."""
    wl, tensors, _ = _add1()
    trace = {"version": 1, "instructions": [["split", ["Y.j"], {"factor": 3}, ["a", "a"]]]}
    _acceptable(wl, lambda: Schedule.from_json(tensors, trace))


def test_finding_15_non_string_stage_names():
    """cache_write(name=3) is accepted; a later compute_at error then fails to format its own message
    (TypeError: sequence item 0: expected str instance, int found)."""
    wl = WORKLOADS["size1_reduce_1x7x1"]
    _acceptable(wl, lambda: Schedule(wl.make()).cache_write("R", name=3).compute_at("T", "R.l"))


def test_finding_16_to_python_of_a_pack_without_splits():
    """from_json accepts a pack instruction without "splits" (a plain copy); to_python() then raises
    KeyError('splits')."""
    wl, tensors, _ = _add1()
    _acceptable(wl, lambda: Schedule.from_json(tensors, {"version": 1, "instructions": [["pack", ["X"], {}, []]]}))


def test_finding_18_fuse_beyond_int32_is_refused_by_fuse():
    """The long run's sibling of finding 17: a fused loop of 2.2e9 iterations was accepted, then lower()
    raised ExprError or build() CodegenError (neither a ScheduleError).  fuse, the only primitive that
    makes a loop longer than a stage's axes, refuses it.  Nothing is lowered or allocated."""
    tensors = WORKLOADS["huge_intermediate"].make()
    with pytest.raises(ScheduleError, match=r"^fuse: loops T\.i \(2 iterations\) and T\.j \(1,100,000,000\) "
                       r"would make a loop of 2,200,000,000 iterations; expected fewer than 2\*\*31") as info:
        Schedule(tensors).fuse("T.i", "T.j")
    assert "\n" not in str(info.value)
    Schedule(tensors).split("T.j", nparts=4).fuse("T.i", "T.j.0")     # the parts fuse


def test_finding_17_loop_extents_beyond_int32():
    """fuse gives a loop of 2 x 1.1e9 iterations (past int32); a split of it lowers a guard whose
    constant 2200000000 does not fit: ExprError from lower().  Lowering only: nothing is allocated."""
    tensors = WORKLOADS["huge_intermediate"].make()
    try:
        s = Schedule(tensors).fuse("T.i", "T.j").split("T.i.j.fused", factor=669728150)
        s.lower()
    except ScheduleError as err:
        assert "\n" not in str(err).strip()
