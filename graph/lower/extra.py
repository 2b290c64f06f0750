"""Tensor expressions of the ops in ``graph.ops.activation``, ``graph.ops.extra``,
and ``graph.ops.reduce_extra``: activations, exact rounding, Sign, Max/Min/PRelu, comparisons and
logic, LogSoftmax, CumSum, Pad, Tile, GatherElements, the extra reductions, ArgMax/ArgMin and LRN.

The tensor language has no floor: Floor, Ceil and Round are built exactly from a float -> int32
truncation (below 2^23, or 2^52 for float64, in two steps; every float of larger magnitude is
already an integer).
"""
from __future__ import annotations

import math
from itertools import product

from graph.lower.core import LoweringError, lit, storage_dtype
from graph.lower.elementwise import lowering
from graph.lower.nn import row_indexing
from graph.lower.shape import clamp_index
from tensorir import te

# ReduceProd multiplies the reduced elements out explicitly (te has no product reducer): at most this many
MAX_PRODUCT_TERMS = 64


def _float(node, v):
    if storage_dtype(v.dtype) not in ("float32", "float64"):
        raise LoweringError(f"node {node.name} ({node.op}): needs a float input, got {v.dtype}")


# ------------------------------------------------------------------ exact rounding

def _floor_small(x, dtype: str):
    """floor(x) for |x| < 2^31 (a float -> int32 truncation, one step down for negative fractions)."""
    t = te.cast(dtype, te.cast("int32", x))
    return te.if_then_else(t > x, t - 1.0, t)


def floor(x, dtype: str):
    """Exact floor of a float32/float64 expression (NaN and infinities pass through)."""
    if dtype == "float32":
        return te.if_then_else(te.abs(x) < 2.0 ** 23, _floor_small(x, dtype), x)
    # float64: x = a * 2^21 + r with a = floor(x / 2^21) (|a| < 2^31 below 2^52) and 0 <= r < 2^21 exact
    a = _floor_small(x * (1.0 / 2 ** 21), dtype) * float(2 ** 21)
    return te.if_then_else(te.abs(x) < 2.0 ** 52, a + _floor_small(x - a, dtype), x)


def round_half_even(x, dtype: str):
    """ONNX's Round: the nearest integer, halves to the even neighbour (exact)."""
    f = floor(x, dtype)
    d = x - f
    half = floor(f * 0.5, dtype)
    odd = f - half * 2.0                      # 1 for an odd f, 0 for an even one
    near = te.if_then_else(d > 0.5, f + 1.0, te.if_then_else(d < 0.5, f, f + odd))
    return te.if_then_else(te.abs(x) < (2.0 ** 23 if dtype == "float32" else 2.0 ** 52), near, x)


# sin(r) = r * sum_k (-1)^k r^(2k) / (2k + 1)! on [-pi, pi]: the x^25 term is below 1e-11
_SIN_TAYLOR = [(-1) ** k / math.factorial(2 * k + 1) for k in range(12)]
_TWO_PI_HI, _TWO_PI_LO = 6.283185307179586, 2.4492935982947064e-16      # 2 pi = HI + LO


def sine(x, dtype: str, shift: float = 0.0):
    """sin(x + shift) in float64 after a reduction by the nearest multiple of 2 pi (absolute error below
    1e-9 for |x| < 1e5; valid for |x| < 1e9), rounded to ``dtype``."""
    x64 = te.cast("float64", x)
    if shift:
        x64 = x64 + shift
    y = x64 * (1.0 / _TWO_PI_HI)
    # the nearest integer by truncating y +- 1/2 (halves go either way: any near multiple reduces well)
    k = te.cast("float64", te.cast("int32", y + te.if_then_else(y < 0.0, -0.5, 0.5)))
    r = (x64 - k * _TWO_PI_HI) - k * _TWO_PI_LO
    r2 = r * r
    poly = _SIN_TAYLOR[-1]
    for c in reversed(_SIN_TAYLOR[:-1]):
        poly = c + r2 * poly
    return te.cast(dtype, r * poly)


