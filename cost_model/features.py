"""Ansor-style features of a lowered loop nest, pooled into one fixed-length vector.

For every :class:`~tensorir.ir.Store` we build a vector from its enclosing loops
(after TVM Ansor's ``src/auto_scheduler/feature.cc``, simplified to this IR):

* **compute**: executions (product of enclosing extents) and per-execution counts
  of float add/sub, mul, div, special functions (exp, log, ...), compares,
  integer add/sub, mul, div/mod, compares, boolean ops, selects, casts, loads;
* **loop structure**: loop count, innermost extent, vector lanes, unrolling,
  parallel extent and its share of the loops around it, guards;
* **buffer accesses**: one slot for the stored buffer and one per read buffer
  (the heaviest ``N_READ_SLOTS`` by cache lines, then bytes): bytes touched,
  unique bytes, cache lines, unique lines, reuse ratio, innermost stride
  (value and a 0 / 1 / other one-hot), reuse distance in iterations and bytes
  and the reuse count of the loop carrying the reuse;
* **cache footprint**: bytes the innermost loop touches, estimated memory
  traffic for an L1- and an L2-sized cache and the matching arithmetic
  intensities;
* **allocation**: size of the stored buffer's allocation and how often it runs.

Index analysis flattens nothing symbolic: each index dimension is linearised
into integer coefficients of the loop variables when possible; otherwise
(``//``, ``%``, ``select``, ``min``/``max``, indirect loads) interval arithmetic
bounds it conservatively.  The region an access touches inside loop level ``i``
is the per-dimension bounding box with loops ``i..n-1`` free and outer loops
fixed, capped by the buffer shape.  The stride of a loop is the coefficient of
its variable in the row-major flattened offset (a finite difference when the
index is nonlinear in it).

Per-store vectors are log-transformed where count-like (``log2(1 + x)``) and
pooled by an execution-weighted mean plus an element-wise max; a few
function-level totals (allocations, store and loop counts, total flops and
traffic) are appended.
"""
from __future__ import annotations

import math

import numpy as np

from tensorir.expr import FLOAT_DTYPES, Binary, BinOp, Cast, Const, Select, Unary, UnOp, Var, children
from tensorir.ir import Allocate, For, ForKind, IfThenElse, Load, PrimFunc, Scope, Seq, Store, stmt_children

FEATURE_VERSION = 1
CACHE_LINE_BYTES = 64
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
    ("num_guards", False), ("guard_checks", True), ("guard_in_innermost", False),
]
_ACCESS = [
    ("present", False), ("scope_local", False), ("scope_global", False), ("bytes", True),
    ("unique_bytes", True), ("lines", True), ("unique_lines", True), ("reuse_ratio", True),
    ("stride", True), ("stride_is_0", False), ("stride_is_1", False), ("stride_other", False),
    ("has_loop_reuse", False), ("reuse_dis_iter", True), ("reuse_dis_bytes", True), ("reuse_ct", True),
]
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
_GLOBAL_LOG = np.array([n not in ("max_depth",) for n in GLOBAL_NAMES], dtype=bool)

FEATURE_NAMES = ([f"mean.{n}" for n in PER_STORE_NAMES] + [f"max.{n}" for n in PER_STORE_NAMES]
                 + [f"func.{n}" for n in GLOBAL_NAMES])
N_FEATURES = len(FEATURE_NAMES)

# op-count slots
_FADD, _FMUL, _FDIV, _FSPECIAL, _FCMP, _IADD, _IMUL, _IDIV, _ICMP, _BOOL, _SEL, _CAST = range(12)
_CMP_OPS = {BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE, BinOp.MIN, BinOp.MAX}
_FLOAT_SLOT = {BinOp.ADD: _FADD, BinOp.SUB: _FADD, BinOp.MUL: _FMUL, BinOp.DIV: _FDIV}
_INT_SLOT = {BinOp.ADD: _IADD, BinOp.SUB: _IADD, BinOp.MUL: _IMUL, BinOp.FLOORDIV: _IDIV, BinOp.MOD: _IDIV}


def _dtype_bytes(dtype: str) -> int:
    return 8 if dtype == "float64" else 1 if dtype == "bool" else 4


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


