"""Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions: the transforms against a direct convolution in numpy, the
built-in's kernels under the space's decisions (odd sizes, edge tiles, channel blocks that are not
vectors), and models whose 3x3 convolutions the graph level computes this way, against onnxruntime."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import Schedule
from schedules.decisions import FixedDecisions, RandomDecisions
from schedules.space import GeneratedSpace
from schedules.winograd_space import find_winograd, start_tile
from tensorir.ops import winograd as W
from tensorir.ops.library import pack_nchwc, unpack_nchwc
from tensorir.runtime import build


def direct_conv(x, w):
    """3x3, stride 1, padding 1, NCHW, float64."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], h, wd))
    for r in range(3):
        for s in range(3):
            y += np.einsum("kc,nchw->nkhw", w[:, :, r, s], xp[:, :, r:r + h, s:s + wd])
    return y


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 9), k=st.integers(1, 9), h=st.integers(1, 11), wd=st.integers(1, 11),
       m=st.sampled_from(W.TILES))
def test_transforms_compute_the_direct_convolution(n, c, k, h, wd, m):
    rng = np.random.default_rng(n * 1000 + c * 100 + k * 10 + h + wd)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    got = unpack_nchwc(W.reference(pack_nchwc(x, c), W.winograd_weights(w, m), k))
    want = direct_conv(x, w)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


def _inputs(n, c, h, wd, k, cb, seed=0, m=2):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((k, c, 3, 3)).astype(np.float32)
    return x, w, pack_nchwc(x, cb), W.winograd_weights(w, m)


@pytest.mark.parametrize("shape", [
    dict(N=1, C=16, H=15, W=15, K=32, cb=16, kb=16),     # odd sides: a last tile half outside
    dict(N=2, C=12, H=9, W=14, K=20, cb=12, kb=10),      # blocks that are not vectors, two images
    dict(N=1, C=32, H=28, W=28, K=64, cb=32, kb=32),     # a layer's shape: full register tiles
    dict(N=1, C=16, H=17, W=22, K=32, cb=16, kb=16, tile=4),   # F(4x4): last tiles 1 and 2 wide
    dict(N=2, C=24, H=9, W=7, K=40, cb=8, kb=8, tile=4),       # F(4x4): small blocks, two images
])
def test_heuristic_kernel_matches_numpy(shape):
    tensors = W.conv2d_winograd_nchwc(**shape)
    space = GeneratedSpace(tensors)
    decisions = space.default_decisions()
    assert any(name.endswith(".kv") for name in decisions)       # the Winograd rule scheduled it
    kernel = build(space.apply(FixedDecisions(decisions)).lower())
    x, w, xb, u = _inputs(shape["N"], shape["C"], shape["H"], shape["W"], shape["K"], shape["cb"],
                          m=shape.get("tile", 2))
    y = np.empty(tensors[-1].shape, np.float32)
    kernel(xb, u, y)
    want = direct_conv(x, w)
    assert np.abs(unpack_nchwc(y) - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("m", W.TILES)
def test_random_decisions_stay_exact(m):
    """Register tiles that do not divide the tiles or channels, row blocks past the plane, channel groups."""
    shape = dict(N=1, C=24, H=13, W=11, K=48, cb=8, kb=16, tile=m)
    tensors = W.conv2d_winograd_nchwc(**shape)
    space = GeneratedSpace(tensors)
    x, w, xb, u = _inputs(1, 24, 13, 11, 48, 8, seed=3, m=m)
    want = direct_conv(x, w)
    seen = set()
    for seed in range(8):
        src = RandomDecisions(seed)
        s = space.apply(src)
        seen.add(tuple(sorted(src.decisions.items())))
        y = np.empty(tensors[-1].shape, np.float32)
        build(s.lower())(xb, u, y)
        assert np.abs(unpack_nchwc(y) - want).max() <= 1e-5 * np.abs(want).max(), src.decisions
    assert len(seen) >= 4


def test_rule_recognizes_the_pipeline_and_nothing_else():
    tensors = W.conv2d_winograd_nchwc(N=1, C=16, H=8, W=8, K=16, cb=16, kb=16)
    (info,) = find_winograd(Schedule(tensors).stage_graph()).values()
    assert (info.tiles, info.tiles_q, info.K, info.C, info.tile) == (4, 4, 16, 16, 2) and info.pad_stage == "Xpad"
    tensors = W.conv2d_winograd_nchwc(N=1, C=16, H=9, W=8, K=16, cb=16, kb=16, tile=4)
    (info,) = find_winograd(Schedule(tensors).stage_graph()).values()
    assert (info.tiles, info.tiles_q, info.tile) == (3, 2, 4)
    from tensorir import ops
    for other in (ops.conv2d(1, 16, 8, 8, 16, 3, 3, 1, 1), ops.batch_matmul(16, 8, 8, 8)):
        assert not find_winograd(Schedule(other).stage_graph())


def test_start_tile_fills_the_registers():
    assert start_tile(28, 64, 16, 32) == (64, 7)       # AVX-512: 7 x 4 accumulators + 4 vectors of U
    kv, qt = start_tile(28, 64, 8, 16)                 # AVX2: 16 registers
    assert qt * kv // 8 + kv // 8 <= 15


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="3x3"):
        W.winograd_weights(np.zeros((4, 4, 5, 5), np.float32))
    with pytest.raises(ValueError, match="C=10 must be a multiple of its block cb=4"):
        W.conv2d_winograd_nchwc(1, 10, 8, 8, 8, cb=4, kb=8)
    with pytest.raises(ValueError, match="tile=3 is not offered; use one of 2, 4"):
        W.conv2d_winograd_nchwc(1, 8, 8, 8, 8, cb=8, kb=8, tile=3)
    with pytest.raises(ValueError, match="tile=6 is not offered"):
        W.winograd_weights(np.zeros((4, 4, 3, 3), np.float32), 6)


