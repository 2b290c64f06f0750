"""The checker: lower a schedule, replay it (JSON and Python), build it and run it on fenced arrays
against the evaluator."""
from __future__ import annotations

import json
import re

import numpy as np

from schedules import Schedule, ScheduleError
from tensorir.te.evaluate import evaluate
from tests.fuzz.outcomes import Finding, Outcome, describe_exc, one_line, worst
from tests.fuzz.sentinels import POISON, POISON2, Guarded, uint_type
from tests.fuzz.workloads import Workload, make_inputs

# Flip when ``Schedule.build(checked=True)`` exists (bounds-checked code); the checker then builds
# every schedule in checked mode.
CHECKED_BUILD = False

IN_PROCESS_MAX_BYTES = 256 << 20    # do not run loop nests that allocate more than this in-process


def tolerance(dtype: str) -> tuple:
    """(rtol, atol) of a comparison with the reference in ``dtype`` (exact for integers)."""
    return {"float32": (1e-3, 1e-3), "float64": (1e-9, 1e-9)}.get(dtype, (0, 0))


_ALLOC = re.compile(r"alloc_\w+\(\[([0-9, ]*)\],\s*(\w+)\)")


def allocated_bytes(lowered_text: str) -> int:
    """Bytes of every ``alloc_*`` in the printed loop nest (an upper bound on what a call allocates)."""
    total = 0
    for dims, dtype in _ALLOC.findall(lowered_text):
        n = 1
        for d in dims.split(","):
            if d.strip():
                n *= int(d)
        try:
            total += n * np.dtype(dtype).itemsize
        except TypeError:
            total += n * 8
    return total


def check(workload: Workload, schedule: Schedule, *, max_bytes: int | None = IN_PROCESS_MAX_BYTES,
          checked: bool | None = None, seed: int = 0) -> Outcome:
    """Lower, replay (JSON and Python), build and run ``schedule``; compare with the evaluator."""
    checked = CHECKED_BUILD if checked is None else checked
    findings = []

    def fail(cat, msg):
        findings.append(Finding(cat, msg))

    # 1. lower
    refused = None
    try:
        text = str(schedule.lower())
    except ScheduleError as err:
        if not one_line(str(err)):
            fail("bad_error", f"lower: multi-line ScheduleError: {describe_exc(err)}")
            return Outcome("bad_error", findings[0].message, findings)
        refused, text = str(err), None
    except Exception as err:  # noqa: BLE001
        fail("bad_error", f"lower: {describe_exc(err)}")
        return Outcome("bad_error", findings[0].message, findings)

    # A replay must rebuild the same loop nest; a schedule that lower() refuses must still replay
    # to the same loop structure (``describe()``) and be refused again.
    def same(again, how: str, cat: str) -> None:
        if text is not None:
            t2 = str(again.lower())
            if t2 != text:
                fail(cat, f"{how} lowers to a different loop nest:\n" + _diff(text, t2))
            return
        d1, d2 = schedule.describe(), again.describe()
        if d1 != d2:
            fail(cat, f"{how} has a different loop structure:\n" + _diff(d1, d2))

    # 2. replay through JSON text
    try:
        jtext = json.dumps(schedule.to_json())
        same(Schedule.from_json(schedule.tensors, jtext), "from_json(to_json())", "replay_json")
    except Exception as err:  # noqa: BLE001
        fail("replay_json", f"from_json(to_json()): {describe_exc(err)}")

    # 3. replay through the Python text
    try:
        code = schedule.to_python()
        ns = {"Schedule": Schedule, "tensors": list(schedule.tensors)}
        exec(compile(code, "<to_python>", "exec"), ns)  # noqa: S102 - that is the test
        same(ns["s"], "exec(to_python())", "replay_python")
    except Exception as err:  # noqa: BLE001
        fail("replay_python", f"exec(to_python()): {describe_exc(err)}")

    if text is None:
        if not findings:
            return Outcome("refused", refused)
        cat = worst([f.category for f in findings])
        return Outcome(cat, next(f.message for f in findings if f.category == cat), findings)

    # 4. build and run on guarded arrays
    nbytes = allocated_bytes(text)
    if max_bytes is not None and nbytes > max_bytes:
        fail("too_big", f"the loop nest allocates {nbytes} bytes (> {max_bytes}); not run in-process")
    else:
        _run(workload, schedule, checked, seed, fail)
    cat = worst([f.category for f in findings])
    msg = next((f.message for f in findings if f.category == cat), "")
    return Outcome(cat, msg, findings, text)


