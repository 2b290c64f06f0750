"""Bound inference: for every stage, the region it computes, its loop extents and buffer.

:func:`infer_bounds` is a function of the stage graph alone and returns an
immutable :class:`Bounds`: for a root stage the region is the whole tensor; for a
stage attached with ``compute_at``, the part its consumers read inside the
attach loop.  From the region follow the extent of every loop, the value of
every root axis in terms of the leaf loop variables, the guards a partial tile
needs and the buffer the stage writes (the tensor's own, or a LOCAL buffer the
size of the region).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

from schedules.errors import LoweringError
from schedules.state import AttachKind, Split, Stage, StageGraph
from tensorir.te import AxisKind, Reduce, free_vars
from tensorir.te.expr import Binary, BinOp, Const, Expr, Var, const
from tensorir.tir.analysis import Affine, affine, int_range
from tensorir.tir.ir import Buffer, ForKind, Scope
from tensorir.tir.rewrite import substitute
from tensorir.tir.transform.simplify import simplify


@dataclass(frozen=True, eq=False)
class StageLayout:
    """Where and how much of one stage is computed (read-only)."""
    extents: MappingProxyType   # loop name -> int extent
    vars: MappingProxyType      # leaf loop name -> Var
    rel: MappingProxyType       # root loop name -> Expr of leaf vars (relative to region start)
    region: tuple               # per spatial dim: (min Expr, extent int)
    buffer: Buffer
    local: bool                 # buffer indexed relative to the region start
    conds: tuple                # (Expr, is_spatial) guards on leaf vars (and outer vars)
    order: tuple = ()           # a LOCAL buffer's dims in storage order (the tensor's dims permuted)

    def store_index(self, idx: tuple) -> tuple:
        """An index of the tensor's dims (region-relative) as an index of ``buffer``."""
        return tuple(idx[d] for d in self.order) if self.order else tuple(idx)


@dataclass(frozen=True, eq=False)
class Bounds:
    """The result of bound inference for a whole stage graph (read-only)."""
    graph: StageGraph
    params: MappingProxyType    # id(tensor) -> PARAM Buffer, for the workload's tensors
    layouts: MappingProxyType   # stage name -> StageLayout
    attached: MappingProxyType  # (stage, loop) -> tuple of the stages computed at that loop
    var_kind: MappingProxyType  # leaf loop Var -> ForKind, for every stage

    def layout(self, s: Stage) -> StageLayout:
        return self.layouts[s.name]

    def global_values(self, s: Stage) -> dict:
        """Root loop name -> absolute index Expr (spatial axes offset by the region start)."""
        return global_values(s, self.layouts[s.name])


def infer_bounds(graph: StageGraph) -> Bounds:
    """Bound inference for every stage of ``graph`` (raises LoweringError on a bad attachment)."""
    attached: dict = {}
    for s in graph.stages:
        if s.attach.kind is AttachKind.AT:
            target = graph.stage(s.attach.stage)
            if target is None or s.attach.loop not in target.leaf:
                raise LoweringError("compute_at", f"stage {s.name} is attached at {s.attach.stage}."
                                    f"{s.attach.loop}, which is not a loop of the current schedule",
                                    stage=s.name)
            attached.setdefault((s.attach.stage, s.attach.loop), []).append(s)
    params = {id(t): Buffer(graph.name_of(t), t.shape, t.dtype, Scope.PARAM) for t in graph.params}
    inference = _Inference(graph, params)
    for s in graph.stages:
        inference.layout(s)
    layouts = inference.layouts
    var_kind = {}
    for s in graph.stages:
        lay = layouts[s.name]
        var_kind.update({lay.vars[n]: s.annotation(n) for n in s.leaf})
    return Bounds(graph, MappingProxyType(params), MappingProxyType(dict(layouts)),
                  MappingProxyType({k: tuple(v) for k, v in attached.items()}), MappingProxyType(var_kind))


def global_values(s: Stage, lay: StageLayout) -> dict:
    """Root loop name -> absolute index Expr (spatial axes offset by the region start)."""
    out = dict(lay.rel)
    for d, r in enumerate(s.spatial_root):
        m = lay.region[d][0]
        if not (isinstance(m, Const) and m.value == 0):
            out[r] = Binary(BinOp.ADD, m, lay.rel[r])
    return out


