"""Reference evaluator: compute a workload with numpy straight from its tensor expressions.

This is the ground truth every compiled kernel is checked against when no
hand-written numpy reference exists, so it shares no code with lowering or
codegen.  Each compute stage is evaluated over its whole iteration domain at
once: every axis variable becomes an ``np.arange`` laid along its own grid
dimension (spatial axes first, then reduce axes), a ``TensorRead`` is a
fancy-indexing gather and the body broadcasts to the domain.  A temporary
only spans the axes its subexpression uses, and a sum of products (matmul,
convolution) is contracted with ``np.matmul`` without materializing the
product.  Domains whose temporaries would exceed ``max_elements`` are cut into
blocks (reduce axes first, then the outermost spatial axes) whose partial
results are accumulated.

>>> import numpy as np
>>> from tensorir import ops
>>> from tensorir.te.evaluate import evaluate, count_flops
>>> a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
>>> [c] = evaluate(ops.matmul(4, 5, 3), [a, b])
>>> float(c[0, 0]), count_flops(ops.matmul(4, 5, 3))
(3.0, 120)
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Sequence

import numpy as np

from tensorir.te.expr import (COMPARE_OPS, FLOAT_DTYPES, LOGIC_OPS, Binary, BinOp, Cast, Const, Expr, Select, Unary,
                   UnOp, Var, children)
from tensorir.te.tensor import Reduce, Reducer, Tensor, TensorRead, free_vars, walk
from tensorir.te.workload import WorkloadError, check_workload, tensor_list

DEFAULT_MAX_ELEMENTS = 1 << 25  # 32M elements: 128 MiB per float32 temporary


class EvaluateError(ValueError):
    """The inputs do not match the workload, or a stage cannot be evaluated (e.g. out-of-bounds read)."""


# ----------------------------------------------------------------- workload graph

def as_workload(tensors) -> list:
    """Check that ``tensors`` is a non-empty sequence of ``te.Tensor`` and return it as a list."""
    try:
        return tensor_list(tensors)
    except WorkloadError as err:
        raise EvaluateError(str(err)) from None


def topo_stages(tensors) -> list:
    """Every tensor reachable from ``tensors``, each listed after the tensors it reads.

    The order is deterministic and independent of names and object ids: a
    depth-first walk from the workload's tensors in list order, visiting each
    stage's inputs in first-read order.  Intermediate stages that the list
    does not name are included.
    """
    order, seen = [], set()
    for root in as_workload(tensors):
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(root.inputs))]
        while stack:  # iterative: long chains of stages must not hit the recursion limit
            t, pending = stack[-1]
            nxt = next(pending, None)
            if nxt is None:
                stack.pop()
                order.append(t)
            elif id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append((nxt, iter(nxt.inputs)))
    return order


# ------------------------------------------------------------------ evaluation

def evaluate(tensors, inputs: Sequence, *, max_elements: int = DEFAULT_MAX_ELEMENTS) -> list:
    """Compute a workload with numpy, directly from its tensor expressions.

    Parameters
    ----------
    tensors : list of te.Tensor
        The workload: its placeholders (inputs) first, then its outputs.
        Intermediate stages the outputs read need not be listed; every stage
        reachable from the list is computed, in topological order.
    inputs : sequence of np.ndarray
        One array per placeholder of ``tensors``, in list order, with exactly
        the placeholder's shape and dtype (no implicit casts).
    max_elements : int, optional
        Largest number of elements a temporary may have (default 2**25,
        128 MiB of float32); bigger domains are evaluated block by block.

    Returns
    -------
    list of np.ndarray
        The arrays of the non-placeholder tensors of ``tensors``, in order.

    Raises
    ------
    EvaluateError
        Wrong number, shape or dtype of inputs; a placeholder read by the
        workload but missing from the list; a read out of bounds outside the
        untaken branch of a select.

    Notes
    -----
    Arithmetic keeps the expression dtypes (float32 stays float32, int32 wraps
    around); ``//`` and ``%`` are floor division and floor modulo; both
    branches of a select are computed but out-of-range reads in the branch not
    taken are clamped instead of failing.  Arithmetic on booleans is modulo 2.
    """
    try:
        tensors = check_workload(tensors)
    except WorkloadError as err:
        raise EvaluateError(str(err)) from None
    if not isinstance(max_elements, int) or max_elements < 1:
        raise EvaluateError(f"max_elements must be a positive int, got {max_elements!r}")
    values = _bind_inputs(tensors, inputs)
    with np.errstate(all="ignore"):  # inf/nan and int wrap-around are legitimate results here
        for t in topo_stages(tensors):
            if id(t) in values:
                continue
            if t.is_placeholder:
                raise EvaluateError(f"the workload reads placeholder {t.name!r}, which is not in its tensor list; "
                                    "list every input placeholder before the outputs")
            values[id(t)] = _StageEvaluator(t, values, max_elements).run()
    return [values[id(t)] for t in tensors if not t.is_placeholder]


def _bind_inputs(tensors: list, inputs) -> dict:
    placeholders = [t for t in tensors if t.is_placeholder]
    if len({id(p) for p in placeholders}) != len(placeholders):
        raise EvaluateError("a placeholder is listed twice in the workload")
    if isinstance(inputs, np.ndarray) or not isinstance(inputs, Sequence):
        raise EvaluateError(f"inputs must be a list of arrays (one per placeholder), got {type(inputs).__name__}")
    names = ", ".join(p.name for p in placeholders)
    if len(inputs) != len(placeholders):
        raise EvaluateError(f"the workload has {len(placeholders)} input(s) ({names}) but {len(inputs)} "
                            "array(s) were given")
    values = {}
    for n, (p, x) in enumerate(zip(placeholders, inputs)):
        arr = np.asarray(x)
        if arr.shape != p.shape:
            raise EvaluateError(f"input {n} ({p.name!r}) must have shape {p.shape}, got {arr.shape}")
        if arr.dtype != np.dtype(p.dtype):
            raise EvaluateError(f"input {n} ({p.name!r}) must have dtype {p.dtype}, got {arr.dtype} "
                                f"(convert with .astype(np.{p.dtype}))")
        values[id(p)] = arr
    return values


def _block_shape(extents: list, n_spatial: int, groups: list, limit: int) -> list:
    """Block extents per grid dim such that, for every group of dims, the block's product is <= limit.

    Each group is the set of dims one temporary spans.  Reduce dims are
    shrunk first, then the outermost spatial dims.
    """
    blocks = list(extents)
    for d in list(range(n_spatial, len(extents))) + list(range(n_spatial)):
        for group in groups:
            total = math.prod(blocks[g] for g in group)
            if d in group and total > limit:
                blocks[d] = max(1, limit // (total // blocks[d]))
    return blocks


_UFUNCS = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply, BinOp.DIV: np.true_divide,
    BinOp.FLOORDIV: np.floor_divide, BinOp.MOD: np.remainder, BinOp.MIN: np.minimum, BinOp.MAX: np.maximum,
    BinOp.LT: np.less, BinOp.LE: np.less_equal, BinOp.GT: np.greater, BinOp.GE: np.greater_equal,
    BinOp.EQ: np.equal, BinOp.NE: np.not_equal, BinOp.AND: np.logical_and, BinOp.OR: np.logical_or,
}


def _sigmoid(x):
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


_UNARY = {
    UnOp.EXP: np.exp, UnOp.LOG: np.log, UnOp.SQRT: np.sqrt, UnOp.TANH: np.tanh, UnOp.SIGMOID: _sigmoid,
    UnOp.ABS: np.abs, UnOp.NOT: np.logical_not,
}

_REDUCE = {Reducer.SUM: np.sum, Reducer.MAX: np.max, Reducer.MIN: np.min}
_COMBINE = {Reducer.SUM: np.add, Reducer.MAX: np.maximum, Reducer.MIN: np.minimum}


def _binary(op: BinOp, a, b, dtype: str):
    if dtype == "bool" and op not in COMPARE_OPS and op not in LOGIC_OPS:
        # i1 arithmetic: compute on 0/1 and keep the low bit (add/sub = xor, mul = and)
        r = _UFUNCS[op](np.asarray(a, np.int32), np.asarray(b, np.int32))
        return (r & 1).astype(np.bool_)
    return _UFUNCS[op](a, b)


def _full_rank(x, nd: int) -> np.ndarray:
    x = np.asarray(x)
    return x.reshape((1,) * (nd - x.ndim) + x.shape)


def _contract(a, b, lens: tuple, n_spatial: int):
    """``sum over the reduce dims of a * b`` for grid-shaped operands, as one batched ``np.matmul``.

    Grid dims are classified as batch (spatial, in both operands), rows
    (spatial, in ``a`` only), cols (spatial, in ``b`` only) and contracted
    (reduce, in both); a reduce dim only one operand spans is summed out of
    it first, and one neither spans multiplies the result by its extent.
    """
    nd = len(lens)
    a, b = _full_rank(a, nd), _full_rank(b, nd)
    in_a = {d for d in range(nd) if a.shape[d] > 1}
    in_b = {d for d in range(nd) if b.shape[d] > 1}
    reduce_dims = range(n_spatial, nd)
    repeats = math.prod(lens[d] for d in reduce_dims if d not in in_a | in_b)
    only_a = tuple(d for d in reduce_dims if d in in_a - in_b)
    only_b = tuple(d for d in reduce_dims if d in in_b - in_a)
    if only_a:
        a = np.sum(a, axis=only_a, keepdims=True, dtype=a.dtype)
    if only_b:
        b = np.sum(b, axis=only_b, keepdims=True, dtype=b.dtype)
    batch = [d for d in range(n_spatial) if d in in_a and d in in_b]
    rows = [d for d in range(n_spatial) if d in in_a and d not in in_b]
    cols = [d for d in range(n_spatial) if d in in_b and d not in in_a]
    contracted = [d for d in reduce_dims if d in in_a and d in in_b]

    def as_matrices(x, first, second):
        used = batch + first + second
        x = x.transpose(used + [d for d in range(nd) if d not in used])  # the rest have size 1
        return x.reshape(math.prod(lens[d] for d in batch), math.prod(lens[d] for d in first),
                         math.prod(lens[d] for d in second))

    r = np.matmul(as_matrices(a, rows, contracted), as_matrices(b, contracted, cols))
    order = batch + rows + cols
    r = r.reshape([lens[d] for d in order]).transpose(np.argsort(order))
    r = r.reshape([lens[d] if d in order else 1 for d in range(n_spatial)])
    return r * r.dtype.type(repeats) if repeats > 1 else r


class _StageEvaluator:
    """Evaluates one compute stage block by block over its iteration domain."""

    def __init__(self, tensor: Tensor, values: dict, max_elements: int):
        self.tensor = tensor
        self.values = values
        self.max_elements = max_elements
        op = tensor.op
        self.body = op.body
        self.n_spatial = len(op.axes)
        self.axes = tuple(op.axes) + tuple(op.reduce_axes)
        self.reduce = self.body if isinstance(self.body, Reduce) else None
        # Nodes used more than once (e.g. ``d * d``) are computed once per block; others are not
        # kept, so that temporaries die as soon as their parent has used them.
        root = self.reduce.source if self.reduce else self.body
        uses = Counter(id(n) for n in walk(root))
        self.shared = {k for k, c in uses.items() if c > 1}
        # Every temporary spans only the dims of the variables its subtree uses (reductions over
        # dims it does not use are broadcast views), so blocks bound those sets and the output block.
        self.contract = (self.reduce is not None and self.reduce.reducer is Reducer.SUM
                         and isinstance(root, Binary) and root.op is BinOp.MUL)
        self.groups = [self._dims(e) for e in ((root.a, root.b) if self.contract else (root,))]
        self.groups.append(set(range(self.n_spatial)))

    def _dims(self, e: Expr) -> set:
        pos = {ax.var: d for d, ax in enumerate(self.axes)}
        return {pos[v] for v in free_vars(e) if v in pos}

    def run(self) -> np.ndarray:
        extents = [ax.extent for ax in self.axes]
        ns = self.n_spatial
        blocks = _block_shape(extents, ns, self.groups, self.max_elements)
        ranges = [range(0, e, b) for e, b in zip(extents, blocks)]
        out = np.empty(self.tensor.shape, np.dtype(self.tensor.dtype))
        for sp_starts in itertools.product(*ranges[:ns]):
            acc = None
            for rd_starts in itertools.product(*ranges[ns:]):
                starts = sp_starts + rd_starts
                self._enter_block(starts, [min(b, e - s) for s, b, e in zip(starts, blocks, extents)])
                if self.reduce is None:
                    acc = self._eval(self.body, None)
                    continue
                part = self._reduce_block()
                acc = part if acc is None else _COMBINE[self.reduce.reducer](acc, part)
            region = tuple(slice(s, s + n) for s, n in zip(sp_starts, self.lens[:ns]))
            out[region] = np.broadcast_to(acc, self.lens[:ns])
        return out

    def _reduce_block(self):
        src, ns = self.reduce.source, self.n_spatial
        if self.contract:  # a sum of products (matmul, conv): never materialize the product
            return _contract(self._eval(src.a, None), self._eval(src.b, None), self.lens, ns)
        values = np.broadcast_to(self._eval(src, None), self.lens)
        axis = tuple(range(ns, len(self.axes)))
        if self.reduce.reducer is Reducer.SUM:
            return np.sum(values, axis=axis, dtype=values.dtype)  # int32 sums must wrap, not widen
        return _REDUCE[self.reduce.reducer](values, axis=axis)

    def _enter_block(self, starts, lens) -> None:
        nd = len(self.axes)
        self.starts, self.lens = tuple(starts), tuple(lens)
        self.grid = {}
        for d, (ax, s, n) in enumerate(zip(self.axes, starts, lens)):
            shape = [1] * nd
            shape[d] = n
            self.grid[ax.var] = np.arange(s, s + n, dtype=np.int32).reshape(shape)
        self.memo = {}

    def _eval(self, e: Expr, guard):
        """Value of ``e`` on the current block; ``guard`` masks the points where ``e`` is actually used."""
        # one Python frame per expression level, so deep expressions stay within the recursion limit
        memoize = guard is None and id(e) in self.shared
        if memoize and id(e) in self.memo:
            return self.memo[id(e)]
        if isinstance(e, Const):
            value = np.dtype(e.dtype).type(e.value)
        elif isinstance(e, Var):
            if e not in self.grid:
                raise EvaluateError(f"stage {self.tensor.name!r} uses variable {e.name!r}, "
                                    "which is not one of its axes")
            value = self.grid[e]
        elif isinstance(e, TensorRead):
            value = self._read(e, guard)
        elif isinstance(e, Binary):
            value = _binary(e.op, self._eval(e.a, guard), self._eval(e.b, guard), e.a.dtype)
        elif isinstance(e, Unary):
            value = _UNARY[e.op](self._eval(e.a, guard))
        elif isinstance(e, Cast):
            value = self._eval(e.a, guard).astype(np.dtype(e.to))
        elif isinstance(e, Select):
            value = self._select(e, guard)
        elif isinstance(e, Reduce):
            raise EvaluateError(f"stage {self.tensor.name!r}: a reduction must be the whole body of a compute")
        else:
            raise EvaluateError(f"stage {self.tensor.name!r}: cannot evaluate a {type(e).__name__} node "
                                "(not a tensor-expression node)")
        if memoize:
            self.memo[id(e)] = value
        return value

    def _select(self, e: Select, guard):
        cond = self._eval(e.cond, guard)
        if not np.any(cond):
            return self._eval(e.f, guard)
        if np.all(cond):
            return self._eval(e.t, guard)
        not_cond = np.logical_not(cond)
        t = self._eval(e.t, cond if guard is None else guard & cond)
        f = self._eval(e.f, not_cond if guard is None else guard & not_cond)
        return np.where(cond, t, f)

    def _read(self, e: TensorRead, guard):
        arr = self.values[id(e.tensor)]
        index = []
        for d, (ie, n) in enumerate(zip(e.indices, arr.shape)):
            ix = self._eval(ie, guard)
            if np.min(ix) < 0 or np.max(ix) >= n:
                bad = (ix < 0) | (ix >= n)
                if guard is not None:
                    bad = bad & guard
                if np.any(bad):
                    raise self._out_of_bounds(e, d, ix, bad, n)
                ix = np.clip(ix, 0, n - 1)  # only the branch of a select not taken reads here
            index.append(ix)
        return arr[tuple(index)]

    def _out_of_bounds(self, e: TensorRead, d: int, ix, bad, n: int) -> EvaluateError:
        nd = len(self.axes)
        bad = np.asarray(bad)
        bad = bad.reshape((1,) * (nd - bad.ndim) + bad.shape)
        pos = tuple(int(p) for p in np.argwhere(bad)[0])
        ix = np.asarray(ix)
        value = np.broadcast_to(ix.reshape((1,) * (nd - ix.ndim) + ix.shape), bad.shape)[pos]
        coords = [s + (p if m > 1 else 0) for s, p, m in zip(self.starts, pos, bad.shape)]
        names = [ax.name for ax in self.axes]
        where = f"{self.tensor.name}[{', '.join(map(str, coords[:self.n_spatial]))}]"
        if nd > self.n_spatial:
            where += " with " + ", ".join(f"{k}={v}" for k, v in zip(names[self.n_spatial:], coords[self.n_spatial:]))
        return EvaluateError(f"stage {self.tensor.name!r} reads {e} out of bounds: dimension {d} index is {int(value)}, "
                             f"outside [0, {n}), at {where} (guard the read with te.if_then_else)")


# ---------------------------------------------------------------- flop counting

_ARITH_BINOPS = (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV, BinOp.MIN, BinOp.MAX)
_ARITH_UNOPS = (UnOp.EXP, UnOp.LOG, UnOp.SQRT, UnOp.TANH, UnOp.SIGMOID, UnOp.ABS)


def _count_ops(e: Expr, interned: dict, is_data: dict) -> tuple:
    """(arithmetic ops in ``e`` that count, a small id of ``e``'s structure).

    Structurally equal subexpressions get the same id (hash-consing on flat
    keys, so deep trees cost no deep hashing) and are counted once;
    ``is_data[id]`` says whether the subexpression computes on tensor data or
    floats rather than on indices only.
    """
    if isinstance(e, TensorRead):
        indices = tuple(_count_ops(i, interned, is_data)[1] for i in e.indices)  # their ops are dropped
        key, data, ops = ("read", id(e.tensor), indices), True, 0
    elif isinstance(e, Const):
        key, data, ops = ("const", e.dtype, e.value), e.dtype in FLOAT_DTYPES, 0
    elif isinstance(e, Var):
        key, data, ops = ("var", e.name), e.dtype in FLOAT_DTYPES, 0
    elif isinstance(e, Reduce):
        raise EvaluateError("a reduction must be the whole body of a compute")
    else:
        ops, data, kids = 0, e.dtype in FLOAT_DTYPES, []
        for c in children(e):
            n, uid = _count_ops(c, interned, is_data)
            ops, data = ops + n, data or is_data[uid]
            kids.append(uid)
        key = (type(e).__name__, getattr(e, "op", None) or getattr(e, "to", None), tuple(kids))
        if data and ((isinstance(e, Binary) and e.op in _ARITH_BINOPS)
                     or (isinstance(e, Unary) and e.op in _ARITH_UNOPS)):
            ops += 1
    if key in interned:
        return 0, interned[key]  # a repeat: its whole subtree was counted at its first occurrence
    uid = interned[key] = len(interned)
    is_data[uid] = data
    return ops, uid


def stage_flops(tensor: Tensor) -> int:
    """Arithmetic operations of one compute stage (see :func:`count_flops`); 0 for a placeholder."""
    if tensor.is_placeholder:
        return 0
    body = tensor.op.body
    if isinstance(body, Reduce):
        per_point = _count_ops(body.source, {}, {})[0] + 1  # + the combine (add / max / min) of the reduction
        domain = math.prod(tensor.shape) * math.prod(ax.extent for ax in body.axes)
    else:
        per_point = _count_ops(body, {}, {})[0]
        domain = math.prod(tensor.shape)
    return per_point * domain


def count_flops(tensors) -> int:
    """Arithmetic operations a workload performs, summed over all its compute stages.

    Parameters
    ----------
    tensors : list of te.Tensor
        The workload (intermediate stages are found by traversal).

    Returns
    -------
    int
        For each stage: (arithmetic nodes in its body) x (iteration-domain
        size = output elements x reduce extents), summed over stages.

    Notes
    -----
    Counted, once per point of the domain: binary ``+ - * / min max`` and
    unary ``exp log sqrt tanh sigmoid abs``, on float or int32 *data*, plus one
    combine (add, max or min) per reduction step, so a multiply-add in a sum
    counts 2 and matmul ``M, N, K`` gives ``2*M*N*K``.  Not counted: index
    arithmetic (anything inside tensor-read indices, and integer expressions of
    axis variables and constants only), comparisons, logic, selects, casts and
    reads.  The count is static: both branches of a select count, and a
    subexpression that occurs several times in a body (structurally equal,
    e.g. ``d`` in ``d * d``) counts once, as common-subexpression elimination
    computes it once.
    """
    return sum(stage_flops(t) for t in topo_stages(tensors))
