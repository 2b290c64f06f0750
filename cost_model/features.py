"""Ansor-style features of a lowered loop nest, pooled into one fixed-length vector.

For every :class:`~tensorir.tir.ir.Store` we build a vector from its enclosing loops
(after TVM Ansor's ``src/auto_scheduler/feature.cc``, simplified to this IR):

* **compute**: executions (product of enclosing extents) and per-execution counts
  of float add/sub, mul, div, special functions (exp, log, ...), compares,
  integer add/sub, mul, div/mod, compares, boolean ops, selects, casts, loads;
* **loop structure**: loop count, innermost extent, vector lanes, unrolling,
  parallel extent and its share of the loops around it, guards and the
  fraction of loop iterations that pass them (evaluated on the grid of the
  guarded loops, so a tail branch of a non-dividing split counts as rarely
  as it runs; executions and bytes are scaled by it);
* **buffer accesses**: one slot for the stored buffer and one per read buffer
  (the heaviest ``N_READ_SLOTS`` by cache lines, then bytes): bytes touched,
  unique bytes, cache lines, unique lines, reuse ratio, innermost stride
  (value and a 0 / 1 / other one-hot), reuse distance in iterations and bytes
  and the reuse count of the loop carrying the reuse;
* **cache footprint**: bytes the innermost loop touches, estimated memory
  traffic for an L1- and an L2-sized cache and the matching arithmetic
  intensities;
* **allocation**: size of the stored buffer's allocation and how often it runs.

Index analysis (affine coefficients, interval bounds, strides, reuse) lives
in :mod:`cost_model.access`.

Per-store vectors are log-transformed where count-like (``log2(1 + x)``) and
pooled by an execution-weighted mean plus an element-wise max; a few
function-level totals (allocations, store and loop counts, total flops and
traffic) are appended.
"""
from __future__ import annotations

import math

import numpy as np

from tensorir.te.expr import FLOAT_DTYPES, Binary, BinOp, Cast, Const, Select, Unary, UnOp, Var, children
from tensorir.tir.ir import Allocate, For, ForKind, IfThenElse, Load, PrimFunc, Scope, Seq, Store, stmt_children

from .access import ACCESS_FIELDS, BufferAccess, access_features, guard_reach

FEATURE_VERSION = 1
L1_BYTES = 32 * 1024
L2_BYTES = 1024 * 1024
N_READ_SLOTS = 3

# (name, log-transform?) for the per-store vector, in order.
_COMPUTE = [
    ("exec_count", True), ("float_addsub", True), ("float_mul", True), ("float_div", True),
    ("float_special", True), ("float_cmp", True), ("int_addsub", True), ("int_mul", True),
    ("int_divmod", True), ("int_cmp", True), ("bool_op", True), ("select_op", True),
    ("cast_op", True), ("num_loads", True), ("total_float_ops", True), ("is_update", False),
]
_LOOPS = [
    ("num_loops", False), ("innermost_extent", True), ("vec_lanes", True), ("innermost_vectorized", False),
    ("vec_num", False), ("vec_prod", True), ("unroll_num", False), ("unroll_prod", True),
    ("innermost_unrolled", False), ("unroll_len", True), ("parallel_num", False), ("parallel_prod", True),
    ("parallel_share", False), ("parallel_forks", True), ("work_per_parallel_iter", True),
    ("num_guards", False), ("guard_checks", True), ("guard_in_innermost", False), ("guard_reach", False),
]
_ACCESS = ACCESS_FIELDS
_ACC_IDX = {n: i for i, (n, _) in enumerate(ACCESS_FIELDS)}
_FOOTPRINT = [
    ("footprint_inner", True), ("traffic_l1", True), ("traffic_l2", True),
    ("ai_inner", True), ("ai_l1", True), ("ai_l2", True), ("alloc_bytes", True), ("alloc_execs", True),
]
_SLOTS = ["write"] + [f"read{i}" for i in range(N_READ_SLOTS)]
_PER_STORE = (_COMPUTE + _LOOPS
              + [(f"{s}.{n}", lg) for s in _SLOTS for n, lg in _ACCESS]
              + _FOOTPRINT)
PER_STORE_NAMES = [n for n, _ in _PER_STORE]
_PER_STORE_LOG = np.array([lg for _, lg in _PER_STORE], dtype=bool)
_IDX = {n: i for i, n in enumerate(PER_STORE_NAMES)}