def storage_order(s: Stage) -> tuple:
    """Dims of a LOCAL buffer in storage order: the dim of ``s``'s vectorized innermost loop last.

    A stage computed per tile and vectorized along a dim that is not its tensor's last (a
    convolution's output channels in NCHW) would otherwise read and write its accumulators with
    gathers and scatters, once per pass over the tile; stored with that dim innermost they are
    plain vector loads and stores.  ``()``: the tensor's own order.
    """
    if not s.leaf or s.annotation(s.leaf[-1]) is not ForKind.VECTORIZED:
        return ()
    name = s.leaf[-1]
    parents = {}
    for rel in s.relations:
        if isinstance(rel, Split):
            parents[rel.outer] = parents[rel.inner] = rel.parent
        else:
            return ()   # a fused loop runs over several dims
    while name in parents:
        name = parents[name]
    spatial = s.spatial_root
    if name not in spatial or spatial.index(name) == len(spatial) - 1:
        return ()
    d = spatial.index(name)
    return tuple(i for i in range(len(spatial)) if i != d) + (d,)


def nonnegative(e: Expr) -> bool:
    """A loop variable, or one divided (floor) or taken modulo by a positive constant: never negative."""
    if isinstance(e, Var):
        return True
    return isinstance(e, Binary) and e.op in (BinOp.FLOORDIV, BinOp.MOD) and isinstance(e.b, Const) \
        and e.b.value > 0 and nonnegative(e.a)


def split_fixed(e: Expr, varying: dict):
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


class _Inference:
    """Computes stage layouts on demand (a consumer's layout before its producer's region)."""

    def __init__(self, graph: StageGraph, params: dict):
        self.g = graph
        self.params = params
        self.layouts: dict = {}
        self.busy: set = set()

    def layout(self, s: Stage) -> StageLayout:
        got = self.layouts.get(s.name)
        if got is not None:
            return got
        if s.name in self.busy:
            raise LoweringError("compute_at", f"stage {s.name} is (indirectly) attached inside itself")
        self.busy.add(s.name)
        if s.attach.kind is AttachKind.AT:
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
        if s.attach.kind is AttachKind.AT:
            padded = self._overcompute(s, region) if pid not in self.params else set()
            for d, r in enumerate(spatial):
                if d in padded:   # the tile computes past the edge: only tiles that start inside run
                    conds.append((Binary(BinOp.LT, region[d][0], const(s.shape[d])), True))
                    continue
                g = Binary(BinOp.ADD, region[d][0], rel_vals[r])
                conds.append((Binary(BinOp.LT, g, const(s.shape[d])), True))
                conds.append((Binary(BinOp.GE, g, const(0)), True))
        order = ()
        if pid in self.params:
            buf, local = self.params[pid], False
        elif s.attach.kind is AttachKind.AT:
            order = storage_order(s)
            buf = Buffer(s.name, tuple(region[d][1] for d in (order or range(len(region)))), s.dtype, Scope.LOCAL)
            local = True
        else:
            buf, local = Buffer(s.name, s.shape, s.dtype, Scope.GLOBAL), False
        lay = StageLayout(MappingProxyType(extents), MappingProxyType(lvars), MappingProxyType(rel_vals),
                          tuple(region), buf, local, tuple(conds), tuple(order))
        self.busy.discard(s.name)
        self.layouts[s.name] = lay
        return lay

    def _overcompute(self, s: Stage, region: list) -> set:
        """Spatial dims along which attached stage ``s`` may compute its whole tile past the tensor's edge.

        ``s`` writes a local buffer of the tile's size, so computing the elements past the edge
        only costs their arithmetic, provided every read stays inside the tensor it reads: then
        an edge tile runs the same guard-free, vectorized code as a full one instead of its FMAs
        element by element (docs/decisions/015-edge-tiles-run-full-tile-code.md), and only its
        copy-out is guarded.  A read of a pack reads its zero padding there.
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
            if ext >= n or lin.const < 0 or any(c < 0 or not nonnegative(t) for t, c in lin.terms.items()):
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

    def _inside(self, y: Stage, x: Stage, loop: str) -> bool:
        """Is stage ``y`` computed within loop ``x.loop`` (y == x counts)?"""
        pos = x.leaf.index(loop)
        cur = y
        while True:
            if cur.name == x.name:
                return True
            if cur.attach.kind is not AttachKind.AT:
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
            gv = global_values(y, self.layout(y))
            sub = {y.root_vars[r]: gv[r] for r in y.root}
            for rd in y.reads():
                if rd.tensor is p.tensor:
                    accesses.append([substitute(i, sub) for i in rd.indices])
        # nested stages' region starts refer to loops inside x.loop: expand them fully
        region = []
        for d, n in enumerate(p.shape):
            parts = [split_fixed(simplify(acc[d]), varying) for acc in accesses]
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
