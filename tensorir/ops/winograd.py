"""3x3 convolutions by Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray, 2015), on blocked layouts.

Each 2x2 block of outputs ("tile") is computed from the 4x4 input window under it with 16 products
per channel pair instead of 36: the window is transformed (``V = B^T d B``, additions only), multiplied
elementwise by the transformed filter (``U = G g G^T``, computed once, from constant weights) and
summed over input channels (16 independent matrix products, tiles x C times C x K), then transformed
back (``Y = A^T M A``, additions only). The products do 4/9 of a direct convolution's multiplications;
the transforms are additions on data in cache when the space computes them per row of tiles
(``schedules/winograd_space.py``). Stages, with ``T = ceil(P / 2)`` tiles per side:

- ``D`` the data, zero-padded by one and blocked, ``(N, C/cb, 2T + 2, 2T + 2, cb)``;
- ``V[n, e, ty, tx, co, ci]`` the transformed windows, ``e = 4 i + j`` the position in the 4x4 tile;
- ``M[n, e, ty, tx, k] = sum over c of V[n, e, ty, tx, c] * U[e, c, k]``;
- ``Y[n, ko, p, q, ki]`` the output, blocked, from the 16 products of tile ``(p // 2, q // 2)``.

Rounding: the transforms add and subtract values of similar size (no scaling but G's halves), so the
result is within a few float32 ulps of the direct sum (decision 044).
"""
from __future__ import annotations

import numpy as np

from tensorir import te
from tensorir.ops.library import check_dtype, check_sizes

B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
TILE = 2        # outputs per tile side
WINDOW = 4      # inputs per tile side


def tiles(p: int) -> int:
    """Tiles along an output side of ``p``."""
    return -(-p // TILE)


def winograd_weights(w: np.ndarray) -> np.ndarray:
    """KCRS 3x3 weights -> ``U``, ``(16, C, K)``: ``U[4 i + j, c, k] = (G w[k, c] G^T)[i, j]``."""
    w = np.asarray(w)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"winograd_weights: expected KCRS weights with a 3x3 window, got shape {w.shape}")
    k, c = w.shape[:2]
    u = np.einsum("ia,kcab,jb->ijck", G, w.astype(np.float64), G)
    return np.ascontiguousarray(u.reshape(16, c, k).astype(w.dtype))


# B^T's rows as two signed taps: row i of B^T d is d[first(i)] + sign(i) * d[second(i)]
def _first(i):
    return te.min(i, 4 - i)                      # 0, 1, 2, 1 (bounds [0, 3]: a task pads only its rows)