def _linearize(e, loop_pos: dict):
    """``({loop position: coefficient}, constant)`` if ``e`` is affine in loop vars, else None."""
    t = type(e)
    if t is Var:
        j = loop_pos.get(e.name)
        return ({j: 1}, 0) if j is not None else ({}, 0)
    if t is Const:
        return ({}, int(e.value)) if e.dtype in ("int32", "bool") else None
    if t is Binary:
        op = e.op
        if op is BinOp.ADD or op is BinOp.SUB:
            a, b = _linearize(e.a, loop_pos), _linearize(e.b, loop_pos)
            if a is None or b is None:
                return None
            sign = 1 if op is BinOp.ADD else -1
            coef = dict(a[0])
            for j, c in b[0].items():
                coef[j] = coef.get(j, 0) + sign * c
            return coef, a[1] + sign * b[1]
        if op is BinOp.MUL:
            a, b = _linearize(e.a, loop_pos), _linearize(e.b, loop_pos)
            if a is None or b is None:
                return None
            if a[0] and b[0]:
                return None
            if b[0]:
                a, b = b, a
            k = b[1]
            return {j: c * k for j, c in a[0].items()}, a[1] * k
        return None
    if t is Cast and e.to == "int32" and e.a.dtype in ("int32", "bool"):
        return _linearize(e.a, loop_pos)
    return None


def _interval(e, rng: dict):
    """Bounds ``(lo, hi)`` of integer ``e`` with loop vars in ``rng`` (others fixed at 0); None if unknown."""
    t = type(e)
    if t is Var:
        return rng.get(e.name, (0, 0))
    if t is Const:
        return (int(e.value), int(e.value)) if e.dtype in ("int32", "bool") else None
    if t is Cast:
        return _interval(e.a, rng) if e.a.dtype in ("int32", "bool") else None
    if t is Select:
        a, b = _interval(e.t, rng), _interval(e.f, rng)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if t is not Binary:
        return None
    op = e.op
    if op in (BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE, BinOp.AND, BinOp.OR):
        return (0, 1)
    a, b = _interval(e.a, rng), _interval(e.b, rng)
    if a is None or b is None:
        return None
    if op is BinOp.ADD:
        return a[0] + b[0], a[1] + b[1]
    if op is BinOp.SUB:
        return a[0] - b[1], a[1] - b[0]
    if op is BinOp.MUL:
        p = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return min(p), max(p)
    if op is BinOp.MIN:
        return min(a[0], b[0]), min(a[1], b[1])
    if op is BinOp.MAX:
        return max(a[0], b[0]), max(a[1], b[1])
    if b[0] != b[1] or b[0] <= 0:
        return None
    c = b[0]
    if op is BinOp.FLOORDIV:
        return a[0] // c, a[1] // c
    if op is BinOp.MOD:
        if a[1] - a[0] + 1 >= c or a[0] // c != a[1] // c:
            return 0, c - 1
        return a[0] % c, a[1] % c
    return None


def _evaluate(e, env: dict) -> int:
    """Integer value of ``e`` with loop vars from ``env`` (others 0); 0 when undefined."""
    iv = _interval(e, {k: (v, v) for k, v in env.items()})
    return 0 if iv is None else iv[0]


def _loop_vars_in(e, loop_pos: dict) -> set:
    out, stack = set(), [e]
    while stack:
        n = stack.pop()
        if type(n) is Var:
            j = loop_pos.get(n.name)
            if j is not None:
                out.add(j)
        else:
            stack.extend(children(n))
    return out


# ------------------------------------------------------------------ buffer accesses