GLOBAL_NAMES = [
    "n_stores", "n_loops", "max_depth", "total_float_ops", "total_execs", "total_bytes",
    "total_traffic_l2", "param_bytes", "local_alloc_bytes", "global_alloc_bytes",
    "max_local_alloc_bytes", "n_local_allocs", "n_global_allocs",
]
_GLOBAL_LOG = np.array([n not in ("n_stores", "max_depth", "n_local_allocs", "n_global_allocs")
                        for n in GLOBAL_NAMES], dtype=bool)

FEATURE_NAMES = ([f"mean.{n}" for n in PER_STORE_NAMES] + [f"max.{n}" for n in PER_STORE_NAMES]
                 + [f"func.{n}" for n in GLOBAL_NAMES])
N_FEATURES = len(FEATURE_NAMES)

# op-count slots
_FADD, _FMUL, _FDIV, _FSPECIAL, _FCMP, _IADD, _IMUL, _IDIV, _ICMP, _BOOL, _SEL, _CAST = range(12)
_CMP_OPS = {BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE, BinOp.MIN, BinOp.MAX}
_FLOAT_SLOT = {BinOp.ADD: _FADD, BinOp.SUB: _FADD, BinOp.MUL: _FMUL, BinOp.DIV: _FDIV}
_INT_SLOT = {BinOp.ADD: _IADD, BinOp.SUB: _IADD, BinOp.MUL: _IMUL, BinOp.FLOORDIV: _IDIV, BinOp.MOD: _IDIV}


def _log2p(x: np.ndarray) -> np.ndarray:
    return np.log2(1.0 + np.maximum(x, 0.0))


# ------------------------------------------------------------------ expressions

def _count_ops(roots, counts: list, loads: list) -> None:
    """Add the operations of the expressions ``roots`` to ``counts``; collect Loads."""
    stack = list(roots)
    while stack:
        e = stack.pop()
        t = type(e)
        if t is Binary:
            op = e.op
            if op is BinOp.AND or op is BinOp.OR:
                counts[_BOOL] += 1
            else:
                is_float = e.a.dtype in FLOAT_DTYPES
                if op in _CMP_OPS:
                    counts[_FCMP if is_float else _ICMP] += 1
                else:
                    counts[(_FLOAT_SLOT if is_float else _INT_SLOT).get(op, _FADD if is_float else _IADD)] += 1
            stack.append(e.a)
            stack.append(e.b)
        elif t is Load:
            loads.append(e)
            stack.extend(e.indices)
        elif t is Unary:
            if e.op is UnOp.NOT:
                counts[_BOOL] += 1
            elif e.op is UnOp.ABS:   # a sign-bit mask or compare-and-negate: cheap
                counts[_FCMP if e.a.dtype in FLOAT_DTYPES else _ICMP] += 1
            else:
                counts[_FSPECIAL] += 1
            stack.append(e.a)
        elif t is Select:
            counts[_SEL] += 1
            stack.extend((e.cond, e.t, e.f))
        elif t is Cast:
            counts[_CAST] += 1
            stack.append(e.a)
        elif t is not Var and t is not Const:
            stack.extend(children(e))


# ------------------------------------------------------------------ per store

