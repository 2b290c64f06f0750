"""A schedule fuzzer: workloads, a random schedule drawer and a checker.

No pytest dependency at import: ``tests/test_fuzz.py`` (hypothesis property test) and
``benchmarks/fuzz_schedules.py`` (the long run, in worker processes) both use it.

Only the public API is used: ``tensorir.te``, ``tensorir.evaluate.evaluate``, ``schedules.Schedule``
(its primitives, ``stages``, ``loops``, ``extent``, ``reduce_axes``, ``describe``, ``lower``,
``build``, ``to_json``/``from_json``/``to_python``) and the kernel ``build()`` returns.

A *case* is a workload plus a list of *calls*, each a ``Schedule`` method applied to the current
schedule (``{"op": "split", "args": [...], "kwargs": {...}}``, JSON-encoded by :func:`encode`),
``{"op": "from_json", ...}`` (replace the schedule by a replayed, often malformed, trace) or
``{"op": "$revert"}`` (go back to the last schedule that lowered).  Calls are drawn one at a time
against the schedule as it is (its current stages and loops), and every call either returns a new
``Schedule`` or raises a one-line ``ScheduleError``; the case goes on from the last good schedule.
Replaying a case's calls (:func:`replay_calls`) rebuilds it exactly, so a finding is reproduced by
its workload name and its calls.

Outcome categories (:data:`CATEGORIES`): ``ok`` and ``refused`` are fine, the others are failures:

- ``bad_error``: a primitive, ``lower``, ``build`` or the kernel call raised something other than
  a ``ScheduleError`` whose message is one line;
- ``late_refusal``: a primitive was accepted, the schedule before it lowered, the one after it does
  not, and the lowering error blames an earlier primitive (e.g. ``compute_at``), i.e. the accepted
  primitive broke an invariant instead of refusing;
- ``wrong``: the output differs from ``tensorir.evaluate.evaluate`` beyond the dtype's tolerance, or a
  second call (outputs poisoned with other values) does not give the same bits;
- ``oob``: the kernel wrote outside an array (every array sits in the middle of a bigger buffer
  filled with a sentinel) or changed an input;
- ``replay_json`` / ``replay_python``: ``from_json(to_json())`` / ``exec(to_python())`` does not
  rebuild the same loop nest;
- ``too_big``: the loop nest allocates more than the in-process limit, so it was not run;
- ``oom``: a clean one-line ``MemoryError`` from build or the kernel call: a failure in-process (where
  nothing may allocate that much), accepted in the long run (``LONG_RUN_ACCEPTABLE``), whose huge
  buffers may legitimately not fit under its memory limit;
- ``crash`` / ``hang``: only the long run's worker processes can observe them.
"""
from __future__ import annotations

import collections
import json
import math
import multiprocessing as mp
import os
import random
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait

import numpy as np

from schedules import Schedule, ScheduleError
from tensorir import te
from tensorir.te.evaluate import evaluate

# Flip when ``Schedule.build(checked=True)`` exists (bounds-checked code); the checker then builds
# every schedule in checked mode.
CHECKED_BUILD = False

CATEGORIES = ("ok", "refused", "oom", "too_big", "bad_error", "late_refusal", "wrong", "oob",
              "replay_json", "replay_python", "crash", "hang")
ACCEPTABLE = frozenset({"ok", "refused"})
LONG_RUN_ACCEPTABLE = ACCEPTABLE | {"oom"}
# Worst first: a case's category is its worst finding.
SEVERITY = ("crash", "hang", "oob", "wrong", "bad_error", "late_refusal", "replay_json", "replay_python",
            "too_big", "oom", "refused", "ok")

# Lowering checks that are deferred by design (a later reorder/split can make them pass): a
# schedule whose lowering fails on them is not a late refusal.
DEFERRED_CHECKS = frozenset({"vectorize", "unroll"})

IN_PROCESS_MAX_BYTES = 256 << 20    # do not run loop nests that allocate more than this in-process


# =============================================================== workloads

@dataclass(frozen=True)
class Workload:
    """A named workload: ``make()`` returns fresh tensors (inputs first, then outputs)."""
    name: str
    make: Callable[[], list]
    reference: Callable | None = None   # inputs -> outputs (numpy); default: tensorir.evaluate
    huge: bool = False                  # needs gigabytes: only in worker processes with a memory limit
    weight: float = 1.0


def _add1(H=5, W=7):
    X = te.placeholder((H, W), "float32", "X")
    Y = te.compute((H, W), lambda i, j: X[i, j] + 1.0, "Y")
    return [X, Y]


def _exp_rowsum(R=5, C=7):
    X = te.placeholder((R, C), "float32", "X")
    e = te.compute((R, C), lambda i, j: te.exp(X[i, j]), "e")
    k = te.reduce_axis(C, "k")
    r = te.compute((R,), lambda i: te.sum(e[i, k], axis=k), "r")
    return [X, r]


def _stencil2d(H, W):
    """Zero-padded 5-point stencil: a padding stage P and the stencil S."""
    X = te.placeholder((H, W), "float32", "X")
    P = te.compute((H + 2, W + 2), lambda i, j: te.if_then_else(
        te.all(i >= 1, i < H + 1, j >= 1, j < W + 1), X[i - 1, j - 1], 0.0), "P")
    S = te.compute((H, W), lambda i, j: P[i + 1, j + 1] * 0.5 + (P[i, j + 1] + P[i + 2, j + 1]
                                                                 + P[i + 1, j] + P[i + 1, j + 2]) * 0.125, "S")
    return [X, S]


def _stencil3d(D, H, W):
    """7-point Laplacian over the interior, then an elementwise stage reading it and the input."""
    X = te.placeholder((D, H, W), "float32", "X")
    L = te.compute((D - 2, H - 2, W - 2), lambda d, h, w: X[d + 1, h + 1, w + 1] * -6.0
                   + X[d, h + 1, w + 1] + X[d + 2, h + 1, w + 1] + X[d + 1, h, w + 1]
                   + X[d + 1, h + 2, w + 1] + X[d + 1, h + 1, w] + X[d + 1, h + 1, w + 2], "L")
    Z = te.compute((D - 2, H - 2, W - 2), lambda d, h, w: L[d, h, w] * L[d, h, w] + X[d + 1, h + 1, w + 1], "Z")
    return [X, Z]


def _variance(R, C):
    """Row variance in two passes: total -> mean -> sum of squared deviations -> var."""
    X = te.placeholder((R, C), "float32", "X")
    k = te.reduce_axis(C, "k")
    total = te.compute((R,), lambda i: te.sum(X[i, k], axis=k), "total")
    mean = te.compute((R,), lambda i: total[i] * (1.0 / C), "mean")
    c = te.reduce_axis(C, "c")
    sq = te.compute((R,), lambda i: te.sum((X[i, c] - mean[i]) * (X[i, c] - mean[i]), axis=c), "sq")
    var = te.compute((R,), lambda i: sq[i] * (1.0 / C), "var")
    return [X, var]


def _logsumexp(R, C):
    X = te.placeholder((R, C), "float32", "X")
    k = te.reduce_axis(C, "k")
    m = te.compute((R,), lambda i: te.max(X[i, k], axis=k), "m")
    e = te.compute((R, C), lambda i, j: te.exp(X[i, j] - m[i]), "e")
    k2 = te.reduce_axis(C, "k2")
    s = te.compute((R,), lambda i: te.sum(e[i, k2], axis=k2), "s")
    lse = te.compute((R,), lambda i: te.log(s[i]) + m[i], "lse")
    return [X, lse]


def _two_consumers(R, C):
    """One row sum read by two outputs (a centred matrix and the squared sums)."""
    X = te.placeholder((R, C), "float32", "X")
    k = te.reduce_axis(C, "k")
    tot = te.compute((R,), lambda i: te.sum(X[i, k], axis=k), "tot")
    cen = te.compute((R, C), lambda i, j: X[i, j] - tot[i] * (1.0 / C), "cen")
    tot2 = te.compute((R,), lambda i: tot[i] * tot[i], "tot2")
    return [X, cen, tot2]