def _run(workload, schedule, checked, seed, fail) -> None:
    tensors = list(schedule.tensors)
    try:
        kernel = schedule.build(checked=True) if checked else schedule.build()
    except MemoryError as err:
        fail("oom" if one_line(str(err)) else "bad_error", f"build: {describe_exc(err)}")
        return
    except ScheduleError as err:
        fail("bad_error", f"build raised after lower() succeeded: {describe_exc(err)}")
        return
    except Exception as err:  # noqa: BLE001
        fail("bad_error", f"build: {describe_exc(err)}")
        return
    ins = make_inputs(tensors, seed)
    gin = [Guarded(a.shape, a.dtype) for a in ins]
    for g, a in zip(gin, ins):
        g.array[...] = a
    outs_t = [t for t in tensors if not t.is_placeholder]
    gout = [Guarded(t.shape, t.dtype) for t in outs_t]
    for g, t in zip(gout, outs_t):
        g.array[...] = POISON[t.dtype]
    try:
        kernel(*[g.array for g in gin], *[g.array for g in gout])
    except MemoryError as err:
        fail("oom" if one_line(str(err)) else "bad_error", f"kernel call: {describe_exc(err)}")
        return
    except Exception as err:  # noqa: BLE001
        fail("bad_error", f"kernel call: {describe_exc(err)}")
        return
    for g, t in zip(gin + gout, [t for t in tensors if t.is_placeholder] + outs_t):
        ok, where = g.guards_intact()
        if not ok:
            fail("oob", f"the kernel wrote outside {t.name} (shape {tuple(t.shape)}): {where}")
    for g, a, t in zip(gin, ins, [t for t in tensors if t.is_placeholder]):
        if not np.array_equal(g.array.view(uint_type(a.dtype)), a.view(uint_type(a.dtype))):
            fail("oob", f"the kernel changed input {t.name}")
    try:
        want = workload.reference(ins) if workload.reference else evaluate(tensors, ins)
    except Exception as err:  # noqa: BLE001 - the evaluator itself failed: report, do not hide
        fail("bad_error", f"reference evaluation failed: {describe_exc(err)}")
        return
    for g, ref, t in zip(gout, want, outs_t):
        got = g.array
        rtol, atol = tolerance(t.dtype)
        ref = np.asarray(ref)
        if got.shape != ref.shape:
            fail("wrong", f"{t.name}: shape {got.shape} vs reference {ref.shape}")
            continue
        if t.dtype == "int32":
            bad = got != ref
        else:
            with np.errstate(invalid="ignore"):
                bad = ~np.isclose(got, ref, rtol=rtol, atol=atol, equal_nan=True)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            fail("wrong", f"{t.name}: {int(bad.sum())} of {bad.size} element(s) differ from the evaluator "
                 f"(first at {idx}: got {got[idx]!r}, want {ref[idx]!r})")
    # A second call on outputs poisoned differently must give the same bits: no output element may
    # depend on what was there before, nor on thread timing.
    first = [g.array.copy() for g in gout]
    for g, t in zip(gout, outs_t):
        g.array[...] = POISON2[t.dtype]
    try:
        kernel(*[g.array for g in gin], *[g.array for g in gout])
    except Exception as err:  # noqa: BLE001
        fail("bad_error", f"second kernel call: {describe_exc(err)}")
        return
    for g, f1, t in zip(gout, first, outs_t):
        u = uint_type(t.dtype)
        differ = g.array.view(u) != f1.view(u)
        if differ.any():
            idx = tuple(int(i) for i in np.argwhere(differ)[0])
            fail("wrong", f"{t.name}: a second call gives different values in {int(differ.sum())} element(s) "
                 f"(first at {idx}: {f1[idx]!r} then {g.array[idx]!r})")


def _diff(a: str, b: str, limit: int = 12) -> str:
    import difflib
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "lower()", "replayed", lineterm="", n=1))
    return "\n".join(lines[:limit] + (["..."] if len(lines) > limit else []))
