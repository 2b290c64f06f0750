"""3x3 convolutions by Winograd's minimal filtering F(m x m, 3x3) (Lavin and Gray, 2015), m = 2 or 4, on
blocked layouts.

Each m x m block of outputs ("tile") is computed from the (m + 2) x (m + 2) input window under it with
(m + 2)^2 products per channel pair instead of 9 m^2 (16 instead of 36 for m = 2, 36 instead of 144 for
m = 4): the window is transformed (``V = B^T d B``), multiplied elementwise by the transformed filter
(``U = G g G^T``, computed once, from constant weights) and summed over input channels ((m + 2)^2
independent matrix products, tiles x C times C x K), then transformed back (``Y = A^T M A``). The
transforms are a few additions and multiplications by small constants on data in cache when the space
computes them per row of tiles (``schedules/winograd_space.py``). Stages, with ``T = ceil(P / m)`` tiles
per side and ``a = m + 2``:

- ``D`` the data, zero-padded by one and blocked, ``(N, C/cb, m T + 2, m T + 2, cb)``;
- ``V[n, e, ty, tx, co, ci]`` the transformed windows, ``e = a i + j`` the position in the a x a tile;
- ``M[n, e, ty, tx, k] = sum over c of V[n, e, ty, tx, c] * U[e, c, k]``;
- ``Y[n, ko, p, q, ki]`` the output, blocked, from the a^2 products of tile ``(p // m, q // m)``.

The transforms' coefficients are picked by the position (``e``, ``p % m``, ``q % m``); the space unrolls
those loops, so code generation keeps only each position's taps.

Rounding: F(2x2, 3x3) adds and subtracts values of similar size, within a few float32 ulps of the direct
sum; F(4x4, 3x3) scales by up to 8 and 1/24 and loses about 5 bits more (relative error about 1e-5 on
a ResNet layer against 1e-7; decision 046).
"""
from __future__ import annotations

import numpy as np

from tensorir import te
from tensorir.ops.library import check_dtype, check_sizes

# (B^T, G, A^T) per output tile side m
TRANSFORMS = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
                  [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}
TILES = tuple(TRANSFORMS)


def tiles(p: int, m: int = 2) -> int:
    """Tiles of side ``m`` along an output side of ``p``."""
    return -(-p // m)


def tile_of(positions: int) -> int:
    """The output tile side ``m`` of a transform with ``positions`` = (m + 2)^2 (the first axis of ``U``)."""
    for m in TILES:
        if (m + 2) ** 2 == positions:
            return m
    raise ValueError(f"winograd: {positions} transform positions match no tile of {TILES}")


def _check_tile(op: str, m: int) -> None:
    if m not in TRANSFORMS:
        raise ValueError(f"{op}: tile={m} is not offered; use one of {', '.join(map(str, TILES))}")


def winograd_weights(w: np.ndarray, m: int = 2) -> np.ndarray:
    """KCRS 3x3 weights -> ``U``, ``((m + 2)^2, C, K)``: ``U[a i + j, c, k] = (G w[k, c] G^T)[i, j]``."""
    _check_tile("winograd_weights", m)
    w = np.asarray(w)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"winograd_weights: expected KCRS weights with a 3x3 window, got shape {w.shape}")
    k, c = w.shape[:2]
    g = TRANSFORMS[m][1]
    u = np.einsum("ia,kcab,jb->ijck", g, w.astype(np.float64), g)
    return np.ascontiguousarray(u.reshape((m + 2) ** 2, c, k).astype(w.dtype))


def _combo(coefs, term, dtype):
    """``sum of c * term(a)`` over the nonzero coefficients (1 and -1 as additions and subtractions)."""
    out = None
    for a, c in enumerate(coefs):
        if c == 0:
            continue
        t = term(a)
        if out is None:
            out = t if c == 1 else (te.const(float(c), dtype) * t)
        elif c in (1, -1):
            out = out + t if c == 1 else out - t
        else:
            out = out + te.const(float(c), dtype) * t
    return out


def _pick(idx, rows, branch):
    """``branch(r)`` for the row ``r == idx`` of ``rows`` (a chain of selects; constant after unrolling)."""
    e = branch(len(rows) - 1)
    for r in range(len(rows) - 2, -1, -1):
        e = te.if_then_else(te.equal(idx, r), branch(r), e)
    return e