def _bmm_tt(Bn, M, N, K):
    """C[b] = A[b].T @ Bt[b].T: both operands transposed."""
    A = te.placeholder((Bn, K, M), "float32", "A")
    Bt = te.placeholder((Bn, N, K), "float32", "Bt")
    k = te.reduce_axis(K, "k")
    C = te.compute((Bn, M, N), lambda b, i, j: te.sum(A[b, k, i] * Bt[b, j, k], axis=k), "C")
    return [A, Bt, C]


def _matvec_epilogue(M, K, act):
    A = te.placeholder((M, K), "float32", "A")
    x = te.placeholder((K,), "float32", "x")
    bias = te.placeholder((M,), "float32", "bias")
    k = te.reduce_axis(K, "k")
    y = te.compute((M,), lambda i: te.sum(A[i, k] * x[k], axis=k), "y")
    if act == "tanh":
        z = te.compute((M,), lambda i: te.tanh(y[i] + bias[i]), "z")
    else:
        z = te.compute((M,), lambda i: te.max(y[i] + bias[i], 0.0), "z")
    return [A, x, bias, z]


def _int32_matmul_relu(M, N, K):
    A = te.placeholder((M, K), "int32", "A")
    B = te.placeholder((K, N), "int32", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    D = te.compute((M, N), lambda i, j: te.max(C[i, j], 0) * 2 + A[i, 0], "D")
    return [A, B, D]


def _f64_rownorm(R, C):
    X = te.placeholder((R, C), "float64", "X")
    k = te.reduce_axis(C, "k")
    ss = te.compute((R,), lambda i: te.sum(X[i, k] * X[i, k], axis=k), "ss")
    nrm = te.compute((R,), lambda i: te.sqrt(ss[i]) + 0.5, "nrm")
    Y = te.compute((R, C), lambda i, j: X[i, j] / nrm[i], "Yn")
    return [X, Y]


def _size1_reduce(A, B, C):
    """Size-1 dimensions around a reduction over the middle axis."""
    X = te.placeholder((A, B, C), "float32", "X")
    Y = te.compute((A, B, C), lambda i, j, l: X[i, j, l] * 2.0 - 1.0, "T")
    k = te.reduce_axis(B, "k")
    r = te.compute((A, C), lambda i, l: te.sum(Y[i, k, l], axis=k), "R")
    return [X, r]


HUGE_ROWS, HUGE_COLS = 2, 1_100_000_000


def _huge_intermediate():
    """An intermediate of 2 x 1.1e9 floats (8.8 GB) under a small output: allocation must not crash."""
    X = te.placeholder((HUGE_ROWS,), "float32", "X")
    T = te.compute((HUGE_ROWS, HUGE_COLS), lambda i, j: X[i] + 0.5, "T")
    k = te.reduce_axis(HUGE_COLS, "k")
    out = te.compute((HUGE_ROWS,), lambda i: te.max(T[i, k], axis=k), "out")
    return [X, out]


def _w(name, fn, *args, **kw):
    opts = {k: kw.pop(k) for k in ("reference", "huge", "weight") if k in kw}
    return Workload(name, lambda: fn(*args, **kw), **opts)


WORKLOADS: dict = {w.name: w for w in [
    _w("add1_5x7", _add1),
    _w("exp_rowsum_5x7", _exp_rowsum),
    _w("stencil2d_13x31", _stencil2d, 13, 31),
    _w("stencil2d_1x7", _stencil2d, 1, 7),
    _w("stencil3d_3x7x13", _stencil3d, 3, 7, 13),
    _w("stencil3d_4x3x31", _stencil3d, 4, 3, 31),
    _w("variance_7x31", _variance, 7, 31),
    _w("variance_13x1", _variance, 13, 1),
    _w("logsumexp_7x13", _logsumexp, 7, 13),
    _w("logsumexp_1x31", _logsumexp, 1, 31),
    _w("two_consumers_7x13", _two_consumers, 7, 13),
    _w("bmm_tt_3x7x13x5", _bmm_tt, 3, 7, 13, 5),
    _w("bmm_tt_1x1x31x7", _bmm_tt, 1, 1, 31, 7),
    _w("matvec_tanh_31x13", _matvec_epilogue, 31, 13, "tanh"),
    _w("matvec_relu_13x31", _matvec_epilogue, 13, 31, "relu"),
    _w("int32_matmul_relu_7x13x5", _int32_matmul_relu, 7, 13, 5),
    _w("f64_rownorm_7x31", _f64_rownorm, 7, 31),
    _w("size1_reduce_1x7x1", _size1_reduce, 1, 7, 1),
    _w("size1_reduce_1x1x13", _size1_reduce, 1, 1, 13),
    Workload("huge_intermediate", _huge_intermediate, reference=lambda ins: [ins[0] + np.float32(0.5)],
             huge=True, weight=0.3),
]}

NORMAL_WORKLOADS = [n for n, w in WORKLOADS.items() if not w.huge]


def pick_workload(rnd, allow_huge: bool = False) -> str:
    names = [n for n, w in WORKLOADS.items() if allow_huge or not w.huge]
    weights = [WORKLOADS[n].weight for n in names]
    total = sum(weights)
    x = rnd.random() * total
    for n, wt in zip(names, weights):
        x -= wt
        if x < 0:
            return n
    return names[-1]


# ====================================================== JSON for call arguments

def encode(x):
    """Arguments -> JSON: tuples, numpy scalars and dicts with non-string keys survive the trip."""
    if isinstance(x, np.generic):
        return {"$np": x.dtype.name, "v": x.item()}
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"$float": repr(x)}
    if isinstance(x, tuple):
        return {"$tuple": [encode(v) for v in x]}
    if isinstance(x, list):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in x):
            return {k: encode(v) for k, v in x.items()}
        return {"$dict": [[encode(k), encode(v)] for k, v in x.items()]}
    if hasattr(x, "op") and hasattr(x, "name"):      # a te.Tensor passed as a stage handle
        return {"$tensor": x.name}
    return {"$repr": repr(x)}


def decode(x, tensors=()):
    if isinstance(x, list):
        return [decode(v, tensors) for v in x]
    if isinstance(x, dict):
        if set(x) == {"$np", "v"}:
            return np.dtype(x["$np"]).type(x["v"])
        if set(x) == {"$tuple"}:
            return tuple(decode(v, tensors) for v in x["$tuple"])
        if set(x) == {"$dict"}:
            return {_hashable(decode(k, tensors)): decode(v, tensors) for k, v in x["$dict"]}
        if set(x) == {"$float"}:
            return float(x["$float"])
        if set(x) == {"$tensor"}:
            for t in all_tensors(tensors):
                if t.name == x["$tensor"]:
                    return t
            return x["$tensor"]
        if set(x) == {"$repr"}:
            return x["$repr"]
        return {k: decode(v, tensors) for k, v in x.items()}
    return x


def _hashable(k):
    return tuple(k) if isinstance(k, list) else k


def all_tensors(tensors) -> list:
    """Every tensor reachable from the workload's tensors (original stages included)."""
    out, seen, stack = [], set(), list(tensors)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        out.append(t)
        stack.extend(t.inputs)
    return out


def call(op: str, *args, **kwargs) -> dict:
    return {"op": op, "args": encode(list(args)), "kwargs": encode(dict(kwargs))}


def call_to_python(c: dict) -> str:
    """One call as a line of Python (for reproducers)."""
    if c["op"] == "$revert":
        return "s = last_lowerable  # $revert"
    args = [_py(a) for a in c.get("args", [])] + [f"{k}={_py(v)}" for k, v in c.get("kwargs", {}).items()]
    if c["op"] == "from_json":
        return f"s = Schedule.from_json(tensors, {', '.join(args)})"
    return f"s = s.{c['op']}({', '.join(args)})"


def _py(x) -> str:
    if isinstance(x, dict):
        if set(x) == {"$np", "v"}:
            return f"np.{x['$np']}({x['v']!r})"
        if set(x) == {"$tuple"}:
            inner = ", ".join(_py(v) for v in x["$tuple"])
            return f"({inner},)" if len(x["$tuple"]) == 1 else f"({inner})"
        if set(x) == {"$dict"}:
            return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in x["$dict"]) + "}"
        if set(x) == {"$float"}:
            return f"float({x['$float']!r})"
        if set(x) == {"$tensor"}:
            return f"tensor_named({x['$tensor']!r})"
        if set(x) == {"$repr"}:
            return x["$repr"]
        return "{" + ", ".join(f"{k!r}: {_py(v)}" for k, v in x.items()) + "}"
    if isinstance(x, list):
        return "[" + ", ".join(_py(v) for v in x) + "]"
    return repr(x)