def _store_features(store: Store, loops: list, guards: list, allocs: dict):
    """Raw features of one store, its (executions, float ops, L2 traffic, bytes) and slot buffers."""
    names = [v for v, _, _ in loops]
    ext = np.array([e for _, e, _ in loops], dtype=np.int64)
    kinds = [k for _, _, k in loops]
    n = len(loops)
    loop_pos = {v: j for j, v in enumerate(names)}
    outer = np.concatenate([[1.0], np.cumprod(ext.astype(np.float64))])   # outer[j] = prod ext[:j]
    reach = guards[-1][1] if guards else 1.0       # fraction of the iterations that pass every guard
    outer_prod = float(outer[-1]) * reach            # executions
    f = np.zeros(len(PER_STORE_NAMES))

    counts, loads = [0] * 12, []
    _count_ops((store.value,) + tuple(store.indices), counts, loads)
    flops = counts[_FADD] + counts[_FMUL] + counts[_FDIV] + counts[_FSPECIAL] + counts[_FCMP]
    f[:len(_COMPUTE)] = [outer_prod] + counts + [len(loads), flops * outer_prod,
                                      float(any(ld.buffer == store.buffer and ld.indices == store.indices
                                                for ld in loads))]

    vec = [j for j in range(n) if kinds[j] is ForKind.VECTORIZED]
    unr = [j for j in range(n) if kinds[j] is ForKind.UNROLLED]
    par = [j for j in range(n) if kinds[j] is ForKind.PARALLEL]
    par_prod = float(np.prod(ext[par].astype(np.float64))) if par else 0.0
    i = _IDX["num_loops"]
    f[i:i + len(_LOOPS)] = [
        n, ext[-1] if n else 0, ext[vec[-1]] if vec else 0, float(n > 0 and kinds[-1] is ForKind.VECTORIZED),
        len(vec), np.prod(ext[vec].astype(np.float64)) if vec else 0,
        len(unr), np.prod(ext[unr].astype(np.float64)) if unr else 0,
        float(n > 0 and kinds[-1] is ForKind.UNROLLED), ext[unr[-1]] if unr else 0,
        len(par), par_prod, par_prod / max(outer[par[-1] + 1], 1.0) if par else 0.0,
        outer[par[0]] if par else 0.0, outer_prod / par_prod if par_prod > 0 else outer_prod,
        len(guards), sum(outer[g] for g, _ in guards), float(any(g == n for g, _ in guards)), reach,
    ]

    # group accesses per buffer: the stored buffer first, reads in order of appearance
    index_lists = {store.buffer: [store.indices]}
    for ld in reversed(loads):
        index_lists.setdefault(ld.buffer, []).append(ld.indices)
    accesses = [BufferAccess(b, idx, names, ext, loop_pos)
                for b, idx in index_lists.items()]
    footprint = [sum(a.elements[i] * a.elem_bytes for a in accesses) for i in range(n + 1)]  # bytes per level

    feats = [access_features(a, ext, outer_prod, footprint) for a in accesses]
    lines, nbytes = _ACC_IDX["lines"], _ACC_IDX["bytes"]
    reads = sorted(range(1, len(accesses)),
                   key=lambda k: (-feats[k][lines], -feats[k][nbytes], accesses[k].buffer.name))
    base = _IDX["write.present"]
    slots = [0] + reads[:N_READ_SLOTS]
    for slot, k in enumerate(slots):
        f[base + slot * len(_ACCESS): base + (slot + 1) * len(_ACCESS)] = feats[k]

    traffic = []
    for cap in (L1_BYTES, L2_BYTES):
        level = next((lv for lv in range(n + 1) if footprint[lv] <= cap), n)
        traffic.append(float(footprint[level] * outer[level]))
    inner_flops = flops * (ext[-1] if n else 1)
    fp_inner = float(footprint[n - 1] if n else footprint[0])
    alloc = allocs.get(store.buffer)
    total_flops = flops * outer_prod
    i = _IDX["footprint_inner"]
    f[i:i + len(_FOOTPRINT)] = [
        fp_inner, traffic[0], traffic[1], inner_flops / fp_inner,
        total_flops / max(traffic[0], 1.0), total_flops / max(traffic[1], 1.0),
        store.buffer.nbytes if alloc is not None else 0.0, alloc if alloc is not None else 0.0,
    ]
    total_bytes = sum(row[nbytes] for row in feats)
    return f, outer_prod, total_flops, traffic[1], total_bytes, [accesses[k].buffer.name for k in slots]


# ------------------------------------------------------------------ whole function

class _Walker:
    """Collects per-store features in program order with the loops, guards and allocations around them."""

    def __init__(self):
        self.loops = []        # (var name, extent, kind), outermost first
        self.guards = []       # (loop depth, fraction of iterations reaching inside) per enclosing guard
        self.conds = []        # (condition, branch taken) per enclosing guard
        self.memo = {}         # guard_reach cache for this loop nest
        self.allocs = {}       # buffer -> executions of its Allocate
        self.alloc_log = []    # every allocated buffer
        self.stores = []

    def visit(self, stmt, outer_prod=1):
        t = type(stmt)
        if t is Store:
            self.stores.append(_store_features(stmt, self.loops, self.guards, self.allocs))
        elif t is For:
            self.loops.append((stmt.var.name, stmt.extent, stmt.kind))
            self.visit(stmt.body, outer_prod * stmt.extent)
            self.loops.pop()
        elif t is Seq:
            for s in stmt.stmts:
                self.visit(s, outer_prod)
        elif t is IfThenElse:
            names = [v for v, _, _ in self.loops]
            ext = [e for _, e, _ in self.loops]
            loop_pos = {v: j for j, v in enumerate(names)}
            for branch, taken in ((stmt.then, True), (stmt.otherwise, False)):
                if branch is None:
                    continue
                self.conds.append((stmt.cond, taken))
                reach = guard_reach(self.conds, names, ext, loop_pos, self.memo)
                self.guards.append((len(self.loops), reach))
                self.visit(branch, outer_prod)
                self.guards.pop()
                self.conds.pop()
        elif t is Allocate:
            previous = self.allocs.get(stmt.buffer)
            self.allocs[stmt.buffer] = float(outer_prod)
            self.alloc_log.append(stmt.buffer)
            self.visit(stmt.body, outer_prod)
            if previous is None:
                del self.allocs[stmt.buffer]
            else:
                self.allocs[stmt.buffer] = previous
        else:
            for s in stmt_children(stmt):
                self.visit(s, outer_prod)


