"""The ``loop_nest`` pass: a stage graph -> the loop nests of a PrimFunc.

Loop nests are emitted in stage order; an attached stage is emitted at the top
of its attach loop (inside a LOCAL allocation of its region), and a reduction
gets an init nest just above its outermost reduce loop.  Regions, extents and
buffers come from bound inference (:mod:`schedules.lowering.bounds`); guards
and edge-tile versions are placed by :mod:`schedules.lowering.guards`.
Guard conditions are simplified as they are placed (with the ranges of the
enclosing loops), since where a guard goes depends on its simplified form;
values and load indices are left as substituted, for the ``simplify`` pass.
"""
from __future__ import annotations

import functools

from schedules.errors import LoweringError
from schedules.lowering.bounds import Bounds, StageLayout, infer_bounds
from schedules.lowering.checks import check_annotations
from schedules.lowering.guards import GuardScope
from schedules.lowering.prefetch import prefetch_stmts
from schedules.lowering.skip import skip_condition
from schedules.state import AttachKind, Stage, StageGraph
from tensorir.te import AxisKind, Reduce, TensorRead
from tensorir.te.expr import Binary, BinOp, Const, Expr, const
from tensorir.tir.ir import Allocate, For, ForKind, IfThenElse, Load, PrimFunc, Scope, Store, seq
from tensorir.tir.rewrite import rewrite, substitute


def as_graph(obj) -> StageGraph:
    """The stage graph of a ``Schedule``, a ``StageGraph`` or a workload (list of tensors)."""
    if isinstance(obj, StageGraph):
        return obj
    graph = getattr(obj, "stage_graph", None)     # a Schedule (which imports this module)
    if callable(graph):
        return graph()
    return StageGraph.from_tensors(obj)


def loop_nest(obj, name: str | None = None) -> PrimFunc:
    """The first lowering pass: a schedule's stage graph as a loop-nest PrimFunc.

    ``obj`` is a ``Schedule``, a ``StageGraph`` or a workload; ``name`` defaults to the
    last output's name.  Raises :class:`~schedules.errors.LoweringError`.
    """
    graph = as_graph(obj)
    return _Emitter(infer_bounds(graph)).run(name)