# =============================================================== applying calls

@dataclass
class Finding:
    category: str
    message: str
    call_index: int | None = None      # the call that caused it (None: the final schedule)
    trace: dict | None = None          # trace of the schedule the call was applied to

    def as_dict(self) -> dict:
        return {"category": self.category, "message": self.message, "call_index": self.call_index,
                "trace": self.trace}


def _one_line(msg: str) -> bool:
    return bool(msg.strip()) and "\n" not in msg.strip()


def _describe_exc(err: BaseException) -> str:
    """``Type: message @ file:line in function`` (where it was raised) on one line."""
    tb = traceback.extract_tb(err.__traceback__)
    where = f" @ {_short(tb[-1].filename)}:{tb[-1].lineno} in {tb[-1].name}" if tb else ""
    msg = str(err).replace("\n", "\\n")
    if len(msg) > 400:
        msg = msg[:400] + "..."
    return f"{type(err).__name__}: {msg}{where}"


def _short(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def _safe_trace(s: Schedule):
    try:
        obj = s.to_json()
        return json.loads(json.dumps(obj, default=repr))
    except Exception as err:  # noqa: BLE001 - recorded, not raised
        return {"unserializable": _describe_exc(err)}


def apply_call(s: Schedule, c: dict) -> Schedule:
    """Apply one call to ``s`` (raises whatever the primitive raises)."""
    args = decode(c.get("args", []), s.tensors)
    kwargs = decode(c.get("kwargs", {}), s.tensors)
    if c["op"] == "from_json":
        return Schedule.from_json(s.tensors, *args, **kwargs)
    return getattr(s, c["op"])(*args, **kwargs)


def _own_primitives(op: str) -> set:
    return {"tile": {"tile", "split", "reorder"}}.get(op, {op})


class Run:
    """Applies calls one by one, from the last good schedule, and records findings."""

    def __init__(self, workload: Workload, lower_each: bool = True):
        self.workload = workload
        self.tensors = workload.make()
        self.s = Schedule(self.tensors)
        self.lower_each = lower_each
        self.lowerable = True
        self.last_lowerable = self.s
        self.calls: list = []
        self.results: list = []          # per call: ok | ok_unlowerable | refused | failed | reverted
        self.findings: list = []

    def step(self, c: dict) -> str:
        idx = len(self.calls)
        self.calls.append(c)
        result = self._step(idx, c)
        self.results.append(result)
        return result

    def _finding(self, category, message, idx, before):
        self.findings.append(Finding(category, message, idx, _safe_trace(before)))

    def _step(self, idx: int, c: dict) -> str:
        if c["op"] == "$revert":
            self.s, self.lowerable = self.last_lowerable, True
            return "reverted"
        before = self.s
        try:
            new = apply_call(before, c)
        except ScheduleError as err:
            if _one_line(str(err)):
                return "refused"
            self._finding("bad_error", f"{c['op']}: multi-line ScheduleError: {_describe_exc(err)}", idx, before)
            return "failed"
        except Exception as err:  # noqa: BLE001 - that is the finding
            self._finding("bad_error", f"{c['op']}: {_describe_exc(err)}", idx, before)
            return "failed"
        if not isinstance(new, Schedule):
            self._finding("bad_error", f"{c['op']} returned {type(new).__name__}, not a Schedule", idx, before)
            return "failed"
        self.s = new
        if self.lower_each:
            try:
                new.lower()
                ok = True
            except ScheduleError as err:
                ok = False
                blamed = getattr(err, "primitive", None)
                if (self.lowerable and c["op"] != "from_json" and blamed not in DEFERRED_CHECKS
                        and blamed not in _own_primitives(c["op"])):
                    self._finding("late_refusal", f"{c['op']} was accepted, then lower() failed: {err}", idx,
                                  before)
                if not _one_line(str(err)):
                    self._finding("bad_error", f"lower: multi-line ScheduleError: {_describe_exc(err)}", idx,
                                  before)
            except Exception as err:  # noqa: BLE001
                ok = False
                self._finding("bad_error", f"lower after {c['op']}: {_describe_exc(err)}", idx, before)
            if ok:
                self.last_lowerable = new
            self.lowerable = ok
            return "ok" if ok else "ok_unlowerable"
        return "ok"


# ================================================================ the drawer

FRESH_NAMES = ["o", "n", "outer", "inner", "io", "ii", "t0", "a_b", "x1", "blk", "lane", "p", "q", "zz",
               "loop_with_a_long_name", "é", "k_o", "v"]
WEIRD_NAMES = ["", ".x", "x.", "a.b.c", "1", "a b", "Y.i", "X", "-", "x\ny"]
BAD_HANDLES = ["nosuch.i", "", ".i", "X.i", None, 3, 2.5, ("Y.i",), ["Y.i"], "i", "Y..i"]


class Drawer:
    """Draws calls against the schedule as it is now.  ``rnd``: a ``random.Random`` (or alike)."""

    def __init__(self, rnd, allow_huge: bool = False, p_bad: float = 0.12, p_json: float = 0.07,
                 p_revert: float = 0.05, avoid_known: bool = False):
        self.rnd = rnd
        self.allow_huge = allow_huge
        # avoid_known: no arguments that trigger the known findings (KNOWN_TRIGGERS), to look past them
        self.avoid_known = avoid_known
        self.p_bad, self.p_json, self.p_revert = p_bad, p_json, p_revert
        self.p_recipe = 0.2
        self.plan: list = []             # calls a recipe queued for the next draws
        self.counter = 0

    # ------------------------------------------------------------ helpers
    def chance(self, p: float) -> bool:
        return self.rnd.random() < p

    def pick(self, seq):
        return seq[self.rnd.randrange(len(seq))]

    def fresh(self) -> str:
        self.counter += 1
        return f"{self.pick(FRESH_NAMES)}{self.counter}" if self.chance(0.7) else self.pick(FRESH_NAMES)

    def factor(self, ext: int, huge_ok: bool = True, wrap: bool = True):
        r = self.rnd.random()
        if r < 0.30:
            f = self.rnd.randint(1, ext + 2)
        elif r < 0.45:
            f = self.pick(_divisors(ext))
        elif r < 0.50:
            f = 1
        elif r < 0.60:
            f = self.rnd.randrange(3, 2 * ext + 3, 2)
        elif r < 0.65:
            f = ext
        elif r < 0.70 and huge_ok:
            f = 10 ** 9
        else:
            f = self.pick([2, 4, 8, 16, 32, 64])
        if wrap and not self.avoid_known and self.chance(0.12):
            f = self.pick([np.int64, np.int32])(f)
        return f

    def bad_value(self):
        return self.pick([0, -3, 2.5, "4", None, True, [4], 10 ** 30, float("nan"), -(10 ** 9)])

    def state(self, s: Schedule) -> dict:
        """stage -> [(loop handle, extent, is_reduce or None)], from the public inspection API."""
        red = _reduce_flags(s)
        table = {}
        for st in s.stages:
            try:
                loops = s.loops(st)
                exts = [s.extent(lp) for lp in loops]
            except Exception:  # noqa: BLE001 - a broken state: the checker will say so
                continue
            flags = red.get(st)
            if flags is None or len(flags) != len(loops):
                flags = [None] * len(loops)
            table[st] = list(zip(loops, exts, flags))
        return table

    # ------------------------------------------------------------- draw
    def draw(self, s: Schedule, outputs: set, shapes: dict) -> dict:
        if self.plan:
            return self.plan.pop(0)
        table = self.state(s)
        if table and self.chance(self.p_recipe):
            plan = self.recipe(s, table, outputs)
            if plan:
                self.plan = plan[1:]
                return plan[0]
        r = self.rnd.random()
        if r < self.p_revert:
            return {"op": "$revert"}
        if r < self.p_revert + self.p_json:
            return self.draw_from_json(s, table)
        bad = self.chance(self.p_bad)
        kinds = [("split", 22), ("tile", 6), ("fuse", 8), ("reorder", 9), ("unroll", 6), ("vectorize", 9),
                 ("parallel", 7), ("compute_at", 10), ("compute_root", 3), ("compute_inline", 6),
                 ("cache_write", 6), ("pack", 6), ("rfactor", 5)]
        x = self.rnd.random() * sum(w for _, w in kinds)
        for kind, w in kinds:
            x -= w
            if x < 0:
                break
        if not table:
            return call("compute_root", self.pick(list(shapes) or ["nosuch"]))
        return getattr(self, f"draw_{kind}")(s, table, outputs, shapes, bad)

    # ------------------------------------------------------------ recipes
    def recipe(self, s, table, outputs) -> list:
        """A few calls that go together the way a user (or the tuner) writes them, with the loop names
        the primitives will give (a mispredicted name is just a refused call)."""
        kind = self.pick(["vec_inner", "vec_inner", "register_tile", "rfactor_vec", "inline_all", "attach",
                          "parallel_outer"])
        stage = self.pick(list(table))
        loops = [lp for lp, _, _ in table[stage]]
        spatial = [lp for lp, _, red in table[stage] if red is not True]
        inter = [st for st in table if st not in outputs]
        if kind == "vec_inner" and spatial:
            lp = spatial[-1]
            plan = []
            if lp != loops[-1]:
                plan.append(call("reorder", *[x for x in loops if x != lp], lp))
            f = self.pick([2, 3, 4, 5, 8, 16])
            return plan + [call("split", lp, factor=f), call("vectorize", f"{lp}.1")]
        if kind == "register_tile":
            try:
                axes, raxes = s.axes(stage), s.reduce_axes(stage)
            except Exception:  # noqa: BLE001
                return []
            if len(axes) < 1:
                return []
            local = f"{stage}_local"
            tiled = axes[-2:]
            fs = [self.pick([1, 2, 3, 4, 6, 8]) if len(tiled) == 2 and n == 0 else self.pick([4, 8, 16])
                  for n in range(len(tiled))]
            plan = [call("cache_write", stage), call("tile", tiled, fs)]
            plan.append(call("compute_at", local, f"{tiled[-1]}.0"))
            lnames = [f"{local}.{a.split('.', 1)[1]}" for a in axes]
            rnames = [f"{local}.{a.split('.', 1)[1]}" for a in raxes]
            if rnames:
                plan.append(call("reorder", *(lnames[:-len(tiled)] + rnames + lnames[-len(tiled):])))
            plan.append(call("vectorize", lnames[-1]))
            if len(tiled) == 2:
                plan.append(call("unroll", lnames[-2]))
            if len(axes) > len(tiled) and self.chance(0.5):
                plan.append(call("parallel", axes[0]))
            return plan
        if kind == "rfactor_vec":
            reds = []
            for st in table:
                try:
                    if s.reduce_axes(st):
                        reds.append(st)
                except Exception:  # noqa: BLE001
                    pass
            if not reds:
                return []
            st = self.pick(reds)
            ax = s.reduce_axes(st)[-1].split(".", 1)[1]
            rf = f"{st}_rf"
            f = self.pick([2, 3, 4, 8, 16])
            plan = [call("rfactor", st, f), call("reorder", f"{rf}.{ax}_o", f"{rf}.{ax}_v"),
                    call("vectorize", f"{rf}.{ax}_v")]
            if self.chance(0.5):
                plan.append(call("compute_at", rf, f"{st}.{s.loops(st)[0].split('.', 1)[1]}"))
            return plan
        if kind == "inline_all" and inter:
            return [call("compute_inline", st) for st in reversed(inter)]
        if kind == "attach" and inter:
            p = self.pick(inter)
            host = self.pick([st for st in table if st != p] or [stage])
            hl = [lp for lp, _, _ in table[host]]
            return [call("compute_at", p, self.pick(hl[:2]))]
        if kind == "parallel_outer" and len(loops) >= 2:
            return [call("fuse", loops[0], loops[1]), call("parallel", f"{loops[0]}.{loops[1].split('.', 1)[1]}.fused")]
        return []

    def loop_of(self, table, stage=None, want=None):
        stage = stage or self.pick(list(table))
        loops = table[stage]
        if want == "inner":
            return loops[-1][0], loops[-1][1]
        if want == "outer":
            return loops[0][0], loops[0][1]
        lp, ext, _ = self.pick(loops)
        return lp, ext

    def bad_loop(self, table):
        h = self.pick(BAD_HANDLES)
        if self.chance(0.5) and table:
            st = self.pick(list(table))
            h = self.pick([st, f"{st}.", f"{st}.nosuch", f"{st}.{self.fresh()}", f"{st}.i.0.1"])
        return h

    def stage_arg(self, s, stage):
        """A stage name, or now and then the te.Tensor object itself (as a user would pass it)."""
        if self.chance(0.1):
            for t in all_tensors(s.tensors):
                if t.name == stage:
                    return t
        return stage

    def names_pair(self, table, stage):
        pair = self._names_pair(table, stage)
        if self.avoid_known and pair[0] == pair[1]:
            pair = (pair[0], f"{pair[1]}_b")
        return pair

    def _names_pair(self, table, stage):
        r = self.rnd.random()
        if r < 0.65:
            return (self.fresh(), self.fresh())
        if r < 0.75:
            if self.avoid_known:
                return (self.fresh(), self.fresh())
            n = self.fresh()
            return (n, n)                                         # duplicate
        existing = [lp.split(".", 1)[1] for lp, _, _ in table.get(stage, [])] or ["i"]
        if r < 0.88:
            pair = [self.fresh(), self.pick(existing)]            # clash with a current loop
            self.rnd.shuffle(pair)
            return tuple(pair)
        return (self.pick(WEIRD_NAMES), self.fresh())

    def out_name(self, s, table):
        r = self.rnd.random()
        if r < 0.7:
            return {}
        if r < 0.85:
            return {"name": f"{self.pick(['S', 'buf', 'cache', 'tmp', 'Z'])}{self.rnd.randint(0, 99)}"}
        if r < 0.95:
            taken = list(table) + [t.name for t in s.tensors]
            return {"name": self.pick(taken)}                     # clash
        return {"name": self.pick(WEIRD_NAMES + [3, None])}

    # ---------------------------------------------------------- primitives
    def draw_split(self, s, table, outputs, shapes, bad):
        stage = self.pick(list(table))
        loop, ext = self.loop_of(table, stage)
        kw = {}
        if self.chance(0.2):
            kw["nparts"] = self.factor(ext)
        else:
            kw["factor"] = self.factor(ext)
        if self.chance(0.25):
            kw["names"] = self.names_pair(table, stage)
            if self.chance(0.15):
                kw["names"] = list(kw["names"])
        if bad:
            r = self.rnd.random()
            if r < 0.3:
                kw = {self.pick(["factor", "nparts"]): self.bad_value()}
            elif r < 0.4:
                kw = {"factor": self.factor(ext), "nparts": self.factor(ext)}
            elif r < 0.5:
                kw = {}
            elif r < 0.75:
                kw["names"] = self.pick([(self.fresh(), self.fresh(), self.fresh()), "ab", (3, 4), self.fresh()]
                                        + ([] if self.avoid_known else [(self.fresh(),), (None, None)]))
            else:
                loop = self.bad_loop(table)
        return call("split", loop, **kw)

    def draw_tile(self, s, table, outputs, shapes, bad):
        stages = [st for st in table if len(table[st]) >= 2] or list(table)
        stage = self.pick(stages)
        loops = table[stage]
        n = min(len(loops), self.pick([1, 2, 2, 2, 3]))
        chosen = self.rnd.sample(loops, n)
        if self.chance(0.7):
            chosen.sort(key=loops.index)
        handles = [lp for lp, _, _ in chosen]
        factors = [self.factor(ext, wrap=False) if self.chance(0.9) else self.factor(ext) for _, ext, _ in chosen]
        if bad:
            if self.chance(0.5):
                factors = factors + [4]
            else:
                handles[0] = self.bad_loop(table)
        return call("tile", handles, factors)

    def draw_fuse(self, s, table, outputs, shapes, bad):
        stages = [st for st in table if len(table[st]) >= 2] or list(table)
        stage = self.pick(stages)
        loops = [lp for lp, _, _ in table[stage]]
        if len(loops) >= 2 and self.chance(0.85):
            p = self.rnd.randrange(len(loops) - 1)
            a, b = loops[p], loops[p + 1]
        else:
            a, b = self.pick(loops), self.pick(loops)
        if bad:
            b = self.bad_loop(table) if self.chance(0.5) else self.loop_of(table)[0]
        return call("fuse", a, b, **self.out_name(s, table))

    def draw_reorder(self, s, table, outputs, shapes, bad):
        stages = [st for st in table if len(table[st]) >= 2] or list(table)
        stage = self.pick(stages)
        loops = [lp for lp, _, _ in table[stage]]
        n = self.rnd.randint(min(2, len(loops)), len(loops))
        chosen = self.rnd.sample(loops, n)
        if bad:
            r = self.rnd.random()
            if r < 0.3:
                chosen.append(chosen[0])
            elif r < 0.6:
                chosen.append(self.loop_of(table)[0])
            elif r < 0.8:
                chosen = []
            else:
                chosen[-1] = self.bad_loop(table)
        if self.chance(0.15):
            return call("reorder", chosen)      # the list form
        return call("reorder", *chosen)

    def _annot(self, kind, table, bad, prefer):
        stage = self.pick(list(table))
        loops = table[stage]
        if prefer == "inner" and self.chance(0.75):
            spatial = [x for x in loops if x[2] is not True]
            loop = (spatial[-1] if spatial and self.chance(0.3) else loops[-1])[0]
        elif prefer == "outer" and self.chance(0.7):
            spatial = [x for x in loops if x[2] is not True] or loops
            loop = spatial[0][0]
        elif prefer == "small" and self.chance(0.8):
            small = [x for x in loops if x[1] <= 16] or loops
            loop = self.pick(small)[0]
        else:
            loop = self.pick(loops)[0]
        if bad:
            loop = self.bad_loop(table)
        return call(kind, loop)

    def draw_unroll(self, s, table, outputs, shapes, bad):
        return self._annot("unroll", table, bad, "small")

    def draw_vectorize(self, s, table, outputs, shapes, bad):
        return self._annot("vectorize", table, bad, "inner")

    def draw_parallel(self, s, table, outputs, shapes, bad):
        return self._annot("parallel", table, bad, "outer")

    def draw_compute_at(self, s, table, outputs, shapes, bad):
        inter = [st for st in table if st not in outputs] or list(table)
        stage = self.pick(inter)
        others = [st for st in table if st != stage] or list(table)
        hosts = [st for st in others if st in outputs] if self.chance(0.5) else others
        host = self.pick(hosts or others)
        loop = self.loop_of(table, host)[0]
        if bad:
            r = self.rnd.random()
            if r < 0.3:
                stage = self.pick(list(table))
                loop = self.loop_of(table, stage)[0]          # its own loop
            elif r < 0.5:
                stage = self.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, 0])
            elif r < 0.7:
                stage = loop                                 # a loop handle as the stage
            else:
                loop = self.bad_loop(table)
        return call("compute_at", self.stage_arg(s, stage), loop)

    def draw_compute_root(self, s, table, outputs, shapes, bad):
        stage = self.pick(list(table))
        if bad:
            stage = self.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, 3, f"{stage}.i"])
        return call("compute_root", self.stage_arg(s, stage))

    def draw_compute_inline(self, s, table, outputs, shapes, bad):
        inter = [st for st in table if st not in outputs]
        stage = self.pick(inter) if inter and self.chance(0.75) else self.pick(list(table))
        if bad:
            stage = self.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, ""])
        return call("compute_inline", self.stage_arg(s, stage))

    def draw_cache_write(self, s, table, outputs, shapes, bad):
        stage = self.pick(list(table))
        kw = self.out_name(s, table)
        if bad:
            stage = self.pick([t.name for t in s.tensors if t.is_placeholder] + ["nosuch", None, f"{stage}.i"])
        return call("cache_write", self.stage_arg(s, stage), **kw)

    def draw_pack(self, s, table, outputs, shapes, bad):
        inputs = [t.name for t in s.tensors if t.is_placeholder]
        inter = [st for st in table if st not in outputs]
        tname = self.pick(inter) if inter and self.chance(0.3) else self.pick(inputs or list(table))
        shape = shapes.get(tname) or tuple(self.rnd.randint(1, 8) for _ in range(self.rnd.randint(1, 3)))
        ndim = len(shape)
        dims = self.rnd.sample(range(ndim), self.rnd.randint(1, ndim))
        splits = {}
        for d in dims:
            f = self.factor(shape[d], huge_ok=self.allow_huge, wrap=self.chance(0.3))
            splits[d] = f
        kw = {}
        if self.chance(0.5):
            keys = []
            for d in range(ndim):
                keys += [f"{d}.o", f"{d}.i"] if d in splits else [d if self.chance(0.3) else str(d)]
            self.rnd.shuffle(keys)
            kw["order"] = keys
        if self.chance(0.15):
            kw["consumers"] = [self.pick(list(table))]
        kw.update(self.out_name(s, table))
        if bad:
            r = self.rnd.random()
            if r < 0.3 and self.avoid_known:
                splits = {0: self.bad_value()}
            elif r < 0.15:
                splits = [4]
            elif r < 0.3:
                splits = {"a": 4}
            elif r < 0.45:
                splits = {self.pick([ndim, -1, 5, "0", 0.0]): 2}
            elif r < 0.6:
                splits = {0: self.bad_value()}
            elif r < 0.7:
                splits = None
            elif r < 0.85:
                kw["order"] = self.pick([["0"], [], ["0", "0", "1"], ["x"], "01", [None]])
            else:
                kw["consumers"] = self.pick([["nosuch"], "Y", [None], [inputs[0] if inputs else "X"]])
        if self.allow_huge and not bad and self.chance(0.05):
            splits = {self.rnd.randrange(ndim): 10 ** 9}
        return call("pack", tname, splits, **kw)

    def draw_rfactor(self, s, table, outputs, shapes, bad):
        reductions = []
        for st in table:
            try:
                if s.reduce_axes(st):
                    reductions.append(st)
            except Exception:  # noqa: BLE001
                pass
        stage = self.pick(reductions) if reductions and self.chance(0.9) else self.pick(list(table))
        try:
            axes = s.reduce_axes(stage)
        except Exception:  # noqa: BLE001
            axes = []
        kw = {}
        ext = 8
        if axes:
            ax = self.pick(axes)
            try:
                ext = s.extent(ax)
            except ScheduleError:
                ext = 8
            r = self.rnd.random()
            if r < 0.3:
                kw["axis"] = ax.split(".", 1)[1]
            elif r < 0.5:
                kw["axis"] = ax
        f = self.rnd.randint(2, max(2, ext)) if self.chance(0.8) else self.pick([1, ext, ext + 1, 2])
        if self.chance(0.1) and not self.avoid_known:
            f = np.int64(f)
        kw.update(self.out_name(s, table))
        if bad:
            r = self.rnd.random()
            if r < 0.4:
                f = self.bad_value()
            elif r < 0.7:
                kw["axis"] = self.pick(["nosuch", f"{self.pick(list(table))}.i", 3, ""])
            else:
                stage = self.pick(["nosuch", None] + [t.name for t in s.tensors if t.is_placeholder])
        return call("rfactor", self.stage_arg(s, stage), f, **kw)

    # ------------------------------------------------------- malformed traces
    def draw_from_json(self, s, table):
        try:
            obj = json.loads(json.dumps(s.to_json()))
        except Exception:  # noqa: BLE001 - e.g. numpy ints in the trace: try a trace of our own
            obj = {"version": 1, "instructions": [], "decisions": {}}
        insts = obj.get("instructions", [])
        stages = list(table) or ["Y"]
        loops = [lp for st in table for lp, _, _ in table[st]] or ["Y.i"]
        r = self.rnd.random()
        if r < 0.15 or self.avoid_known:
            pass                                                         # a clean round trip
        elif r < 0.25:
            obj["instructions"].append(self.pick([
                ["unroll", [], {}, []], ["compute_at", [self.pick(stages)], {}, []], ["split", [], {}, []],
                ["split", [self.pick(loops)], {"factor": 2}, ["a"]], ["fuse", [self.pick(loops)], {}, []],
                ["reorder", [], {}, []], ["pack", [self.pick(stages)], {}, []],
                ["pack", ["X"], {"splits": [4]}, []], ["rfactor", [self.pick(stages)], {}, []],
                ["cache_write", [self.pick(stages)], {}, ["a", "b"]], ["compute_inline", [], {}, []],
                ["vectorize", [self.pick(loops), self.pick(loops)], {}, []], ["parallel", [3], {}, []],
                ["split", [self.pick(loops)], {"factor": 2}, [1, 2]],
            ]))
        elif r < 0.35 and insts:
            inst = self.pick(insts)
            if self.chance(0.5):
                inst.pop(self.rnd.randrange(len(inst)))                   # wrong arity
            else:
                inst.append(self.pick([[], {}, "x", 1]))
        elif r < 0.55 and insts:
            inst = self.pick(insts)
            attrs = inst[2]
            if attrs and self.chance(0.7):
                k = self.pick(list(attrs))
                attrs[k] = self.pick(["4", 4.5, None, [4], {"a": 1}, -1, 0, True, 10 ** 9, {"$decision": "d0"},
                                      {"$decision": 3}])
                if self.chance(0.5):
                    obj["decisions"] = {"d0": self.pick([2, 3, "x", None, [1]])}
            else:
                inst[2] = self.pick([[], "x", None, 3])
        elif r < 0.65 and insts:
            inst = self.pick(insts)
            inst[1] = self.pick([[], [3], [None], "Y.i", [self.pick(loops)], [self.pick(stages)], [[self.pick(loops)]]])
        elif r < 0.72 and insts:
            inst = self.pick(insts)
            inst[3] = self.pick([[], ["a"], ["a", "a"], [1, 2], "x", [None, None]])
        elif r < 0.8 and insts:
            inst = self.pick(insts)
            inst[0] = self.pick(["splitt", "", 3, None, "Split", "tile", "lower", "__init__"])
        elif r < 0.86 and len(insts) >= 2:
            a, b = self.rnd.sample(range(len(insts)), 2)
            insts[a], insts[b] = insts[b], insts[a]
        else:
            obj = self.pick([{}, {"instructions": "x"}, {"version": 2, "instructions": []}, [],
                             {"instructions": insts, "decisions": [1]}, {"instructions": insts, "version": "1"},
                             {"instructions": [None]}, {"instructions": [[]]}, "not json",
                             json.dumps(obj)[:-3], json.dumps(obj), None, 3])
        return call("from_json", obj)