def _elu(x, alpha):
    return te.if_then_else(x > 0.0, x, alpha * (te.exp(te.min(x, 0.0)) - 1.0))


def _softplus(x):
    return te.max(x, 0.0) + te.log(1.0 + te.exp(0.0 - te.abs(x)))


def _activation_fn(node, dtype: str):
    attr = node.attr
    alpha = attr("alpha")
    if node.op == "LeakyRelu":
        a = 0.01 if alpha is None else float(alpha)
        return lambda x: te.if_then_else(x < 0.0, x * a, x)
    if node.op == "ThresholdedRelu":
        a = 1.0 if alpha is None else float(alpha)
        return lambda x: te.if_then_else(x > a, x, lit(0, dtype))
    if node.op == "Elu":
        a = 1.0 if alpha is None else float(alpha)
        return lambda x: _elu(x, a)
    if node.op == "Selu":
        a = float(attr("alpha", 1.67326319217681884765625))
        g = float(attr("gamma", 1.05070102214813232421875))
        return lambda x: _elu(x, a) * g
    if node.op in ("HardSigmoid", "HardSwish"):
        a = (1.0 / 6.0) if node.op == "HardSwish" else float(attr("alpha", 0.2))
        b = 0.5 if node.op == "HardSwish" else float(attr("beta", 0.5))
        hs = (lambda x: te.max(te.min(x * a + b, 1.0), 0.0))
        return hs if node.op == "HardSigmoid" else (lambda x: x * hs(x))
    if node.op == "Swish":
        a = 1.0 if alpha is None else float(alpha)
        return lambda x: x * te.sigmoid(x * a) if a != 1.0 else x * te.sigmoid(x)
    if node.op == "Softplus":
        return _softplus
    if node.op == "Softsign":
        return lambda x: x / (1.0 + te.abs(x))
    if node.op == "Mish":
        return lambda x: x * te.tanh(_softplus(x))
    if node.op == "Celu":
        a = 1.0 if alpha is None else float(alpha)
        return lambda x: te.max(x, 0.0) + te.min(a * (te.exp(te.min(x, 0.0) * (1.0 / a)) - 1.0), 0.0)
    if node.op == "Shrink":
        bias, lambd = float(attr("bias", 0.0)), float(attr("lambd", 0.5))
        return lambda x: te.if_then_else(x < -lambd, x + bias, te.if_then_else(x > lambd, x - bias, lit(0, dtype)))
    if node.op in ("Sin", "Cos"):
        return lambda x: sine(x, dtype, 0.0 if node.op == "Sin" else math.pi / 2)
    if node.op == "Floor":
        return lambda x: floor(x, dtype)
    if node.op == "Ceil":
        return lambda x: 0.0 - floor(0.0 - x, dtype)
    return lambda x: round_half_even(x, dtype)


@lowering("LeakyRelu", "ThresholdedRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Swish", "Softplus", "Softsign",
          "Mish", "Celu", "Shrink", "Sin", "Cos", "Floor", "Ceil", "Round")
def _activation(ctx, node, ins, outs):
    (x,) = ins
    _float(node, x)
    fn = _activation_fn(node, storage_dtype(x.dtype))
    return [ctx.emit(outs[0].shape, outs[0].dtype, lambda *i: fn(x(*i)), node.op.lower())]


@lowering("Sign")
def _sign(ctx, node, ins, outs):
    (x,) = ins
    dt = x.dtype

    def f(*i):
        e = x(*i)
        return te.if_then_else(e > lit(0, dt), lit(1, dt), te.if_then_else(e < lit(0, dt), lit(-1, dt), lit(0, dt)))
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "sign")]


# ------------------------------------------------------------------ Max, Min, PRelu

@lowering("Max", "Min")
def _minmax(ctx, node, ins, outs):
    a, b = ins
    fn = te.max if node.op == "Max" else te.min
    shape = outs[0].shape
    return [ctx.emit(shape, outs[0].dtype, lambda *i: fn(a.at(i, shape), b.at(i, shape)), node.op.lower())]