class _BufferAccess:
    """All accesses of one buffer by one store, analysed against its loop nest."""

    def __init__(self, buffer, index_lists, n_writes, names, ext, loop_pos):
        self.buffer = buffer
        self.n_access = len(index_lists)
        self.n_writes = n_writes
        self.elem_bytes = _dtype_bytes(buffer.dtype)
        n, shape = len(ext), np.array(buffer.shape, dtype=np.int64).reshape(-1)
        n_dim, n_acc = len(shape), len(index_lists)
        coef = np.zeros((n_acc, n_dim, n), dtype=np.int64)
        const = np.zeros((n_acc, n_dim), dtype=np.int64)
        nonlinear = []
        for a, indices in enumerate(index_lists):
            for d, idx in enumerate(indices[:n_dim]):
                lin = _linearize(idx, loop_pos)
                if lin is None:
                    nonlinear.append((a, d, idx, _loop_vars_in(idx, loop_pos)))
                    continue
                for j, c in lin[0].items():
                    coef[a, d, j] = c
                const[a, d] = lin[1]
        # per-level bounds: level i frees loops i..n-1 (level n: a single iteration)
        span = coef * (ext - 1)
        zero = np.zeros((n_acc, n_dim, 1), dtype=np.int64)
        lo_suf = np.concatenate([np.cumsum(np.minimum(span, 0)[..., ::-1], axis=-1)[..., ::-1], zero], axis=-1)
        hi_suf = np.concatenate([np.cumsum(np.maximum(span, 0)[..., ::-1], axis=-1)[..., ::-1], zero], axis=-1)
        lo = const[..., None] + lo_suf
        hi = const[..., None] + hi_suf
        depends = coef != 0                                    # (acc, dim, loop)
        for a, d, idx, deps in nonlinear:
            for i in range(n + 1):
                iv = _interval(idx, {names[j]: (0, int(ext[j]) - 1) for j in range(i, n)})
                lo[a, d, i], hi[a, d, i] = (0, shape[d] - 1) if iv is None else iv
            depends[a, d, list(deps)] = True
        if n_dim:
            extent = np.clip(hi.max(axis=0) - lo.min(axis=0) + 1, 1, shape[:, None])
            self.region = extent[:, 0]                         # whole-nest box per dim
            self.elements = np.prod(extent.astype(np.float64), axis=0)  # (n+1,)
        else:
            self.region = np.ones(0, dtype=np.int64)
            self.elements = np.ones(n + 1)
        self.elements = np.minimum(self.elements, float(max(1, buffer.size)))
        # strides of each loop in the row-major flattened offset
        row = np.ones(n_dim, dtype=np.int64)
        for d in range(n_dim - 2, -1, -1):
            row[d] = row[d + 1] * shape[d + 1]
        stride = np.abs(np.einsum("adj,d->aj", coef, row)) if n_dim else np.zeros((n_acc, n), np.int64)
        for a, d, _idx, deps in nonlinear:
            for j in deps:
                off0 = off1 = 0
                for dd, idx in enumerate(index_lists[a][:n_dim]):
                    off0 += _evaluate(idx, {}) * row[dd]
                    off1 += _evaluate(idx, {names[j]: 1}) * row[dd]
                stride[a, j] = abs(off1 - off0)
        dep_loop = depends.any(axis=1)                         # (acc, loop)
        self.depends = dep_loop.any(axis=0)                     # (loop,)
        big = np.iinfo(np.int64).max
        self.stride = np.where(dep_loop, stride, big).min(axis=0) if n_acc else np.zeros(n, np.int64)
        self.stride = np.where(self.stride == big, 0, self.stride)


def _access_features(acc: _BufferAccess, ext, outer_prod, footprint) -> list:
    """The ``_ACCESS`` fields of one buffer slot."""
    n, eb = len(ext), acc.elem_bytes
    bytes_ = outer_prod * eb * acc.n_access
    unique = float(acc.elements[0]) * eb
    # cache lines: skip inner loops the access ignores, then count line changes
    reduce_ratio, lines = 1.0, 1.0
    for j in range(n - 1, -1, -1):
        s = acc.stride[j]
        if s == 0:
            reduce_ratio *= ext[j]
            continue
        lines = outer_prod / reduce_ratio * min(1.0, s * eb / CACHE_LINE_BYTES)
        break
    lines = max(lines, 1.0) * acc.n_access
    contiguous = eb
    for d in range(len(acc.region) - 1, -1, -1):
        contiguous *= int(acc.region[d])
        if acc.region[d] < acc.buffer.shape[d]:
            break
    unique_lines = max(1.0, unique / min(contiguous, CACHE_LINE_BYTES))
    inner_stride = int(acc.stride[-1]) if n else 0
    # reuse carried by the innermost loop the access does not depend on
    reuse = [0.0, 0.0, 0.0, 0.0]
    dis_iter = 1.0
    for j in range(n - 1, -1, -1):
        if not acc.depends[j]:
            reuse = [1.0, dis_iter, footprint[j + 1], float(ext[j])]
            break
        dis_iter *= ext[j]
    scope = acc.buffer.scope
    return [1.0, float(scope is Scope.LOCAL), float(scope is Scope.GLOBAL), bytes_, unique, lines,
            unique_lines, bytes_ / max(unique, 1.0), float(inner_stride), float(inner_stride == 0),
            float(inner_stride == 1), float(inner_stride > 1)] + reuse