def _divisors(n: int) -> list:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _reduce_flags(s: Schedule) -> dict:
    """stage -> [is_reduce per current loop], parsed from ``Schedule.describe()`` (best effort)."""
    out, cur = {}, None
    try:
        text = s.describe()
    except Exception:  # noqa: BLE001
        return out
    stages = set(s.stages)
    for line in text.splitlines():
        if not line.startswith(" "):
            m = re.match(r"stage (.+?) \((?:reduction|elementwise)", line)
            cur = m.group(1) if m and m.group(1) in stages else None
            if cur is not None:
                out[cur] = []
        elif cur is not None and line.lstrip().startswith("for "):
            out[cur].append("(reduce)" in line)
    return out


def _shapes(tensors) -> dict:
    return {t.name: tuple(t.shape) for t in all_tensors(tensors)}


def _outputs(tensors) -> set:
    return {t.name for t in tensors if not t.is_placeholder}


# =============================================================== the checker

@dataclass
class Outcome:
    category: str
    message: str = ""
    findings: list = field(default_factory=list)    # [Finding]
    lowered: str | None = None


def _worst(categories) -> str:
    cats = set(categories) or {"ok"}
    return next(c for c in SEVERITY if c in cats)


def make_inputs(tensors, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for t in tensors:
        if t.is_placeholder:
            if t.dtype == "int32":
                out.append(rng.integers(-10, 10, size=t.shape).astype(np.int32))
            else:
                out.append(rng.uniform(-1, 1, size=t.shape).astype(t.dtype))
    return out


SENTINEL = {"float32": np.array([0x7FA5A5A5], np.uint32).view(np.float32)[0],
            "float64": np.array([0x7FF5A5A5A5A5A5A5], np.uint64).view(np.float64)[0],
            "int32": np.int32(0x5A5A5A5A)}
POISON = {"float32": np.float32(np.nan), "float64": np.float64(np.nan), "int32": np.int32(-0x3C3C3C3D)}
POISON2 = {"float32": np.float32(-12345.5), "float64": np.float64(-12345.5), "int32": np.int32(0x1234567)}


class Guarded:
    """An array that is a contiguous view in the middle of a bigger buffer filled with a sentinel.

    The view starts 16 bytes past a 64-byte boundary (as large numpy arrays do); ``guard`` bytes of
    sentinel lie on each side (64 KiB: the stray writes seen so far reached a few KiB; farther ones
    may crash, which the worker processes count).
    """

    def __init__(self, shape, dtype, guard: int = (64 << 10) + 16):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64))
        self.guard_elems = -(-guard // dtype.itemsize)
        total = n + 2 * self.guard_elems
        raw = np.empty(total * dtype.itemsize + 128, np.uint8)
        off = (16 - raw.ctypes.data) % 64
        self.buf = raw[off:off + total * dtype.itemsize].view(dtype)
        self.buf[...] = SENTINEL[dtype.name]
        self.n = n
        self.array = self.buf[self.guard_elems:self.guard_elems + n].reshape(shape)
        self._sentinel_bits = np.full(1, SENTINEL[dtype.name], dtype).view(_uint(dtype))[0]

    def guards_intact(self) -> tuple:
        bits = self.buf.view(_uint(self.buf.dtype))
        lo, hi = bits[:self.guard_elems], bits[self.guard_elems + self.n:]
        bad_lo = np.flatnonzero(lo != self._sentinel_bits)
        bad_hi = np.flatnonzero(hi != self._sentinel_bits)
        if len(bad_lo) or len(bad_hi):
            where = []
            if len(bad_lo):
                where.append(f"{len(bad_lo)} element(s) before it (as far as {self.guard_elems - bad_lo[0]} back)")
            if len(bad_hi):
                where.append(f"{len(bad_hi)} element(s) after it (as far as {bad_hi[-1] + 1} past the end)")
            return False, " and ".join(where)
        return True, ""


def _uint(dtype):
    return {4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]


def tolerance(dtype: str) -> tuple:
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
        if not _one_line(str(err)):
            fail("bad_error", f"lower: multi-line ScheduleError: {_describe_exc(err)}")
            return Outcome("bad_error", findings[0].message, findings)
        refused, text = str(err), None
    except Exception as err:  # noqa: BLE001
        fail("bad_error", f"lower: {_describe_exc(err)}")
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
        fail("replay_json", f"from_json(to_json()): {_describe_exc(err)}")

    # 3. replay through the Python text
    try:
        code = schedule.to_python()
        ns = {"Schedule": Schedule, "tensors": list(schedule.tensors)}
        exec(compile(code, "<to_python>", "exec"), ns)  # noqa: S102 - that is the test
        same(ns["s"], "exec(to_python())", "replay_python")
    except Exception as err:  # noqa: BLE001
        fail("replay_python", f"exec(to_python()): {_describe_exc(err)}")

    if text is None:
        if not findings:
            return Outcome("refused", refused)
        cat = _worst([f.category for f in findings])
        return Outcome(cat, next(f.message for f in findings if f.category == cat), findings)

    # 4. build and run on guarded arrays
    nbytes = allocated_bytes(text)
    if max_bytes is not None and nbytes > max_bytes:
        fail("too_big", f"the loop nest allocates {nbytes} bytes (> {max_bytes}); not run in-process")
    else:
        _run(workload, schedule, checked, seed, fail)
    cat = _worst([f.category for f in findings])
    msg = next((f.message for f in findings if f.category == cat), "")
    return Outcome(cat, msg, findings, text)


def _run(workload, schedule, checked, seed, fail) -> None:
    tensors = list(schedule.tensors)
    try:
        kernel = schedule.build(checked=True) if checked else schedule.build()
    except MemoryError as err:
        fail("oom" if _one_line(str(err)) else "bad_error", f"build: {_describe_exc(err)}")
        return
    except ScheduleError as err:
        fail("bad_error", f"build raised after lower() succeeded: {_describe_exc(err)}")
        return
    except Exception as err:  # noqa: BLE001
        fail("bad_error", f"build: {_describe_exc(err)}")
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
        fail("oom" if _one_line(str(err)) else "bad_error", f"kernel call: {_describe_exc(err)}")
        return
    except Exception as err:  # noqa: BLE001
        fail("bad_error", f"kernel call: {_describe_exc(err)}")
        return
    for g, t in zip(gin + gout, [t for t in tensors if t.is_placeholder] + outs_t):
        ok, where = g.guards_intact()
        if not ok:
            fail("oob", f"the kernel wrote outside {t.name} (shape {tuple(t.shape)}): {where}")
    for g, a, t in zip(gin, ins, [t for t in tensors if t.is_placeholder]):
        if not np.array_equal(g.array.view(_uint(a.dtype)), a.view(_uint(a.dtype))):
            fail("oob", f"the kernel changed input {t.name}")
    try:
        want = workload.reference(ins) if workload.reference else evaluate(tensors, ins)
    except Exception as err:  # noqa: BLE001 - the evaluator itself failed: report, do not hide
        fail("bad_error", f"reference evaluation failed: {_describe_exc(err)}")
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
        fail("bad_error", f"second kernel call: {_describe_exc(err)}")
        return
    for g, f1, t in zip(gout, first, outs_t):
        u = _uint(t.dtype)
        differ = g.array.view(u) != f1.view(u)
        if differ.any():
            idx = tuple(int(i) for i in np.argwhere(differ)[0])
            fail("wrong", f"{t.name}: a second call gives different values in {int(differ.sum())} element(s) "
                 f"(first at {idx}: {f1[idx]!r} then {g.array[idx]!r})")


def _diff(a: str, b: str, limit: int = 12) -> str:
    import difflib
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "lower()", "replayed", lineterm="", n=1))
    return "\n".join(lines[:limit] + (["..."] if len(lines) > limit else []))