@lowering("PRelu")
def _prelu(ctx, node, ins, outs):
    x, slope = ins
    _float(node, x)

    def f(*i):
        e = x(*i)
        return te.if_then_else(e < 0.0, slope.at(i, outs[0].shape) * e, e)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "prelu")]


# ------------------------------------------------------------------ comparisons and logic

def _xor(a, b):
    return te.if_then_else(a, te.if_then_else(b, False, True), b)


_LOGIC = {"LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b,
          "And": lambda a, b: a & b, "Or": lambda a, b: a | b, "Xor": _xor}


@lowering(*_LOGIC)
def _logic(ctx, node, ins, outs):
    a, b = ins
    fn = _LOGIC[node.op]
    shape = outs[0].shape
    return [ctx.emit(shape, "bool", lambda *i: fn(a.at(i, shape), b.at(i, shape)), node.op.lower())]


@lowering("Mod")
def _mod(ctx, node, ins, outs):
    a, b = ins
    if storage_dtype(a.dtype) != "int32":
        raise LoweringError(f"node {node.name} (Mod): a float remainder (fmod) has no exact kernel; only integer Mod "
                            "compiles")
    truncated = bool(node.attr("fmod", 0))

    def f(*i):
        x, y = a.at(i, outs[0].shape), b.at(i, outs[0].shape)
        r = x % y                              # te's % takes the divisor's sign
        if not truncated:
            return r
        return te.if_then_else(te.all(te.not_equal(r, 0), te.not_equal(x < 0, y < 0)), r - y, r)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "mod")]


@lowering("Trilu")
def _trilu(ctx, node, ins, outs):
    x = ins[0]
    k, upper = node.attr("k", 0), bool(node.attr("upper", 1))

    def f(*i):
        d = i[-1] - i[-2]
        keep = d >= k if upper else d <= k
        return te.if_then_else(keep, x(*i), lit(0, x.dtype) if x.dtype != "bool" else False)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "trilu")]


@lowering("Not")
def _not(ctx, node, ins, outs):
    (x,) = ins
    return [ctx.emit(outs[0].shape, "bool", lambda *i: te.if_then_else(x(*i), False, True), "not")]


@lowering("LogSoftmax")
def _log_softmax(ctx, node, ins, outs):
    x = ins[0]
    axis = node.attr("axis")
    shape, dtype = outs[0].shape, outs[0].dtype
    rows, at, row = row_indexing(shape, axis)
    k1, k2 = te.reduce_axis(shape[axis], "k"), te.reduce_axis(shape[axis], "k")
    mx = ctx.emit(rows, dtype, lambda *i: te.max(x(*at(i, k1)), axis=k1), "row_max")
    total = ctx.emit(rows, dtype, lambda *i: te.sum(te.exp(x(*at(i, k2)) - mx(*i)), axis=k2), "row_sum")
    return [ctx.emit(shape, dtype, lambda *i: x(*i) - mx(*row(i)) - te.log(total(*row(i))), "log_softmax")]


@lowering("CumSum")
def _cumsum(ctx, node, ins, outs):
    """A masked sum over the whole axis per element (quadratic in the axis length, exact order-free)."""
    x = ins[0]
    axis = node.attr("axis")
    exclusive, reverse = bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0))
    k = te.reduce_axis(x.shape[axis], "k")

    def f(*i):
        i = list(i)
        here = i[axis]
        take = (k > here if exclusive else k >= here) if reverse else (k < here if exclusive else k <= here)
        return te.sum(te.if_then_else(take, x(*(i[:axis] + [k] + i[axis + 1:])), lit(0, x.dtype)), axis=k)
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "cumsum")]


# ------------------------------------------------------------------ Pad, Tile