def _loop_stats(stmt, depth=0):
    """(number of loops, maximum loop depth) of a statement tree."""
    if type(stmt) is For:
        count, deepest = _loop_stats(stmt.body, depth + 1)
        return count + 1, deepest
    count, deepest = 0, depth
    for s in stmt_children(stmt):
        c, d = _loop_stats(s, depth)
        count, deepest = count + c, max(deepest, d)
    return count, deepest


def extract_features(func: PrimFunc) -> np.ndarray:
    """Fixed-length feature vector of a lowered loop nest.

    Parameters
    ----------
    func : PrimFunc
        The lowered kernel.  Only its structure is read; the result is a pure
        function of it.

    Returns
    -------
    numpy.ndarray
        ``float32`` array of length :data:`N_FEATURES` (names in
        :data:`FEATURE_NAMES`): the execution-weighted mean of the per-store
        vectors, their element-wise max, then function-level totals.  Count-like
        values are ``log2(1 + x)``; the vector is finite.

    Examples
    --------
    >>> v = extract_features(func)            # doctest: +SKIP
    >>> v.shape == (N_FEATURES,)              # doctest: +SKIP
    True
    """
    walker = _Walker()
    walker.visit(func.body)
    stores, alloc_log = walker.stores, walker.alloc_log
    n_per = len(PER_STORE_NAMES)
    if stores:
        raw = np.stack([s[0] for s in stores])
        execs = np.array([s[1] for s in stores])
        per = np.where(_PER_STORE_LOG, _log2p(raw), raw)
        weights = execs / execs.sum() if execs.sum() > 0 else np.full(len(stores), 1.0 / len(stores))
        pooled = np.concatenate([weights @ per, per.max(axis=0)])
    else:
        execs = np.zeros(0)
        pooled = np.zeros(2 * n_per)
    n_loops, depth = _loop_stats(func.body)
    local = [b.nbytes for b in alloc_log if b.scope is Scope.LOCAL]
    glob = [b.nbytes for b in alloc_log if b.scope is not Scope.LOCAL]
    g = np.array([
        len(stores), n_loops, depth, sum(s[2] for s in stores), execs.sum(),
        sum(s[4] for s in stores),
        sum(s[3] for s in stores), sum(b.nbytes for b in func.params), sum(local), sum(glob),
        max(local, default=0), len(local), len(glob),
    ], dtype=np.float64)
    g = np.where(_GLOBAL_LOG, _log2p(g), g)
    out = np.concatenate([pooled, g]).astype(np.float32)
    return np.nan_to_num(out, nan=0.0, posinf=math.log2(np.finfo(np.float32).max), neginf=0.0)


def store_features(func: PrimFunc) -> list:
    """Raw (not log-transformed, not pooled) features of every Store, for inspection.

    Parameters
    ----------
    func : PrimFunc
        The lowered kernel.

    Returns
    -------
    list of dict
        One ``{name: value}`` dict per Store in program order, keys
        :data:`PER_STORE_NAMES` plus ``"<slot>.buffer"`` (the name of the
        buffer in each filled access slot: ``write``, ``read0``, ...).
    """
    walker = _Walker()
    walker.visit(func.body)
    out = []
    for f, *_, slot_buffers in walker.stores:
        row = {n: float(v) for n, v in zip(PER_STORE_NAMES, f)}
        row.update({f"{_SLOTS[i]}.buffer": name for i, name in enumerate(slot_buffers)})
        out.append(row)
    return out


def extract_features_batch(funcs) -> np.ndarray:
    """Stack :func:`extract_features` of several kernels into an ``(n, N_FEATURES)`` array.

    Parameters
    ----------
    funcs : iterable of PrimFunc
        Lowered kernels.

    Returns
    -------
    numpy.ndarray
        ``float32`` matrix, one row per kernel (shape ``(0, N_FEATURES)`` when empty).
    """
    rows = [extract_features(fn) for fn in funcs]
    return np.stack(rows) if rows else np.zeros((0, N_FEATURES), dtype=np.float32)