# ------------------------------------------------------------------ models

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
from tests.test_model_blocked import Net, _check  # noqa: E402
from tuner.model_api import load  # noqa: E402
from tuner.model_compile import plan_graph  # noqa: E402


def _winograd_groups(model, positions=(16, 36)) -> int:
    """Groups with a Winograd product of ``positions`` (16: F(2x2, 3x3), 36: F(4x4, 3x3))."""
    plan = plan_graph(load(model))
    return sum(any(t.name.endswith("_wino_prod") and t.shape[1] in positions for t in _stages(lw.tensors[-1]))
               for lw in plan.lowered)


def _stages(t, seen=None):
    seen = set() if seen is None else seen
    if id(t) in seen:
        return []
    seen.add(id(t))
    out = [t]
    for i in t.inputs:
        out += _stages(i, seen)
    return out


def test_residual_blocks_by_winograd_match_onnxruntime():
    """A ResNet-style block at odd sizes and channel counts: 3x3 convs by Winograd (bias, ReLU and the
    residual sum in the output transform), a strided 3x3 and a small plane computed directly."""
    n = Net([1, 16, 17, 15])
    a = n.op("Relu", [n.conv("x", 16, 24, 3, pads=(1, 1, 1, 1))])
    b = n.conv(a, 24, 16, 3, pads=(1, 1, 1, 1))
    c = n.op("Relu", [n.op("Add", [b, "x"])])
    d = n.conv(c, 16, 40, 3, stride=2, pads=(1, 1, 1, 1))          # stride 2: direct
    e = n.op("Relu", [n.conv(d, 40, 40, 3, pads=(1, 1, 1, 1))])     # 9x8 outputs, 20 tiles: direct
    model = n.model([n.op("GlobalAveragePool", [n.op("Add", [e, d])]), c])
    assert _winograd_groups(model, (16,)) == 2
    _check(model)
    _check(model, threads=2)


def test_wide_plane_with_many_channel_blocks_matches_onnxruntime():
    n = Net([1, 64, 29, 30])
    a = n.op("Relu", [n.conv("x", 64, 96, 3, pads=(1, 1, 1, 1))])   # read by a conv: blocked
    model = n.model([n.conv(a, 96, 8, 1)])
    assert _winograd_groups(model, (36,)) == 1
    _check(model, threads=2)


def test_f4_residual_block_matches_onnxruntime():
    """A 21x19 plane (6x5 tiles of 4x4, the last ones partly outside): both 3x3 convs by F(4x4, 3x3), the
    second with the residual sum and ReLU in its output transform; the output read row-major."""
    n = Net([1, 32, 21, 19])
    a = n.op("Relu", [n.conv("x", 32, 32, 3, pads=(1, 1, 1, 1))])
    b = n.op("Relu", [n.op("Add", [n.conv(a, 32, 32, 3, pads=(1, 1, 1, 1)), "x"])])
    model = n.model([n.conv(b, 32, 16, 1)])
    assert _winograd_groups(model, (36,)) == 2
    _check(model)
    _check(model, threads=2)


def test_start_tile_takes_whole_tiles_of_the_channels_and_the_row_where_it_can():
    # AVX2, ResNet's 256@14 (7 tiles a row): 3 vectors x 4 tiles left a ragged channel tile per group of
    # 128 and a guarded edge of 3 tiles (8 GFLOP/s); 1 vector x 7 tiles divides both (65 GFLOP/s)
    assert start_tile(7, 256, 8, 16) == (8, 7)
    for tiles_q, k, lanes, regs in [(7, 256, 8, 16), (14, 128, 8, 16), (4, 512, 8, 16), (10, 96, 16, 32)]:
        kv, qt = start_tile(tiles_q, k, lanes, regs)
        assert k % kv == 0 and tiles_q % qt == 0 and qt * kv // lanes + kv // lanes <= regs - (regs < 32)