def _second(i):
    return 2 + (i // 2) * (2 * (i % 2) - 1)      # 2, 2, 1, 3


def _sign(i, dtype):
    return te.if_then_else(te.equal(i, 1), te.const(1.0, dtype), te.const(-1.0, dtype))


def winograd_stages(D, U, out_shape: tuple, kb: int, name: str = "Y"):
    """The stages after the padded blocked data ``D`` (``(N, C/cb, 2T+2, 2T+2, cb)``): the transformed
    windows, the products with ``U`` (``(16, C, K)``) and the output ``(N, K/kb, P, Q, kb)``
    (``out_shape``), named ``name``; returns the output tensor."""
    n_, cblocks, hp, wp, cb = D.shape
    _, ko_, p_, q_, _ = out_shape
    t = tiles(p_)
    tq = tiles(q_)
    if hp < WINDOW + TILE * (t - 1) or wp < WINDOW + TILE * (tq - 1):
        raise ValueError(f"winograd_stages: padded data {hp}x{wp} does not cover {t}x{tq} tiles")
    k_ = U.shape[2]
    dtype = D.dtype

    def windows(n, e, ty, tx, co, ci):
        i, j = e // 4, e % 4

        def d(a, b):
            return D[n, co, TILE * ty + a, TILE * tx + b, ci]

        def row(b):     # (B^T d)[i, b]
            return d(_first(i), b) + _sign(i, dtype) * d(_second(i), b)
        return row(_first(j)) + _sign(j, dtype) * row(_second(j))
    V = te.compute((n_, 16, t, tq, cblocks, cb), windows, f"{name}_wino_in")
    rco, rci = te.reduce_axis(cblocks, "co"), te.reduce_axis(cb, "ci")
    M = te.compute((n_, 16, t, tq, k_),
                   lambda n, e, ty, tx, k: te.sum(V[n, e, ty, tx, rco, rci] * U[e, rco * cb + rci, k], axis=[rco, rci]),
                   f"{name}_wino_prod")

    def out(n, ko, p, q, ki):
        k = ko * kb + ki if ko_ > 1 else ki
        ty, tx, r, s = p // 2, q // 2, p % 2, q % 2

        def m(i, j):
            return M[n, 4 * i + j, ty, tx, k]

        def col(j):     # (A^T M)[r, j]
            return te.if_then_else(te.equal(r, 0), m(0, j) + m(1, j) + m(2, j), m(1, j) - m(2, j) - m(3, j))
        return te.if_then_else(te.equal(s, 0), col(0) + col(1) + col(2), col(1) - col(2) - col(3))
    return te.compute(out_shape, out, name)


def padded_blocked(X, H: int, W: int, P: int, Q: int, name: str = "Xpad"):
    """Blocked data ``X`` (``(N, C/cb, H, W, cb)``) zero-padded by one on top and left and up to the
    last tile's window on the bottom and right."""
    n_, cblocks, _, _, cb = X.shape
    hp, wp = TILE * tiles(P) + 2, TILE * tiles(Q) + 2
    zero = te.const(0.0, X.dtype)
    return te.compute((n_, cblocks, hp, wp, cb),
                      lambda n, c, h, w, i: te.if_then_else(te.all(h >= 1, h < H + 1, w >= 1, w < W + 1),
                                                            X[n, c, h - 1, w - 1, i], zero), name)


def conv2d_winograd_nchwc(N: int, C: int, H: int, W: int, K: int, cb: int = 16, kb: int = 16,
                          dtype: str = "float32") -> list:
    """A 3x3 convolution, stride 1, padding 1, by F(2x2, 3x3) on blocked layouts.

    Data ``(N, C//cb, H, W, cb)``, transformed weights ``U`` ``(16, C, K)`` (:func:`winograd_weights` of
    the KCRS weights), output ``(N, K//kb, H, W, kb)``. Returns ``[X, U, Y]``.
    """
    op = "conv2d_winograd_nchwc"
    check_sizes(op, N=N, C=C, H=H, W=W, K=K, cb=cb, kb=kb)
    check_dtype(op, dtype)
    for label, total, block in (("C", C, cb), ("K", K, kb)):
        if total % block:
            raise ValueError(f"{op}: {label}={total} must be a multiple of its block "
                             f"{'cb' if label == 'C' else 'kb'}={block}")
    X = te.placeholder((N, C // cb, H, W, cb), dtype, "X")
    U = te.placeholder((16, C, K), dtype, "U")
    D = padded_blocked(X, H, W, H, W)
    return [X, U, winograd_stages(D, U, (N, K // kb, H, W, kb), kb)]


def reference(x: np.ndarray, u: np.ndarray, kb: int) -> np.ndarray:
    """numpy: blocked data ``x`` and transformed weights ``u`` -> the blocked output, by the matrix form
    of the transforms (``B^T d B``, ``A^T M A``) in float64."""
    n_, cblocks, h_, w_, cb = x.shape
    c_, k_ = u.shape[1:]
    t, tq = tiles(h_), tiles(w_)
    d = np.zeros((n_, c_, TILE * t + 2, TILE * tq + 2))
    d[:, :, 1:h_ + 1, 1:w_ + 1] = x.transpose(0, 1, 4, 2, 3).reshape(n_, c_, h_, w_)
    win = np.lib.stride_tricks.sliding_window_view(d, (WINDOW, WINDOW), axis=(2, 3))[:, :, ::TILE, ::TILE]
    v = np.einsum("ia,nctuab,jb->nijtuc", B_T, win, B_T).reshape(n_, 16, t, tq, c_)
    m = np.einsum("netuc,eck->netuk", v, u.astype(np.float64)).reshape(n_, 4, 4, t, tq, k_)
    y = np.einsum("ri,nijtuk,sj->nktrus", A_T, m, A_T).reshape(n_, k_, TILE * t, TILE * tq)[:, :, :h_, :w_]
    return np.ascontiguousarray(y.reshape(n_, k_ // kb, kb, h_, w_).transpose(0, 1, 3, 4, 2)).astype(x.dtype)