# ================================================================== cases

@dataclass
class CaseResult:
    workload: str
    category: str
    message: str
    calls: list
    findings: list                  # [Finding]
    trace: dict | None              # the final schedule's trace
    seed: object = None             # what drew the case (for the record)
    lowered: str | None = None
    results: list = field(default_factory=list)   # per call, see Run.results

    def record(self) -> dict:
        """One JSON-able line for the failing-cases file (and for ``--replay``)."""
        return {"workload": self.workload, "category": self.category, "message": self.message,
                "trace": self.trace, "calls": self.calls, "results": self.results, "seed": self.seed,
                "findings": [f.as_dict() for f in self.findings]}

    def report(self) -> str:
        return record_report(self.record())


def record_report(rec: dict) -> str:
    """A failing case for humans: the message, Python that reproduces it, and its record line."""
    lines = [f"{rec['category']} on {rec.get('workload')}: {rec.get('message', '')}", ""]
    if rec.get("log_tail"):
        lines += ["worker log:", rec["log_tail"], ""]
    lines += ["reproduce (refused calls commented out):",
              reproducer(rec.get("workload"), rec.get("calls") or [], rec.get("results"), rec.get("findings") or ()),
              "", "record (one line for benchmarks/fuzz_schedules.py --replay FILE):",
              json.dumps(rec, default=repr)]
    return "\n".join(lines)