def _pad_index(i, lo: int, n: int, mode: str):
    """The input index an output index ``i`` reads on one axis (reflect/edge); constant mode: ``i - lo``."""
    e = i - lo if lo else i
    if mode == "edge" and n > 1:
        return te.max(te.min(e, n - 1), 0)
    if mode == "edge":
        return 0
    if mode == "reflect":
        e = te.if_then_else(e < 0, 0 - e, e)
        return te.if_then_else(e > n - 1, 2 * (n - 1) - e, e)
    return e


@lowering("Pad")
def _pad(ctx, node, ins, outs):
    x = ins[0]
    pads, mode = node.attr("pads"), node.attr("mode", "constant")
    lo, hi = pads[:x.rank], pads[x.rank:]
    v, sdt = node.attr("value", 0.0), storage_dtype(x.dtype)
    value = te.const(bool(v)) if x.dtype == "bool" else te.const(int(v) if sdt == "int32" else float(v), sdt)

    def f(*i):
        idx, conds = [], []
        for e, a, b, n in zip(i, lo, hi, x.shape):
            if mode == "constant" or (a == 0 and b == 0):
                if a > 0:
                    conds.append(e >= a)
                if b > 0:
                    conds.append(e < n + a)
                idx.append(e - a if a else e)
            else:
                idx.append(_pad_index(e, a, n, mode))
        read = x(*idx)
        return te.if_then_else(te.all(*conds), read, value) if conds else read
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "pad")]


@lowering("GatherElements")
def _gather_elements(ctx, node, ins, outs):
    data, indices = ins
    axis = node.attr("axis", 0)
    n = data.shape[axis]

    def f(*i):
        j = clamp_index(indices(*i), n)
        return data(*(list(i[:axis]) + [j] + list(i[axis + 1:])))
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "gather_elements")]


@lowering("Tile")
def _tile(ctx, node, ins, outs):
    x = ins[0]
    repeats = node.attr("repeats")

    def f(*i):
        return x(*[0 if n == 1 else (e % n if r > 1 else e) for e, n, r in zip(i, x.shape, repeats)])
    return [ctx.emit(outs[0].shape, outs[0].dtype, f, "tile")]


# ------------------------------------------------------------------ reductions

def _reduce_index(rank: int, axes, keepdims: bool, out_idx, reduced) -> list:
    """The input index of an output index, the reduced axes read at ``reduced`` (one index each)."""
    idx, it, ri = [], iter(out_idx), iter(reduced)
    for d in range(rank):
        if d in axes:
            idx.append(next(ri))
            if keepdims:
                next(it)
        else:
            idx.append(next(it))
    return idx


@lowering("ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd")
def _reduce(ctx, node, ins, outs):
    x = ins[0]
    axes = tuple(node.attr("axes", ())) or tuple(range(x.rank))
    keep = bool(node.attr("keepdims", 1))
    shape, dtype = outs[0].shape, outs[0].dtype
    if node.op == "ReduceProd":
        return [_product(ctx, node, x, axes, keep, shape, dtype)]
    raxes = [te.reduce_axis(x.shape[a], f"r{n}") for n, a in enumerate(axes)]

    def source(i):
        return x(*_reduce_index(x.rank, axes, keep, i, raxes))
    if node.op == "ReduceMin":
        return [ctx.emit(shape, dtype, lambda *i: te.min(source(i), axis=raxes), "min")]
    if node.op == "ReduceL1":
        return [ctx.emit(shape, dtype, lambda *i: te.sum(te.abs(source(i)), axis=raxes), "l1")]
    squares = ctx.emit(shape, dtype, lambda *i: te.sum(source(i) * source(i), axis=raxes), "sumsq")
    if node.op == "ReduceSumSquare":
        return [squares]
    _float(node, x)
    return [ctx.emit(shape, dtype, lambda *i: te.sqrt(squares(*i)), "l2")]


