"""Lower a schedule (stage graph) to the loop-nest IR.

Pipeline (each step a plain function of its inputs):

1. ``layout``: for every stage, the region it must compute (the whole tensor for a
   root stage; for a stage attached with ``compute_at``, the part its consumers
   read inside the attach loop: *bound inference*), the extent of every loop, and
   the value of every root axis in terms of the leaf loop variables.
2. ``emit``: loop nests in stage order; attached stages are emitted at the top of
   their attach loop; a reduction gets an init nest just above its outermost
   reduce loop.  Partial tiles (non-dividing splits, regions crossing a tensor's
   edge) are guarded with ``IfThenElse``, each guard placed at the outermost loop
   where all its variables are bound.
3. ``simplify`` every index and guard with the ranges of the enclosing loops, so
   provable guards disappear and split indices become affine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from schedules.errors import LoweringError
from tensorir.te.expr import Binary, BinOp, Const, Expr, Var, const
from tensorir.tir.ir import Allocate, Buffer, For, ForKind, IfThenElse, Load, PrimFunc, Scope, Store, seq
from tensorir.tir.analysis import Affine, affine, int_range, linear_range
from tensorir.tir.transform.simplify import Simplifier, simplify
from schedules.state import Fuse, Split, Stage, StageGraph
from tensorir.tir.rewrite import rewrite as _rewrite, substitute as _substitute
from tensorir.te import AxisKind, Reduce, Reducer, TensorRead, free_vars

MAX_VECTOR_LANES = 64
_TIGHT = (ForKind.UNROLLED, ForKind.VECTORIZED)  # loops where a guard blocks vector/register code
MAX_UNROLL = 1024


def lower(obj, name: str | None = None) -> PrimFunc:
    """Lower a ``Schedule``, a ``StageGraph`` or a workload (list of tensors) to a PrimFunc."""
    return _Lowering(as_graph(obj)).run(name)


def as_graph(obj) -> StageGraph:
    if isinstance(obj, StageGraph):
        return obj
    state = getattr(obj, "state", None)
    if isinstance(state, StageGraph):
        return state
    return StageGraph.from_tensors(obj)


@dataclass
class _Layout:
    extents: dict        # loop name -> int extent
    vars: dict           # leaf loop name -> Var
    rel: dict            # root loop name -> Expr of leaf vars (relative to region start)
    region: list         # per spatial dim: (min Expr, extent int)
    buffer: Buffer
    local: bool          # buffer indexed relative to the region start
    conds: list          # (Expr, is_spatial) guards on leaf vars (and outer vars)


def _nonnegative(e: Expr) -> bool:
    """A loop variable, or one divided (floor) or taken modulo by a positive constant: never negative."""
    if isinstance(e, Var):
        return True
    return isinstance(e, Binary) and e.op in (BinOp.FLOORDIV, BinOp.MOD) and isinstance(e.b, Const) \
        and e.b.value > 0 and _nonnegative(e.a)


class _Lowering:
    def __init__(self, graph: StageGraph):
        self.g = graph
        self.params = {id(t): Buffer(graph.name_of(t), t.shape, t.dtype, Scope.PARAM) for t in graph.params}
        self.layouts: dict = {}
        self.busy: set = set()
        self.ranges: dict = {}      # Var -> (lo, hi) of every loop variable in scope or known
        self.bound: set = set()     # loop variables of the loops currently open
        self.no_version = 0         # > 0 while emitting the guarded (edge-tile) copy of a nest
        self.known: list = []     # version checks known true here (the fast copy of an enclosing version)
        self.var_kind: dict = {}    # loop Var -> ForKind, for every stage's leaf loops
        self._simplifier = None     # shares simplified subexpressions while ``ranges`` is unchanged
        self.attached: dict = {}
        for s in graph.stages:
            if s.attach.kind == "at":
                target = graph.stage(s.attach.stage)
                if target is None or s.attach.loop not in target.leaf:
                    raise LoweringError("compute_at", f"stage {s.name} is attached at {s.attach.stage}."
                                        f"{s.attach.loop}, which is not a loop of the current schedule",
                                        stage=s.name)
                self.attached.setdefault((s.attach.stage, s.attach.loop), []).append(s)

    # ------------------------------------------------------------------ layout
    def layout(self, s: Stage) -> _Layout:
        got = self.layouts.get(s.name)
        if got is not None:
            return got
        if s.name in self.busy:
            raise LoweringError("compute_at", f"stage {s.name} is (indirectly) attached inside itself")
        self.busy.add(s.name)
        if s.attach.kind == "at":
            region = self._infer_region(s)
        else:
            region = [(const(0), n) for n in s.shape]
        extents = {}
        spatial = s.spatial_root
        for r in s.root:
            loop = s.loops[r]
            extents[r] = region[spatial.index(r)][1] if loop.kind is AxisKind.SPATIAL else loop.extent
        for rel in s.relations:
            if isinstance(rel, Split):
                pe = extents[rel.parent]
                extents[rel.outer] = -(-pe // rel.factor)
                extents[rel.inner] = rel.factor if pe > rel.factor else pe
            else:
                extents[rel.fused] = extents[rel.outer] * extents[rel.inner]
        lvars = {n: Var(f"{s.name}.{n}") for n in s.leaf}
        values = {n: (const(0) if extents[n] == 1 else v) for n, v in lvars.items()}
        for rel in reversed(s.relations):
            if isinstance(rel, Split):
                values[rel.parent] = values[rel.outer] * rel.factor + values[rel.inner]
            else:
                ei = extents[rel.inner]
                values[rel.outer] = values[rel.fused] // ei
                values[rel.inner] = values[rel.fused] % ei
        leaf_ranges = {lvars[n]: (0, extents[n] - 1) for n in s.leaf}
        rel_vals = {r: simplify(values[r], leaf_ranges) for r in s.root}
        conds = []
        for r in s.root:
            is_sp = s.loops[r].kind is AxisKind.SPATIAL
            c = simplify(Binary(BinOp.LT, rel_vals[r], const(extents[r])), leaf_ranges)
            if not (isinstance(c, Const) and c.value):
                conds.append((c, is_sp))
        # A split of a split whose factor does not divide it covers more than
        # its parent: k.1 = k.1.0 * 5 + k.1.1 reaches 19 for a k.1 of extent
        # 16.  The root guard alone would let those iterations run, as terms
        # of the next block (counted twice by a reduction) or past a local
        # buffer, so each such inner node gets its own guard.
        roots = set(s.root)
        for rel in s.relations:
            if isinstance(rel, Split) and rel.parent not in roots \
                    and extents[rel.outer] * extents[rel.inner] > extents[rel.parent]:
                c = simplify(Binary(BinOp.LT, simplify(values[rel.parent], leaf_ranges),
                                    const(extents[rel.parent])), leaf_ranges)
                if not (isinstance(c, Const) and c.value):
                    conds.append((c, s.loops[rel.parent].kind is AxisKind.SPATIAL))
        pid = id(s.tensor)
        if s.attach.kind == "at":
            padded = self._overcompute(s, region) if pid not in self.params else set()
            for d, r in enumerate(spatial):
                if d in padded:   # the tile computes past the edge: only tiles that start inside run
                    conds.append((Binary(BinOp.LT, region[d][0], const(s.shape[d])), True))
                    continue
                g = Binary(BinOp.ADD, region[d][0], rel_vals[r])
                conds.append((Binary(BinOp.LT, g, const(s.shape[d])), True))
                conds.append((Binary(BinOp.GE, g, const(0)), True))
        if pid in self.params:
            buf, local = self.params[pid], False
        elif s.attach.kind == "at":
            buf = Buffer(s.name, tuple(e for _, e in region), s.dtype, Scope.LOCAL)
            local = True
        else:
            buf, local = Buffer(s.name, s.shape, s.dtype, Scope.GLOBAL), False
        lay = _Layout(extents, lvars, rel_vals, region, buf, local, conds)
        self.var_kind.update({lvars[n]: s.annotation(n) for n in s.leaf})
        self.busy.discard(s.name)
        self.layouts[s.name] = lay
        return lay

    def _overcompute(self, s: Stage, region: list) -> set:
        """Spatial dims along which attached stage ``s`` may compute its whole tile past the tensor's edge.

        ``s`` writes a local buffer of the tile's size, so computing the elements past the edge
        only costs their arithmetic, provided every read stays inside the tensor it reads: then
        an edge tile runs the same guard-free, vectorized code as a full one (a register tile 7 of
        16 columns wide ran its FMAs element by element: A^T B 1000x999x517, 0.6x -> 0.9x of
        numpy), and only its copy-out is guarded.  A read of a pack reads its zero padding there.
        Tile starts are affine in outer loops, >= 0 and < the edge; aligned to the tile (a
        multiple of its extent), the last tile ends at the edge rounded up to the extent.
        Integer division by a value is excluded (a padded zero divisor would trap).
        """
        from tensorir.te import walk
        body = s.body.source if isinstance(s.body, Reduce) else s.body
        if any(isinstance(n, Binary) and n.op in (BinOp.FLOORDIV, BinOp.MOD) and not isinstance(n.b, Const)
               for n in walk(body)):
            return set()
        spatial = s.spatial_root
        tops = {}
        for d, r in enumerate(spatial):
            start, ext = region[d]
            n = s.shape[d]
            lin = affine(simplify(start))
            if ext >= n or lin.const < 0 or any(c < 0 or not _nonnegative(t) for t, c in lin.terms.items()):
                continue
            g = math.gcd(lin.const, *lin.terms.values())
            tops[d] = -(-n // ext) * ext - 1 if g % ext == 0 else n + ext - 2
        if not tops:
            return set()

        def reads_inside(dims) -> bool:
            ranges = {}
            for d, r in enumerate(spatial):
                ranges[s.root_vars[r]] = (0, tops[d] if d in dims else s.shape[d] - 1)
            for r in s.root:
                if s.loops[r].kind is AxisKind.REDUCE:
                    ranges[s.root_vars[r]] = (0, s.loops[r].extent - 1)
            for rd in s.reads():
                for i, n in zip(rd.indices, rd.tensor.shape):
                    got = int_range(simplify(i, ranges), ranges)
                    if got is None or got[0] < 0 or got[1] > n - 1:
                        return False
            return True

        if reads_inside(set(tops)):
            return set(tops)
        return {d for d in tops if reads_inside({d})}

    def global_values(self, s: Stage) -> dict:
        """Root loop name -> absolute index Expr (spatial axes offset by the region start)."""
        lay = self.layout(s)
        out = dict(lay.rel)
        for d, r in enumerate(s.spatial_root):
            m = lay.region[d][0]
            if not (isinstance(m, Const) and m.value == 0):
                out[r] = Binary(BinOp.ADD, m, lay.rel[r])
        return out

    def _inside(self, y: Stage, x: Stage, loop: str) -> bool:
        """Is stage ``y`` computed within loop ``x.loop`` (y == x counts)?"""
        pos = x.leaf.index(loop)
        cur = y
        while True:
            if cur.name == x.name:
                return True
            if cur.attach.kind != "at":
                return False
            if cur.attach.stage == x.name:
                return x.leaf.index(cur.attach.loop) >= pos
            cur = self.g.stage(cur.attach.stage)

    def _nested_vars(self, x: Stage, loop: str, consumers: list) -> dict:
        """Ranges of the loop variables that vary inside ``x.loop`` around the consumers."""
        lay_x = self.layout(x)
        pos = x.leaf.index(loop)
        out = {lay_x.vars[n]: (0, lay_x.extents[n] - 1) for n in x.leaf[pos + 1:]}
        for y in consumers:
            while y.name != x.name:  # y and the stages hosting it, up to x
                lay_y = self.layout(y)
                out.update({lay_y.vars[n]: (0, lay_y.extents[n] - 1) for n in y.leaf})
                y = self.g.stage(y.attach.stage)
        return out

    def _infer_region(self, p: Stage) -> list:
        x = self.g.stage(p.attach.stage)
        loop = p.attach.loop
        consumers = self.g.consumers(p)
        for y in consumers:
            if not self._inside(y, x, loop):
                raise LoweringError("compute_at", f"stage {p.name} is computed at loop {x.name}.{loop}, but its "
                                    f"consumer {y.name} is not inside that loop", stage=p.name, loop=loop)
        varying = self._nested_vars(x, loop, consumers)
        accesses = []
        for y in consumers:
            gv = self.global_values(y)
            sub = {y.root_vars[r]: gv[r] for r in y.root}
            for rd in y.reads():
                if rd.tensor is p.tensor:
                    accesses.append([_substitute(i, sub) for i in rd.indices])
        # nested stages' region starts refer to loops inside x.loop: expand them fully
        region = []
        for d, n in enumerate(p.shape):
            parts = [_split_fixed(simplify(acc[d]), varying) for acc in accesses]
            if not parts or any(pt is None for pt in parts) or any(pt[0] != parts[0][0] for pt in parts):
                region.append((const(0), n))
                continue
            lo = min(pt[1] for pt in parts)
            hi = max(pt[2] for pt in parts)
            ext = hi - lo + 1
            if ext >= n:
                region.append((const(0), n))
            else:
                region.append((simplify(Binary(BinOp.ADD, parts[0][0], const(lo))), ext))
        return region

    # -------------------------------------------------------------------- emit
    def run(self, name: str | None) -> PrimFunc:
        for s in self.g.stages:
            self.layout(s)
        body = seq(*[self.emit_stage(s) for s in self.g.stages if s.attach.kind == "root"])
        for s in reversed(self.g.stages):
            lay = self.layouts[s.name]
            if lay.buffer.scope is Scope.GLOBAL and s.attach.kind == "root":
                body = Allocate(lay.buffer, body)
        outs = [self.g.name_of(t) for t in self.g.params if not t.is_placeholder]
        fname = name or outs[-1]
        return PrimFunc(fname, tuple(self.params[id(t)] for t in self.g.params), body)

    def emit_stage(self, s: Stage):
        lay = self.layout(s)
        self._check_annotations(s, lay)
        saved = dict(self.ranges)
        self.ranges.update({lay.vars[n]: (0, lay.extents[n] - 1) for n in s.leaf})
        self._simplifier = None
        try:
            return self._emit_stage(s, lay)
        finally:
            self.ranges = saved

    def _emit_stage(self, s: Stage, lay: _Layout):
        gv = self.global_values(s)
        sub = {s.root_vars[r]: gv[r] for r in s.root}
        spatial = s.spatial_root
        out_idx = tuple(lay.rel[r] if lay.local else gv[r] for r in spatial)
        if not s.is_reduction:
            value = self.translate(_substitute(s.body, sub))
            return self.nest(s, lay, s.leaf, lay.conds, lambda: Store(lay.buffer, out_idx, value), True)
        red: Reduce = s.body
        src = self.translate(_substitute(red.source, sub))
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

    def nest(self, s: Stage, lay: _Layout, loops: list, conds: list, leaf_body, attach: bool,
             pass_pending: bool = False):
        """Loops ``loops`` of stage ``s`` around ``leaf_body``, guards placed as high as possible.

        Guards that only fail on edge tiles are *versioned*: at the outermost loop
        where the outer variables decide them for the whole inner nest, a guard-free
        copy runs full tiles and the guarded copy runs only the edge tiles.
        """
        def finish(pending):
            return leaf_body(pending) if pass_pending else self._guard(pending, leaf_body())

        def rec(i: int, pending: list):
            if i == len(loops):
                return finish(pending)
            name = loops[i]
            var, ext = lay.vars[name], lay.extents[name]
            if ext == 1:  # a single iteration: no loop, the variable is 0 everywhere
                inner = self._versioned(pending, lambda p: rec(i + 1, p))
                return self._attach(s, name, inner) if attach else inner
            self.bound.add(var)
            ready = [c for c in pending if free_vars(c[0]) <= self.bound]
            rest = [c for c in pending if not free_vars(c[0]) <= self.bound]
            inner = self._versioned(rest, lambda p: rec(i + 1, p))
            if attach:
                inner = self._attach(s, name, inner)
            inner = self._guard(ready, inner)
            self.bound.discard(var)
            return For(var, ext, s.annotation(name), inner)

        ready = [c for c in conds if free_vars(c[0]) <= self.bound]
        rest = [c for c in conds if not free_vars(c[0]) <= self.bound]
        out = self._versioned(rest, finish) if not loops else self._versioned(rest, lambda p: rec(0, p))
        return self._guard(ready, out)

    def _attach(self, s: Stage, loop: str, inner):
        for p in reversed(self.attached.get((s.name, loop), [])):
            inner = self._with_stage(p, inner)
        return inner

    def simplify(self, e: Expr) -> Expr:
        """``simplify(e, self.ranges)``, memoized across calls while the ranges stay the same."""
        if self._simplifier is None or self._simplifier.ranges is not self.ranges:
            self._simplifier = Simplifier(self.ranges)
        return self._simplifier.visit(e)

    def _versioned(self, pending: list, build):
        """``build(pending)``, split into a guard-free full-tile copy when the bound loops decide it."""
        if not pending or self.no_version:
            return build(pending)
        checks, dropped = [], []
        for c in pending:
            if not any(self.var_kind.get(v) in _TIGHT for v in free_vars(c[0]) - self.bound):
                continue  # a guard on serial loops is cheap; duplicating the nest is not
            whole = _for_all_inner(self.simplify(c[0]), self.bound, self.ranges)
            if whole is None:
                continue
            whole = self.simplify(whole)
            if whole in self.known:     # an enclosing version already checked it
                dropped.append(c)
                continue
            if isinstance(whole, Const):
                if whole.value:
                    dropped.append(c)
                continue
            checks.append(whole)
            dropped.append(c)
        if not checks:
            if dropped:
                return build([c for c in pending if c not in dropped])
            return build(pending)
        self.known.extend(checks)
        try:
            fast = build([c for c in pending if c not in dropped])
        finally:
            del self.known[len(self.known) - len(checks):]
        self.no_version += 1
        try:
            slow = build(pending)
        finally:
            self.no_version -= 1
        cond = checks[0]
        for c in checks[1:]:
            cond = Binary(BinOp.AND, cond, c)
        return IfThenElse(cond, fast, slow)

    def _with_stage(self, p: Stage, inner):
        lay = self.layout(p)
        code = self.emit_stage(p)
        if lay.buffer.scope is Scope.LOCAL:
            return Allocate(lay.buffer, seq(code, inner))
        return seq(code, inner)

    def _guard(self, conds: list, body):
        cond = None
        for c, _ in conds:
            c = self.simplify(c)
            if c in self.known:
                continue
            if isinstance(c, Const):
                if c.value:
                    continue
                return seq()  # provably empty
            cond = c if cond is None else Binary(BinOp.AND, cond, c)
        if cond is None:
            return body
        return IfThenElse(cond, body)

    def translate(self, e: Expr) -> Expr:
        """TE expression (already in loop variables) -> loop-IR expression."""
        def fn(n):
            if isinstance(n, TensorRead):
                idx = tuple(self.translate(i) for i in n.indices)
                pid = id(n.tensor)
                stage = self.g.stage_of(n.tensor)
                if stage is not None:
                    lay = self.layout(stage)
                    if lay.local:
                        idx = tuple(Binary(BinOp.SUB, i, m) for i, (m, _) in zip(idx, lay.region))
                    buf = lay.buffer
                else:
                    buf = self.params.get(pid)
                    if buf is None:
                        raise LoweringError("lower", f"tensor {n.tensor.name!r} is read but is not in the "
                                            "workload list")
                return Load(buf, tuple(self.simplify(i) for i in idx))
            return None
        return self.simplify(_rewrite(e, fn))

    def _check_annotations(self, s: Stage, lay: _Layout) -> None:
        unrolled = [n for n in s.leaf if s.annotation(n) is ForKind.UNROLLED and lay.extents[n] > 1]
        copies = math.prod(lay.extents[n] for n in unrolled)
        if len(unrolled) > 1 and copies > MAX_UNROLL:
            loops = " x ".join(f"{s.name}.{n}({lay.extents[n]})" for n in unrolled)
            raise LoweringError("unroll", f"nested unrolled loops {loops} copy the body {copies} times; expected "
                                f"at most {MAX_UNROLL} (unroll fewer or smaller loops)", stage=s.name,
                                loop=unrolled[-1])
        for pos, name in enumerate(s.leaf):
            kind = s.annotation(name)
            ext = lay.extents[name]
            if kind is ForKind.VECTORIZED:
                if pos != len(s.leaf) - 1:
                    raise LoweringError("vectorize", f"loop {s.name}.{name} must be the innermost loop of stage "
                                        f"{s.name}, but {s.name}.{s.leaf[-1]} is inside it", stage=s.name,
                                        loop=name)
                if self.attached.get((s.name, name)):
                    raise LoweringError("vectorize", f"loop {s.name}.{name} has stage "
                                        f"{self.attached[(s.name, name)][0].name} computed at it; a vectorized "
                                        "loop must contain only its own statement", stage=s.name, loop=name)
                if ext > MAX_VECTOR_LANES:
                    raise LoweringError("vectorize", f"loop {s.name}.{name} has extent {ext}; expected at most "
                                        f"{MAX_VECTOR_LANES} lanes (split it first)", stage=s.name, loop=name)
            if kind is ForKind.UNROLLED and ext > MAX_UNROLL:
                raise LoweringError("unroll", f"loop {s.name}.{name} has extent {ext}; expected at most "
                                    f"{MAX_UNROLL} (split it first)", stage=s.name, loop=name)


# ------------------------------------------------------------------ utilities

def _split_fixed(e: Expr, varying: dict):
    """Split ``e`` into (fixed Expr, lo, hi): the part of the outer loops and the range of the rest."""
    lin = affine(e)
    fixed, var_part = Affine(), Affine({}, lin.const)
    for t, c in lin.terms.items():
        fv = free_vars(t)
        if not fv & varying.keys():
            fixed.terms[t] = c
        elif fv <= varying.keys():
            var_part.terms[t] = c
        else:
            return None
    r = int_range(var_part.to_expr(), varying)
    if r is None:
        return None
    return (fixed.to_expr(), r[0], r[1])


def _for_all_inner(cond: Expr, bound: set, ranges: dict):
    """A condition on the ``bound`` variables implying ``cond`` for every value of the others.

    ``cond`` is a simplified ``terms < c`` or ``terms >= c``; the unbound part is replaced
    by its maximum (resp. minimum).  None when no such condition exists.
    """
    if not isinstance(cond, Binary) or cond.op not in (BinOp.LT, BinOp.GE):
        return None
    fv = free_vars(cond)
    if fv <= bound or not fv & bound:
        return None
    lin = affine(cond.a)
    outer, inner = Affine(), Affine()
    for t, k in lin.terms.items():
        tv = free_vars(t)
        if tv <= bound:
            outer.terms[t] = k
        elif not tv & bound:
            inner.terms[t] = k
        else:
            return None
    r = linear_range(inner, ranges)
    if r is None:
        return None
    outer.const = lin.const + (r[1] if cond.op is BinOp.LT else r[0])
    return Binary(cond.op, outer.to_expr(), cond.b)