def _finish(run: Run, *, run_kernel: bool, max_bytes, checked, seed, hook=None) -> CaseResult:
    findings = list(run.findings)
    out = None
    if hook is not None:
        hook("check", _safe_trace(run.s))
    if run_kernel:
        out = check(run.workload, run.s, max_bytes=max_bytes, checked=checked)
        findings += out.findings
        if out.category == "refused" and not findings:
            return CaseResult(run.workload.name, "refused", out.message, run.calls, [], _safe_trace(run.s), seed,
                              None, list(run.results))
    cat = _worst([f.category for f in findings])
    msg = next((f.message for f in findings if f.category == cat), "")
    return CaseResult(run.workload.name, cat, msg, run.calls, findings, _safe_trace(run.s), seed,
                      out.lowered if out else None, list(run.results))


def run_case(workload_name: str, rnd, *, allow_huge: bool = False, avoid_known: bool = False,
             min_calls: int = 3, max_calls: int = 12,
             run_kernel: bool = True, max_bytes: int | None = IN_PROCESS_MAX_BYTES, checked: bool | None = None,
             seed=None, hook=None) -> CaseResult:
    """Draw 3-12 calls on a fresh schedule of the workload, then check the result.

    ``hook(event, payload)``, if given, hears ``("call", call)`` before each call is applied and
    ``("check", trace)`` before the final checks (the long run's workers report progress with it, so
    that a crash or a hang is attributed to the right call).
    """
    wl = WORKLOADS[workload_name]
    if hook is not None:
        hook("workload", workload_name)
    run = Run(wl)
    drawer = Drawer(rnd, allow_huge=allow_huge, avoid_known=avoid_known)
    outputs, shapes = _outputs(run.tensors), _shapes(run.tensors)
    for _ in range(rnd.randint(min_calls, max_calls)):
        try:
            c = drawer.draw(run.s, outputs, shapes)
        except ScheduleError as err:
            # The inspection API refused to describe the current schedule: a finding of its own.
            run.findings.append(Finding("bad_error", f"inspecting the schedule: {_describe_exc(err)}",
                                        len(run.calls), _safe_trace(run.s)))
            break
        if hook is not None:
            hook("call", c)
        run.step(c)
    return _finish(run, run_kernel=run_kernel, max_bytes=max_bytes, checked=checked, seed=seed, hook=hook)