def _product(ctx, node, x, axes, keep, shape, dtype):
    extents = [range(x.shape[a]) for a in axes]
    terms = math.prod(len(r) for r in extents)
    if terms > MAX_PRODUCT_TERMS:
        raise LoweringError(f"node {node.name} (ReduceProd): reduces {terms} elements per output; the compiled "
                            f"product is written out term by term, at most {MAX_PRODUCT_TERMS}")

    def f(*i):
        out = None
        for combo in product(*extents):
            e = x(*_reduce_index(x.rank, axes, keep, i, combo))
            out = e if out is None else out * e
        return out
    return ctx.emit(shape, dtype, f, "prod")


@lowering("ArgMax", "ArgMin")
def _arg(ctx, node, ins, outs):
    x = ins[0]
    axis, keep = node.attr("axis"), bool(node.attr("keepdims", 1))
    last = bool(node.attr("select_last_index", 0))
    n = x.shape[axis]
    shape = outs[0].shape
    rows = x.shape[:axis] + ((1,) if keep else ()) + x.shape[axis + 1:]
    k1, k2 = te.reduce_axis(n, "k"), te.reduce_axis(n, "k")

    def at(i, k):
        i = list(i)
        return i[:axis] + [k] + i[axis + (1 if keep else 0):]
    best_of = te.max if node.op == "ArgMax" else te.min
    best = ctx.emit(rows, x.dtype, lambda *i: best_of(x(*at(i, k1)), axis=k1), "best")

    def index(*i):
        # the first (last) position holding the best value: a min (max) over matching positions
        hit = te.equal(x(*at(i, k2)), best(*i))
        if last:
            return te.max(te.if_then_else(hit, k2.var, -1), axis=k2)
        return te.min(te.if_then_else(hit, k2.var, n), axis=k2)
    return [ctx.emit(shape, outs[0].dtype, index, node.op.lower())]


@lowering("TopK")
def _topk(ctx, node, ins, outs):
    """Exact and order-free: each element's rank is the count of elements before it in the sorted order
    (a reduction over the axis); position r of the result picks the element of rank r."""
    x = ins[0]
    axis, largest = node.attr("axis"), bool(node.attr("largest", 1))
    n = x.shape[axis]
    k1, k2 = te.reduce_axis(n, "k"), te.reduce_axis(n, "k")

    def at(i, j):
        i = list(i)
        return i[:axis] + [j] + i[axis + 1:]

    def rank(*i):
        here, other = x(*i), x(*at(i, k1))
        ahead = other > here if largest else other < here
        before = ahead | (te.equal(other, here) & (k1 < i[axis]))
        return te.sum(te.if_then_else(before, 1, 0), axis=k1)
    ranks = ctx.emit(x.shape, "int32", rank, "rank")

    def pick(*i):
        hit = te.equal(ranks(*at(i, k2)), i[axis])
        if node.attr("output", 0) == 1:
            return te.sum(te.if_then_else(hit, k2.var, 0), axis=k2)
        return te.sum(te.if_then_else(hit, x(*at(i, k2)), lit(0, x.dtype)), axis=k2)
    return [ctx.emit(outs[0].shape, outs[0].dtype, pick, "topk")]


@lowering("LRN")
def _lrn(ctx, node, ins, outs):
    x = ins[0]
    _float(node, x)
    size = node.attr("size")
    alpha, beta, bias = (float(node.attr(k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    before = (size - 1) // 2
    c_ = x.shape[1]
    shape, dtype = outs[0].shape, outs[0].dtype
    k = te.reduce_axis(size, "k")

    def window(n, *rest):
        c, spatial = rest[0], rest[1:]
        ch = c + k - before if before else c + k
        inside = te.all(ch >= 0, ch < c_)
        v = x(n, ch, *spatial)
        return te.sum(te.if_then_else(inside, v * v, lit(0, dtype)), axis=k)
    total = ctx.emit(shape, dtype, window, "window_sum")
    scale = alpha / size

    def y(*i):
        base = total(*i) * scale + bias
        return x(*i) * te.exp(te.log(base) * (-beta))
    return [ctx.emit(shape, dtype, y, "lrn")]
