"""Index and buffer-access analysis of one Store against its enclosing loops.

Each index dimension is linearised into integer coefficients of the loop
variables when possible; otherwise (``//``, ``%``, ``select``, ``min``/``max``,
indirect loads) interval arithmetic bounds it conservatively.  The region an
access touches inside loop level ``i`` is the per-dimension bounding box with
loops ``i..n-1`` free and the outer loops fixed, capped by the buffer shape.
The stride of a loop is the coefficient of its variable in the row-major
flattened offset (a finite difference when the index is nonlinear in it).
"""
from __future__ import annotations

import numpy as np

from tensorir.te.expr import Binary, BinOp, Cast, Const, Select, Unary, UnOp, Var, children, itemsize
from tensorir.tir.analysis.affine import affine
from tensorir.tir.ir import Scope

CACHE_LINE_BYTES = 64

# (name, log-transform?) of the values access_features returns, in order.
ACCESS_FIELDS = [
    ("present", False), ("scope_local", False), ("scope_global", False), ("bytes", True),
    ("unique_bytes", True), ("lines", True), ("unique_lines", True), ("reuse_ratio", True),
    ("stride", True), ("stride_is_0", False), ("stride_is_1", False), ("stride_other", False),
    ("has_loop_reuse", False), ("reuse_dis_iter", True), ("reuse_dis_bytes", True), ("reuse_ct", True),
]


# ------------------------------------------------------------------ index expressions

def _linearize(e, loop_pos: dict):
    """``({loop position: coefficient}, constant)`` if ``e`` is affine in loop vars, else None.

    The affine form of :func:`tensorir.tir.analysis.affine.affine` with every atom a
    variable; variables that are not loops (``loop_pos``) count as 0.
    """
    form = affine(e)
    coef = {}
    for t, c in form.terms.items():
        if type(t) is not Var:
            return None
        j = loop_pos.get(t.name)
        if j is not None:
            coef[j] = coef.get(j, 0) + c
    return coef, form.const


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


def _eval_grid(e, env: dict):
    """Value of ``e`` on a grid of loop values (numpy arrays in ``env``); None if not evaluable."""
    t = type(e)
    if t is Var:
        return env.get(e.name, 0)
    if t is Const:
        return e.value
    if t is Cast:
        a = _eval_grid(e.a, env)
        return None if a is None else np.asarray(a).astype(np.float64 if e.to in ("float32", "float64")
                                                           else np.int64 if e.to == "int32" else bool)
    if t is Select:
        c, a, b = _eval_grid(e.cond, env), _eval_grid(e.t, env), _eval_grid(e.f, env)
        return None if c is None or a is None or b is None else np.where(c, a, b)
    if t is Unary:
        a = _eval_grid(e.a, env)
        return None if a is None or e.op is not UnOp.NOT else np.logical_not(a)
    if t is not Binary:
        return None                                        # loads: data-dependent
    a, b = _eval_grid(e.a, env), _eval_grid(e.b, env)
    fn = _GRID_OPS.get(e.op)
    if a is None or b is None or fn is None:
        return None
    if e.op is BinOp.FLOORDIV or e.op is BinOp.MOD:
        if (b == 0) if isinstance(b, (int, float)) else not np.all(b):
            return None
    return fn(a, b)


_GRID_OPS = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply, BinOp.DIV: np.true_divide,
    BinOp.FLOORDIV: np.floor_divide, BinOp.MOD: np.mod, BinOp.MIN: np.minimum, BinOp.MAX: np.maximum,
    BinOp.LT: np.less, BinOp.LE: np.less_equal, BinOp.GT: np.greater, BinOp.GE: np.greater_equal,
    BinOp.EQ: np.equal, BinOp.NE: np.not_equal, BinOp.AND: np.logical_and, BinOp.OR: np.logical_or,
}
GUARD_GRID_POINTS = 16384


def _atoms(cond, taken: bool, out: list) -> None:
    """Split a guard into independent conjuncts: ``a and b`` taken is ``a`` taken and ``b`` taken."""
    if taken and type(cond) is Binary and cond.op is BinOp.AND:
        _atoms(cond.a, True, out)
        _atoms(cond.b, True, out)
    else:
        out.append((cond, taken))


