"""The random call drawer: what to draw next, and the argument values (loops, names, factors).

Which primitive's arguments are drawn how is in ``draw_primitives``; the multi-call idioms in
``recipes``; the malformed traces in ``malformed_traces``.  All of them draw from the one
``Drawer.rnd``, in a fixed order, so a seed draws the same calls every time.
"""
from __future__ import annotations

import math
import re

import numpy as np

from schedules import Schedule
from tests.fuzz.calls import call
from tests.fuzz.draw_primitives import PRIMITIVE_DRAWERS
from tests.fuzz.malformed_traces import draw_from_json
from tests.fuzz.recipes import recipe
from tests.fuzz.workloads import all_tensors

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
        # avoid_known: no arguments that trigger the known findings, to look past them
        self.avoid_known = avoid_known
        self.p_bad, self.p_json, self.p_revert = p_bad, p_json, p_revert
        self.p_recipe = 0.2
        self.plan: list = []             # calls a recipe queued for the next draws
        self.counter = 0

    # ------------------------------------------------------------ random values
    def chance(self, p: float) -> bool:
        """True with probability ``p``."""
        return self.rnd.random() < p

    def pick(self, seq):
        """One element of ``seq``, uniformly."""
        return seq[self.rnd.randrange(len(seq))]

    def fresh(self) -> str:
        """A loop or stage name, usually numbered (so not yet taken)."""
        self.counter += 1
        return f"{self.pick(FRESH_NAMES)}{self.counter}" if self.chance(0.7) else self.pick(FRESH_NAMES)

    def factor(self, ext: int, huge_ok: bool = True, wrap: bool = True):
        """A split or pack factor for a loop of ``ext`` iterations: small, odd, divisors, too big, now and
        then 10**9 (``huge_ok``) or a numpy integer (``wrap``)."""
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
        """A value no factor should accept."""
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
        """The next call: a recipe's queued call, a recipe, a revert, a trace, or one primitive."""
        if self.plan:
            return self.plan.pop(0)
        table = self.state(s)
        if table and self.chance(self.p_recipe):
            plan = recipe(self, s, table, outputs)
            if plan:
                self.plan = plan[1:]
                return plan[0]
        r = self.rnd.random()
        if r < self.p_revert:
            return {"op": "$revert"}
        if r < self.p_revert + self.p_json:
            return draw_from_json(self, s, table)
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
        return PRIMITIVE_DRAWERS[kind](self, s, table, outputs, shapes, bad)

    # ------------------------------------------------------------ arguments
    def loop_of(self, table, stage=None, want=None):
        """(handle, extent) of a loop of ``stage`` (a random one if None): the ``inner``, ``outer`` or any."""
        stage = stage or self.pick(list(table))
        loops = table[stage]
        if want == "inner":
            return loops[-1][0], loops[-1][1]
        if want == "outer":
            return loops[0][0], loops[0][1]
        lp, ext, _ = self.pick(loops)
        return lp, ext

    def bad_loop(self, table):
        """A loop handle that is malformed, of no stage, or of no loop."""
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
        """Two names for a split's loops: fresh, the same twice, clashing with a loop, or weird."""
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
        """``{}`` or ``{"name": ...}`` for a new stage: fresh, taken, or weird."""
        r = self.rnd.random()
        if r < 0.7:
            return {}
        if r < 0.85:
            return {"name": f"{self.pick(['S', 'buf', 'cache', 'tmp', 'Z'])}{self.rnd.randint(0, 99)}"}
        if r < 0.95:
            taken = list(table) + [t.name for t in s.tensors]
            return {"name": self.pick(taken)}                     # clash
        return {"name": self.pick(WEIRD_NAMES + [3, None])}


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