class _Emitter:
    def __init__(self, bounds: Bounds):
        self.bounds = bounds
        self.g = bounds.graph
        self.guards = GuardScope(bounds.var_kind)
        self.prefetch_cache: dict = {}     # (stage, loop) -> its Prefetch statements
        self.skip_cache: dict = {}         # (stage, loop) -> the condition its iterations run under, or None

    def run(self, name: str | None) -> PrimFunc:
        body = seq(*[self.emit_stage(s) for s in self.g.stages if s.attach.kind is AttachKind.ROOT])
        for s in reversed(self.g.stages):
            lay = self.bounds.layout(s)
            if lay.buffer.scope is Scope.GLOBAL and s.attach.kind is AttachKind.ROOT:
                body = Allocate(lay.buffer, body)
        outs = [self.g.name_of(t) for t in self.g.params if not t.is_placeholder]
        fname = name or outs[-1]
        return PrimFunc(fname, tuple(self.bounds.params[id(t)] for t in self.g.params), body)

    def emit_stage(self, s: Stage):
        lay = self.bounds.layout(s)
        check_annotations(s, lay.extents, self.bounds.attached)
        with self.guards.stage({lay.vars[n]: (0, lay.extents[n] - 1) for n in s.leaf}):
            return self._emit_stage(s, lay)

    def _emit_stage(self, s: Stage, lay: StageLayout):
        gv = self.bounds.global_values(s)
        sub = {s.root_vars[r]: gv[r] for r in s.root}
        spatial = s.spatial_root
        out_idx = lay.store_index(tuple(lay.rel[r] if lay.local else gv[r] for r in spatial))
        if not s.is_reduction:
            value = self.translate(substitute(s.body, sub))
            return self.nest(s, lay, s.leaf, lay.conds, lambda: Store(lay.buffer, out_idx, value), True)
        red: Reduce = s.body
        src = self.translate(substitute(red.source, sub))
        acc = Load(lay.buffer, out_idx)
        first = next(i for i, n in enumerate(s.leaf) if s.loops[n].kind is AxisKind.REDUCE)
        outer, inner = s.leaf[:first], s.leaf[first:]
        init_loops = [n for n in inner if s.loops[n].kind is AxisKind.SPATIAL]

        def body(pending):
            init = self.nest(s, lay, init_loops, [c for c in pending if c[1]],
                             lambda: Store(lay.buffer, out_idx, red.reducer.identity(s.dtype)), False)
            main = self.nest(s, lay, inner, pending,
                             lambda: Store(lay.buffer, out_idx, red.reducer.combine(acc, src)), True)
            return seq(init, main)

        return self.nest(s, lay, outer, lay.conds, body, True, pass_pending=True)

    def nest(self, s: Stage, lay: StageLayout, loops: list, conds, leaf_body, attach: bool,
             pass_pending: bool = False):
        """Loops ``loops`` of stage ``s`` around ``leaf_body``, guards placed as high as possible.

        Guards that only fail on edge tiles are *versioned* (see :mod:`schedules.lowering.guards`).
        """
        guards = self.guards

        def finish(pending):
            return leaf_body(pending) if pass_pending else guards.guard(pending, leaf_body())

        def rec(i: int, pending: list):
            if i == len(loops):
                return finish(pending)
            name = loops[i]
            var, ext = lay.vars[name], lay.extents[name]
            if ext == 1:  # a single iteration: no loop, the variable is 0 everywhere
                inner = guards.versioned(pending, lambda p: rec(i + 1, p))
                return seq(*self._prefetches(s, lay, name),
                           self._skipping(s, lay, name, self._attach(s, name, inner))) if attach else inner
            with guards.loop(var):
                ready, rest = guards.split(pending)
                inner = guards.versioned(rest, lambda p: rec(i + 1, p))
                if attach:
                    inner = self._attach(s, name, inner)
                inner = guards.guard(ready, inner)
                if attach:     # (the main nest; an init nest reads nothing)
                    # (a skipped iteration still prefetches: the weight stream stays ahead of the taps that run)
                    inner = seq(*self._prefetches(s, lay, name), self._skipping(s, lay, name, inner))
            kind = s.annotation(name)
            return shortened(For(var, ext, kind, inner)) if kind in (ForKind.SERIAL, ForKind.UNROLLED) else \
                For(var, ext, kind, inner)

        ready, rest = guards.split(conds)
        out = guards.versioned(rest, finish) if not loops else guards.versioned(rest, lambda p: rec(0, p))
        return guards.guard(ready, out)

    def _prefetches(self, s: Stage, lay: StageLayout, loop: str) -> tuple:
        """The ``Prefetch`` statements at the top of ``s.loop``'s body (:mod:`.prefetch`), not bounds-guarded;
        a spec's with ``first`` loops under ``if`` all of them are at their first iteration."""
        specs = [p for p in s.prefetches if p.loop == loop]
        if not specs:
            return ()
        key = (s.name, loop)
        if key not in self.prefetch_cache:
            gv = self.bounds.global_values(s)
            sub = {s.root_vars[r]: gv[r] for r in s.root}
            pos = s.leaf.index(loop)
            inner = {lay.vars[n]: (0, lay.extents[n] - 1) for n in s.leaf[pos + 1:] if lay.extents[n] > 1}
            out = []
            for spec in specs:
                reads = [r for r in s.reads() if self.g.names.get(id(r.tensor)) == spec.tensor]
                if not reads:
                    raise LoweringError("prefetch", f"stage {s.name} prefetches {spec.tensor} in loop {s.name}."
                                        f"{loop} but no longer reads it (inlined or packed after the prefetch)",
                                        stage=s.name, loop=loop)
                loads = [self.translate(substitute(r, sub)) for r in reads]
                stmts = prefetch_stmts(spec, s.name, loads, lay.vars[loop], lay.extents[loop], inner,
                                       self.guards.simplify)
                if any(s.leaf.index(n) > pos for n in spec.first):
                    raise LoweringError("prefetch", f"stage {s.name} prefetches {spec.tensor} in loop {loop} in the "
                                        f"first iterations of loops {list(spec.first)}, which are no longer all "
                                        "around it (reordered after the prefetch)", stage=s.name, loop=loop)
                first = [lay.vars[n] for n in spec.first if lay.extents[n] > 1]
                if stmts and first:
                    cond = functools.reduce(lambda a, b: Binary(BinOp.AND, a, b),
                                            [Binary(BinOp.EQ, v, const(0)) for v in first])
                    stmts = [IfThenElse(cond, seq(*stmts))]
                out += stmts
            self.prefetch_cache[key] = tuple(out)
        return self.prefetch_cache[key]

    def _skipping(self, s: Stage, lay: StageLayout, loop: str, inner):
        """``inner`` (an iteration of ``s.loop``) under the ``skip_padding`` conditions of the loop."""
        specs = [k for k in s.skips if k.loop == loop]
        if not specs:
            return inner
        key = (s.name, loop)
        if key not in self.skip_cache:
            gv = self.bounds.global_values(s)
            sub = {s.root_vars[r]: gv[r] for r in s.root}
            conds = [c for c in (skip_condition(self.g, s, lay, k, sub, self.guards.simplify) for k in specs)
                     if c is not None]
            self.skip_cache[key] = functools.reduce(lambda a, b: Binary(BinOp.AND, a, b), conds) if conds else None
        cond = self.skip_cache[key]
        if cond is None:
            return inner
        if isinstance(cond, Const):     # (false: no iteration reads inside the box)
            return seq()
        return IfThenElse(cond, inner, skip=True)

    def _attach(self, s: Stage, loop: str, inner):
        """``inner`` preceded by the stages computed at ``s.loop``."""
        for p in reversed(self.bounds.attached.get((s.name, loop), ())):
            lay = self.bounds.layout(p)
            code = self.emit_stage(p)
            if lay.buffer.scope is Scope.LOCAL:
                inner = Allocate(lay.buffer, seq(code, inner))
            else:
                inner = seq(code, inner)
        return inner

    def translate(self, e: Expr) -> Expr:
        """TE expression (already in loop variables) -> loop-IR expression."""
        def fn(n):
            if isinstance(n, TensorRead):
                idx = tuple(self.translate(i) for i in n.indices)
                stage = self.g.stage_of(n.tensor)
                if stage is not None:
                    lay = self.bounds.layout(stage)
                    if lay.local:
                        idx = lay.store_index(tuple(Binary(BinOp.SUB, i, m) for i, (m, _) in zip(idx, lay.region)))
                    buf = lay.buffer
                else:
                    buf = self.bounds.params.get(id(n.tensor))
                    if buf is None:
                        raise LoweringError("lower", f"tensor {n.tensor.name!r} is read but is not in the "
                                            "workload list")
                return Load(buf, idx)
            return None
        return rewrite(e, fn)


def shortened(loop: For):
    """``for v in range(n): if v < k: body`` as ``for v in range(k): body`` (an edge tile whose guard a
    pinned sum reduced to its own row or column: a smaller tile without a test, which the promote pass
    keeps in registers; docs/decisions/058-edge-tiles-run-as-smaller-tiles.md)."""
    s = loop.body
    if not (isinstance(s, IfThenElse) and s.otherwise is None and isinstance(s.cond, Binary)
            and s.cond.op is BinOp.LT and s.cond.a == loop.var and isinstance(s.cond.b, Const)):
        return loop
    k = s.cond.b.value
    if k >= loop.extent:
        return For(loop.var, loop.extent, loop.kind, s.then)
    return For(loop.var, k, loop.kind, s.then) if k > 0 else seq()