# ------------------------------------------------------------------ per store

def _store_features(store: Store, loops: list, guards: list, allocs: dict):
    """Per-store raw features plus (executions, float ops, L2 traffic, bytes) totals."""
    names = [v for v, _, _ in loops]
    ext = np.array([e for _, e, _ in loops], dtype=np.int64)
    kinds = [k for _, _, k in loops]
    n = len(loops)
    loop_pos = {v: j for j, v in enumerate(names)}
    outer = np.concatenate([[1.0], np.cumprod(ext.astype(np.float64))])   # outer[j] = prod ext[:j]
    outer_prod = float(outer[-1])
    f = np.zeros(len(PER_STORE_NAMES))

    counts, loads = [0] * 12, []
    _count_ops((store.value,) + tuple(store.indices), counts, loads)
    flops = counts[_FADD] + counts[_FMUL] + counts[_FDIV] + counts[_FSPECIAL] + counts[_FCMP]
    f[:16] = [outer_prod] + counts + [len(loads), flops * outer_prod,
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
        len(guards), sum(outer[g] for g in guards), float(any(g == n for g in guards)),
    ]

    # group accesses per buffer: the stored buffer first, reads in order of appearance
    index_lists = {store.buffer: [store.indices]}
    for ld in reversed(loads):
        index_lists.setdefault(ld.buffer, []).append(ld.indices)
    accesses = [_BufferAccess(b, idx, int(b == store.buffer), names, ext, loop_pos)
                for b, idx in index_lists.items()]
    footprint = sum(a.elements * a.elem_bytes for a in accesses)   # bytes touched per level (n+1,)

    feats = [_access_features(a, ext, outer_prod, footprint) for a in accesses]
    reads = sorted(range(1, len(accesses)), key=lambda k: (-feats[k][5], -feats[k][3], accesses[k].buffer.name))
    base = _IDX["write.present"]
    for slot, k in enumerate([0] + reads[:N_READ_SLOTS]):
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
    total_bytes = sum(feats[k][3] for k in range(len(accesses)))
    return f, outer_prod, total_flops, traffic[1], total_bytes


# ------------------------------------------------------------------ whole function

def _walk(stmt, loops, guards, allocs, outer_prod, out, alloc_log):
    t = type(stmt)
    if t is Store:
        out.append(_store_features(stmt, loops, guards, allocs))
    elif t is For:
        loops.append((stmt.var.name, stmt.extent, stmt.kind))
        _walk(stmt.body, loops, guards, allocs, outer_prod * stmt.extent, out, alloc_log)
        loops.pop()
    elif t is Seq:
        for s in stmt.stmts:
            _walk(s, loops, guards, allocs, outer_prod, out, alloc_log)
    elif t is IfThenElse:
        guards.append(len(loops))
        _walk(stmt.then, loops, guards, allocs, outer_prod, out, alloc_log)
        if stmt.otherwise is not None:
            _walk(stmt.otherwise, loops, guards, allocs, outer_prod, out, alloc_log)
        guards.pop()
    elif t is Allocate:
        previous = allocs.get(stmt.buffer)
        allocs[stmt.buffer] = float(outer_prod)
        alloc_log.append(stmt.buffer)
        _walk(stmt.body, loops, guards, allocs, outer_prod, out, alloc_log)
        if previous is None:
            del allocs[stmt.buffer]
        else:
            allocs[stmt.buffer] = previous
    else:
        for s in stmt_children(stmt):
            _walk(s, loops, guards, allocs, outer_prod, out, alloc_log)


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
    stores, alloc_log = [], []
    _walk(func.body, [], [], {}, 1, stores, alloc_log)
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