def replay_calls(workload_name: str, calls: list, *, run_kernel: bool = True,
                 max_bytes: int | None = IN_PROCESS_MAX_BYTES, checked: bool | None = None, seed=None,
                 hook=None) -> CaseResult:
    """Re-apply recorded calls (a case, or a minimized one) and check the result."""
    run = Run(WORKLOADS[workload_name])
    for c in calls:
        if hook is not None:
            hook("call", c)
        run.step(c)
    return _finish(run, run_kernel=run_kernel, max_bytes=max_bytes, checked=checked, seed=seed, hook=hook)


def case_seed(seed: int, index: int) -> str:
    return f"{seed}:{index}"


def seeded_case(seed: int, index: int, *, allow_huge: bool = False, **kw) -> CaseResult:
    """Case ``index`` of a run with ``seed``: the workload and the calls both come from the seed."""
    rnd = random.Random(case_seed(seed, index))
    name = pick_workload(rnd, allow_huge)
    return run_case(name, rnd, allow_huge=allow_huge, seed=case_seed(seed, index), **kw)


def reproducer(workload_name: str, calls: list, results: list | None = None, findings: list = ()) -> str:
    """Python that rebuilds the case: accepted calls as code, refused ones as comments.

    Without ``results`` (as :func:`replay_calls` records them) every call is written as code.
    """
    findings = [f if isinstance(f, Finding) else Finding(f["category"], f["message"], f.get("call_index"))
                for f in findings]
    failed = {f.call_index: f for f in findings if f.call_index is not None}
    lines = ["import numpy as np", "from schedules import Schedule, ScheduleError",
             "from tests.schedule_fuzz import WORKLOADS, all_tensors, check",
             f"wl = WORKLOADS[{workload_name!r}]", "tensors = wl.make()"]
    if any("$tensor" in json.dumps(c) for c in calls):
        lines.append("tensor_named = {t.name: t for t in all_tensors(tensors)}.get")
    lines.append("s = Schedule(tensors)")
    reverts = any(c["op"] == "$revert" for c in calls)
    if reverts:
        lines.append("good = s")
    for n, c in enumerate(calls):
        res = results[n] if results and n < len(results) else "ok"
        if c["op"] == "$revert":
            lines.append("s = good  # back to the last schedule that lowered")
        elif res == "refused":
            lines.append(f"# {call_to_python(c)}  # refused")
        elif res == "failed":
            lines.append(f"{call_to_python(c)}  # <- {failed[n].message[:150] if n in failed else 'fails'}")
            lines.append("# (the case goes on from the schedule before that call)")
        else:
            lines.append(call_to_python(c))
            if res == "ok" and reverts:
                lines.append("good = s")
    lines.append("print(check(wl, s).category, check(wl, s).message)")
    return "\n".join(lines)