def _grid_values(e: int, points: int) -> np.ndarray:
    if points >= e:
        return np.arange(e)
    # a fixed pseudo-random sample (strides would alias with a fused loop's // and %),
    # plus the last value, where split tails live
    sample = np.random.default_rng(e).choice(e - 1, points - 1, replace=False)
    return np.sort(np.append(sample, e - 1))


def _component_fraction(atoms, deps, names, ext) -> float:
    """Fraction of the grid of loops ``deps`` on which all ``atoms`` hold (0.5 per unevaluable atom)."""
    points, budget = {}, GUARD_GRID_POINTS
    for left, j in zip(range(len(deps), 0, -1), sorted(deps, key=lambda j: ext[j])):
        points[j] = max(2, min(ext[j], int(budget ** (1.0 / left))))   # short loops at full resolution
        budget = max(1, budget // points[j])
    env, shape = {}, []
    for axis, j in enumerate(deps):
        values = _grid_values(ext[j], points[j])
        view = [1] * len(deps)
        view[axis] = values.size
        env[names[j]] = values.reshape(view)
        shape.append(values.size)
    mask, unknown = np.ones(shape, dtype=bool), 0
    with np.errstate(all="ignore"):
        for cond, taken in atoms:
            value = _eval_grid(cond, env)
            if value is None:
                unknown += 1
            else:
                mask &= np.asarray(value, dtype=bool) if taken else np.logical_not(value)
    return float(mask.mean()) * 0.5 ** unknown


def guard_reach(path, names, ext, loop_pos, memo: dict) -> float:
    """Fraction of the loop iterations on which every guard on ``path`` takes the branch taken.

    Parameters
    ----------
    path : list of (Expr, bool)
        Enclosing guard conditions, outermost first, with the branch taken
        (True: ``then``, False: ``else``).
    names, ext, loop_pos
        Enclosing loops, as for :class:`BufferAccess` (``ext`` as ints).
    memo : dict
        Cache shared by the calls of one extraction (conditions are keyed by
        identity, so it must not outlive the loop nest).

    Returns
    -------
    float
        Conjunctions are split into their parts; parts sharing no loop are
        treated as independent and each group is evaluated on the grid of its
        loops (every value of short loops; a fixed sample of long ones once the
        grid passes :data:`GUARD_GRID_POINTS`).  A data-dependent condition
        counts 0.5.
    """
    atoms = []
    for cond, taken in path:
        _atoms(cond, taken, atoms)
    deps = []
    for cond, _ in atoms:
        key = ("vars", id(cond))
        if key not in memo:
            memo[key] = frozenset(_loop_vars_in(cond, loop_pos))
        deps.append(memo[key])
    # group atoms that share loops (union-find over atoms)
    parent = list(range(len(atoms)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner = {}
    for i, vs in enumerate(deps):
        for j in vs:
            if j in owner:
                parent[root(i)] = root(owner[j])
            else:
                owner[j] = i
    groups = {}
    for i in range(len(atoms)):
        groups.setdefault(root(i), []).append(i)
    reach = 1.0
    for members in groups.values():
        key = tuple((id(atoms[i][0]), atoms[i][1]) for i in members)
        if key not in memo:
            loops = sorted(set().union(*(deps[i] for i in members)))
            memo[key] = _component_fraction([atoms[i] for i in members], loops, names, ext)
        reach *= memo[key]
    return reach


# ------------------------------------------------------------------ buffer accesses

class BufferAccess:
    """All accesses of one buffer by one store, analysed against the store's loop nest.

    Parameters
    ----------
    buffer : Buffer
        The accessed buffer.
    index_lists : list of tuple of Expr
        The index tuple of each access (the store and/or its loads).
    names : list of str
        Loop variable names, outermost first.
    ext : sequence of int
        Loop extents, outermost first.
    loop_pos : dict
        Loop variable name -> position in ``names`` (innermost wins on shadowing).

    Attributes
    ----------
    elements : list of float
        ``elements[i]``: distinct elements touched with loops ``i..n-1`` free
        (length ``n + 1``; ``elements[0]`` is the whole nest, ``elements[n]``
        one iteration), capped by the buffer size.
    region : list of int
        Per-dimension extent of the whole-nest bounding box.
    stride : list of int
        Per-loop smallest absolute stride in elements over the accesses that
        depend on the loop (0 when none does).
    depends : list of bool
        Per-loop: does any access index depend on the loop variable.
    """

    def __init__(self, buffer, index_lists, names, ext, loop_pos):
        # plain Python: these arrays are a handful of elements, where numpy's call overhead dominates
        self.buffer = buffer
        self.n_access = len(index_lists)
        self.elem_bytes = itemsize(buffer.dtype)
        ext = [int(e) for e in ext]
        n, shape = len(ext), [int(x) for x in buffer.shape]
        n_dim = len(shape)
        row = [1] * n_dim                                   # row-major element stride of each dim
        for d in range(n_dim - 2, -1, -1):
            row[d] = row[d + 1] * shape[d + 1]
        # lo[d][i], hi[d][i]: union bounds of dim d over all accesses with loops i..n-1 free
        lo = [[None] * (n + 1) for _ in range(n_dim)]
        hi = [[None] * (n + 1) for _ in range(n_dim)]
        big = 1 << 62
        stride = [big] * n
        depends = [False] * n
        for indices in index_lists:
            offset = [0] * n                                # coefficient of each loop in the flat offset
            used = set()
            for d, idx in enumerate(indices[:n_dim]):
                lin = _linearize(idx, loop_pos)
                if lin is None:
                    deps = _loop_vars_in(idx, loop_pos)
                    self._nonlinear_bounds(idx, deps, names, ext, shape[d], lo[d], hi[d])
                    origin = _evaluate(idx, {})
                    for j in deps:                          # finite difference at the origin
                        offset[j] += (_evaluate(idx, {names[j]: 1}) - origin) * row[d]
                    used |= deps
                    continue
                coefs, low = lin
                high = low
                for i in range(n, -1, -1):
                    if i < n:
                        c = coefs.get(i, 0)
                        if c:
                            span = c * (ext[i] - 1)
                            low, high = (low + span, high) if span < 0 else (low, high + span)
                            offset[i] += c * row[d]
                            used.add(i)
                    if lo[d][i] is None or low < lo[d][i]:
                        lo[d][i] = low
                    if hi[d][i] is None or high > hi[d][i]:
                        hi[d][i] = high
            for j in used:
                depends[j] = True
                stride[j] = min(stride[j], abs(offset[j]))
        self.stride = [0 if s == big else s for s in stride]
        self.depends = depends
        size = max(1, buffer.size)
        elements = []
        for i in range(n + 1):
            count = 1
            for d in range(n_dim):
                count *= min(shape[d], max(1, hi[d][i] - lo[d][i] + 1)) if lo[d][i] is not None else shape[d]
            elements.append(float(min(count, size)))
        self.elements = elements
        self.region = [min(shape[d], max(1, hi[d][0] - lo[d][0] + 1)) if lo[d][0] is not None else shape[d]
                       for d in range(n_dim)]

    @staticmethod
    def _nonlinear_bounds(idx, deps, names, ext, dim, lo, hi):
        """Widen ``lo``/``hi`` (per level) by interval bounds of a nonlinear index."""
        memo = {}   # the bounds only change at levels where one of the index's loops becomes free
        for i in range(len(ext) + 1):
            free = tuple(j for j in sorted(deps) if j >= i)
            if free not in memo:
                memo[free] = _interval(idx, {names[j]: (0, ext[j] - 1) for j in free}) or (0, dim - 1)
            low, high = memo[free]
            if lo[i] is None or low < lo[i]:
                lo[i] = low
            if hi[i] is None or high > hi[i]:
                hi[i] = high


def access_features(acc: BufferAccess, ext, outer_prod: float, footprint) -> list:
    """Raw values of :data:`ACCESS_FIELDS` for one analysed buffer (after Ansor's per-buffer features).

    Parameters
    ----------
    acc : BufferAccess
        The analysed accesses.
    ext : sequence of int
        Loop extents, outermost first.
    outer_prod : float
        Executions of the store (product of ``ext``).
    footprint : list of float
        Bytes the store touches in all its buffers per loop level (length
        ``n + 1``, as :attr:`BufferAccess.elements`); gives the reuse distance
        in bytes.

    Returns
    -------
    list of float
        In :data:`ACCESS_FIELDS` order.  ``lines`` skips inner loops that do
        not move the access, then counts one line per ``64 / (stride * bytes)``
        iterations.  The reuse-carrying loop is the innermost loop the access
        does not depend on; its distance is the iterations and bytes touched
        inside one of its iterations.
    """
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