def winograd_stages(D, U, out_shape: tuple, kb: int, name: str = "Y"):
    """The stages after the padded blocked data ``D`` (``(N, C/cb, m T + 2, m T + 2, cb)``): the transformed
    windows, the products with ``U`` (``((m + 2)^2, C, K)``, which sets m) and the output
    ``(N, K/kb, P, Q, kb)`` (``out_shape``), named ``name``; returns the output tensor."""
    n_, cblocks, hp, wp, cb = D.shape
    _, ko_, p_, q_, _ = out_shape
    m = tile_of(U.shape[0])
    a_ = m + 2
    b_t, _, a_t = TRANSFORMS[m]
    t, tq = tiles(p_, m), tiles(q_, m)
    if hp < a_ + m * (t - 1) or wp < a_ + m * (tq - 1):
        raise ValueError(f"winograd_stages: padded data {hp}x{wp} does not cover {t}x{tq} tiles of {m}x{m}")
    k_ = U.shape[2]
    dtype = D.dtype

    def windows(n, e, ty, tx, co, ci):
        i, j = e // a_, e % a_

        def d(r, c):
            return D[n, co, m * ty + r, m * tx + c, ci]

        def row(c):     # (B^T d)[i, c]
            return _pick(i, b_t, lambda ir: _combo(b_t[ir], lambda r: d(r, c), dtype))
        return _pick(j, b_t, lambda jr: _combo(b_t[jr], row, dtype))
    V = te.compute((n_, a_ * a_, t, tq, cblocks, cb), windows, f"{name}_wino_in")
    rco, rci = te.reduce_axis(cblocks, "co"), te.reduce_axis(cb, "ci")
    M = te.compute((n_, a_ * a_, t, tq, k_),
                   lambda n, e, ty, tx, k: te.sum(V[n, e, ty, tx, rco, rci] * U[e, rco * cb + rci, k], axis=[rco, rci]),
                   f"{name}_wino_prod")

    def out(n, ko, p, q, ki):
        k = ko * kb + ki if ko_ > 1 else ki
        ty, tx, r, s = p // m, q // m, p % m, q % m

        def col(j):     # (A^T M)[r, j]
            return _pick(r, a_t, lambda rr: _combo(a_t[rr], lambda i: M[n, a_ * i + j, ty, tx, k], dtype))
        return _pick(s, a_t, lambda sr: _combo(a_t[sr], col, dtype))
    return te.compute(out_shape, out, name)


def padded_blocked(X, H: int, W: int, P: int, Q: int, name: str = "Xpad", m: int = 2):
    """Blocked data ``X`` (``(N, C/cb, H, W, cb)``) zero-padded by one on top and left and up to the
    last tile's window (tiles of ``m``) on the bottom and right."""
    n_, cblocks, _, _, cb = X.shape
    hp, wp = m * tiles(P, m) + 2, m * tiles(Q, m) + 2
    zero = te.const(0.0, X.dtype)
    return te.compute((n_, cblocks, hp, wp, cb),
                      lambda n, c, h, w, i: te.if_then_else(te.all(h >= 1, h < H + 1, w >= 1, w < W + 1),
                                                            X[n, c, h - 1, w - 1, i], zero), name)


def conv2d_winograd_nchwc(N: int, C: int, H: int, W: int, K: int, cb: int = 16, kb: int = 16,
                          dtype: str = "float32", tile: int = 2) -> list:
    """A 3x3 convolution, stride 1, padding 1, by F(tile x tile, 3x3) on blocked layouts.

    Data ``(N, C//cb, H, W, cb)``, transformed weights ``U`` ``((tile + 2)^2, C, K)``
    (:func:`winograd_weights` of the KCRS weights), output ``(N, K//kb, H, W, kb)``. Returns ``[X, U, Y]``.
    """
    op = "conv2d_winograd_nchwc"
    check_sizes(op, N=N, C=C, H=H, W=W, K=K, cb=cb, kb=kb)
    check_dtype(op, dtype)
    _check_tile(op, tile)
    for label, total, block in (("C", C, cb), ("K", K, kb)):
        if total % block:
            raise ValueError(f"{op}: {label}={total} must be a multiple of its block "
                             f"{'cb' if label == 'C' else 'kb'}={block}")
    X = te.placeholder((N, C // cb, H, W, cb), dtype, "X")
    U = te.placeholder(((tile + 2) ** 2, C, K), dtype, "U")
    D = padded_blocked(X, H, W, H, W, m=tile)
    return [X, U, winograd_stages(D, U, (N, K // kb, H, W, kb), kb)]


def reference(x: np.ndarray, u: np.ndarray, kb: int) -> np.ndarray:
    """numpy: blocked data ``x`` and transformed weights ``u`` -> the blocked output, by the matrix form
    of the transforms (``B^T d B``, ``A^T M A``) in float64."""
    n_, cblocks, h_, w_, cb = x.shape
    c_, k_ = u.shape[1:]
    m = tile_of(u.shape[0])
    a_ = m + 2
    b_t, _, a_t = TRANSFORMS[m]
    t, tq = tiles(h_, m), tiles(w_, m)
    d = np.zeros((n_, c_, m * t + 2, m * tq + 2))
    d[:, :, 1:h_ + 1, 1:w_ + 1] = x.transpose(0, 1, 4, 2, 3).reshape(n_, c_, h_, w_)
    win = np.lib.stride_tricks.sliding_window_view(d, (a_, a_), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ia,nctuab,jb->nijtuc", b_t, win, b_t).reshape(n_, a_ * a_, t, tq, c_)
    prod = np.einsum("netuc,eck->netuk", v, u.astype(np.float64)).reshape(n_, a_, a_, t, tq, k_)
    y = np.einsum("ri,nijtuk,sj->nktrus", a_t, prod, a_t).reshape(n_, k_, m * t, m * tq)[:, :, :h_, :w_]
    return np.ascontiguousarray(y.reshape(n_, k_ // kb, kb, h_, w_).transpose(0, 1, 3, 4, 2)).astype(x.dtype)