def minimize(workload_name: str, calls: list, category: str, still_fails: Callable | None = None) -> list:
    """Greedily drop calls while the case keeps failing with ``category`` (in-process by default)."""
    def default(cs):
        return replay_calls(workload_name, cs).category == category
    test = still_fails or default
    cur = list(calls)
    changed = True
    while changed:
        changed = False
        i = len(cur) - 1
        while i >= 0:
            cand = cur[:i] + cur[i + 1:]
            if test(cand):
                cur, changed = cand, True
            i -= 1
    return cur


# ========================================================= worker processes

# A crash (segfault) or a hang of a kernel must cost a worker process, not the caller: the long run
# (benchmarks/fuzz_schedules.py) and the property test run cases in a Pool.
CASES_PER_WORKER = 100          # a worker is replaced after this many cases (bounds memory growth)


def _worker_main(conn, mem_gb: float, log_path: str) -> None:
    """Run jobs from ``conn`` until told to stop; report progress before each step."""
    import faulthandler
    import resource
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))      # a crash must not spend minutes writing a core
    if mem_gb > 0:
        limit = int(mem_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    F = sys.modules[__name__]

    def hook(event, payload):
        conn.send((event, payload))

    while True:
        job = conn.recv()
        if job is None:
            break
        os.ftruncate(fd, 0)                    # the log keeps only this case's output (for crashes)
        conn.send(("start", job))
        try:
            opts = {"max_bytes": job.get("max_bytes"), "checked": job.get("checked"), "hook": hook}
            if job["kind"] == "seeded":
                res = F.seeded_case(job["seed"], job["index"], allow_huge=job["huge"],
                                    avoid_known=job.get("avoid", False), **opts)
            elif job["kind"] == "case":
                res = F.run_case(job["workload"], random.Random(job["seed"]), seed=job["seed"], **opts)
            else:
                res = F.replay_calls(job["workload"], job["calls"], seed=job.get("seed"), **opts)
            rec = res.record()
        except BaseException as err:  # noqa: BLE001 - the fuzzer itself failed: report it as such
            rec = {"workload": job.get("workload"), "category": "bad_error", "seed": job.get("seed"),
                   "message": f"fuzzer error: {F._describe_exc(err)}", "calls": [], "trace": None}
        conn.send(("done", json.loads(json.dumps(rec, default=repr))))


class Worker:
    def __init__(self, ctx, mem_gb: float, logdir: str, n: int):
        self.ctx, self.mem_gb, self.n = ctx, mem_gb, n
        self.log = os.path.join(logdir, f"worker{n}.log")
        self.proc = self.conn = None
        self.job = None
        self.count = 0
        self.started = 0.0
        self.progress: dict = {}
        self.start()

    def start(self):
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker_main, args=(child, self.mem_gb, self.log), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.job = None
        self.count = 0

    def restart(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()
        self.start()

    def retire(self):
        """Replace an idle worker by a fresh one (bounds the memory a long run accumulates)."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(10)
        self.restart()

    def submit(self, job):
        if self.count >= CASES_PER_WORKER:
            self.retire()
        self.count += 1
        self.job = job
        self.started = time.monotonic()
        seed = f"{job['seed']}:{job['index']}" if job["kind"] == "seeded" else job.get("seed")
        self.progress = {"workload": job.get("workload"), "calls": [], "trace": None, "seed": seed}
        self.conn.send(job)

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - 200_000))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        # the traceback faulthandler wrote, without LLVM's pass chatter
        lines = [ln for ln in text.splitlines() if not ln.startswith("Skipping pass ")]
        text = "\n".join(lines)
        at = text.rfind("Fatal Python error")
        return (text[at:] if at >= 0 else text)[-n:]


def _signal_name(code) -> str:
    import signal
    if code is None:
        return "still running"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _crash_record(w: Worker, category: str, why: str) -> dict:
    p = w.progress
    tail = w.log_tail()
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\w+)', tail)
    where = ""
    if frames:
        f, line, fn = frames[0]                # faulthandler lists the innermost frame first
        where = f" @ {'/'.join(f.split('/')[-2:])}:{line} in {fn}"
    phase = "in the final checks (build/run)" if p.get("trace") is not None else \
        f"during call {len(p['calls']) - 1}" if p.get("calls") else "before the first call"
    return {"workload": p.get("workload"), "category": category, "seed": p.get("seed"),
            "message": f"{why} {phase}{where}", "trace": p.get("trace"), "calls": p.get("calls", []),
            "findings": [{"category": category, "message": f"{why} {phase}{where}", "call_index": None,
                          "trace": p.get("trace")}], "log_tail": tail[:2000]}


class Pool:
    """Worker processes that run jobs; a crash or a hang costs one worker, which is replaced."""

    def __init__(self, workers: int, timeout: float, mem_gb: float):
        ctx = mp.get_context("spawn")
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")       # idle OpenMP threads must not spin
        self.timeout = timeout
        self.logdir = tempfile.mkdtemp(prefix="fuzz-workers-")
        self.workers = [Worker(ctx, mem_gb, self.logdir, n) for n in range(max(1, workers))]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        import shutil
        for w in self.workers:
            try:
                if w.job is None and w.proc.is_alive():
                    w.conn.send(None)
            except OSError:
                pass
        for w in self.workers:
            w.proc.join(2)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(2)
        shutil.rmtree(self.logdir, ignore_errors=True)

    def run(self, jobs, *, on_result=None, quiet=False) -> list:
        """Run ``jobs``; returns one record per job, in order (crash/hang records included)."""
        pending = collections.deque(enumerate(jobs))
        results: list = [None] * len(jobs)
        ids: dict = {}
        done = 0
        t0 = time.monotonic()

        def finish(w: Worker, rec: dict):
            nonlocal done
            jid = ids.pop(id(w))
            results[jid] = rec
            done += 1
            w.job = None
            if on_result:
                on_result(jid, rec)
            if not quiet and (done % 100 == 0 or done == len(jobs)):
                print(f"  {done}/{len(jobs)} cases, {time.monotonic() - t0:.0f} s", flush=True)

        while pending or any(w.job is not None for w in self.workers):
            for w in self.workers:
                if w.job is None and pending:
                    jid, job = pending.popleft()
                    ids[id(w)] = jid
                    try:
                        w.submit(job)
                    except OSError:                 # died between jobs: replace it and try again
                        w.restart()
                        w.submit(job)
            busy = [w for w in self.workers if w.job is not None]
            wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=0.5)
            for w in self.workers:
                broken = False
                try:
                    while w.conn.poll():
                        kind, payload = w.conn.recv()
                        if kind == "workload":
                            w.progress["workload"] = payload
                        elif kind == "call":
                            w.progress["calls"].append(payload)
                        elif kind == "check":
                            w.progress["trace"] = payload
                        elif kind == "done" and w.job is not None:
                            finish(w, payload)
                except (EOFError, OSError):
                    broken = True
                if w.job is None:
                    if broken or not w.proc.is_alive():
                        w.proc.join(5)
                        w.restart()
                    continue
                if broken or not w.proc.is_alive():
                    w.proc.join(1)
                    finish(w, _crash_record(w, "crash", f"worker died ({_signal_name(w.proc.exitcode)})"))
                    w.restart()
                elif time.monotonic() - w.started > self.timeout:
                    finish(w, _crash_record(w, "hang", f"no result after {self.timeout:.0f} s"))
                    w.restart()
        return results
